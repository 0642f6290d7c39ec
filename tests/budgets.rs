//! Budgets, costs and loops through the real binary against the mock: a role's
//! `maxTokens`, `timeout` and `maxTurns` stop its sub-agent gracefully and the lead
//! carries on with the partial work; `--max-tokens`, `--max-cost` and `--timeout`
//! stop the lead (exit 1); the same call five turns in a row stops the agent; and
//! the cost the `--json` terminal event and `orchestrate sessions` report follows
//! the prices in `[model_info]`, sub-agents rolled up.

use std::process::Output;

use serde_json::{Value, json};

use crate::cli::{run_on, text};
use crate::support::harness::DEADLINE;
use crate::support::mock_llm::{
    End, Gate, MockLlm, Recorded, Reply, StreamReply, ev_finish, ev_role, ev_text,
};

const WORKER: &str = "You are a worker.";

/// Writes the person's own `config.toml` (the tests' HOME is the workspace):
/// prices for a model the built-in table does not know come only from there.
fn user_config(home: &std::path::Path, text: &str) {
    let dir = home.join(".config/orchestrate");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), text).unwrap();
}

/// A workspace with `notes.txt`, `other.txt` and a `worker` role (tools: Read) whose
/// frontmatter adds `worker_front`.
fn workspace(worker_front: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("agents/worker.md"),
        format!(
            "---\nname: worker\ndescription: does one piece\ntools: Read\n{worker_front}---\n{WORKER}\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "the notes\n").unwrap();
    std::fs::write(dir.path().join("other.txt"), "other notes\n").unwrap();
    dir
}

fn is_worker(request: &Recorded) -> bool {
    request.body["messages"][0]["content"] == WORKER
}

/// The contents of the tool results a request carries, in order.
fn results(request: &Recorded) -> Vec<String> {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// A streamed turn that says `says`, then makes `calls`.
fn says_then_calls(says: &str, calls: &[(&str, &str, Value)]) -> Reply {
    match Reply::tool_calls(calls) {
        Reply::Stream(mut s) => {
            s.chunks.insert(1, ev_text(says));
            Reply::Stream(s)
        }
        other => other,
    }
}

/// A turn that says `says`, then reads `path`.
fn says_then_reads(id: &str, says: &str, path: &str) -> Reply {
    says_then_calls(says, &[(id, "Read", json!({ "file_path": path }))])
}

/// A turn that says `says`, then hands `prompt` to a worker.
fn says_then_delegates(says: &str, prompt: &str) -> Reply {
    let args = json!({"description": "one piece", "prompt": prompt, "subagent_type": "worker"});
    says_then_calls(says, &[("t1", "Task", args)])
}

/// A turn that says `says` and then holds its stream open for good: no finish,
/// no usage, no end.
fn says_then_hangs(says: &str) -> Reply {
    Reply::Stream(StreamReply {
        chunks: vec![ev_role(), ev_text(says), ev_finish("stop")],
        ttft: std::time::Duration::ZERO,
        delay: std::time::Duration::ZERO,
        end: End::HoldAfter(2, Gate::new()),
    })
}

/// `reply` with its usage chunk replaced: `prompt` prompt tokens (`cached` of them
/// read from the provider's cache) and `completion` generated ones.
fn with_usage(reply: Reply, prompt: u64, cached: u64, completion: u64) -> Reply {
    let Reply::Stream(mut s) = reply else {
        panic!("only a stream carries a usage chunk")
    };
    let usage = s.chunks.last_mut().unwrap();
    assert!(usage.contains("\"usage\""), "the last chunk is the usage");
    *usage = json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "mock-model",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": { "cached_tokens": cached },
        },
    })
    .to_string();
    Reply::Stream(s)
}

/// The events `--json` printed, one a line.
fn events(out: &Output) -> Vec<Value> {
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The one terminal event of the lead (`lead`) or of the worker.
fn terminal(events: &[Value], lead: bool) -> &Value {
    let found: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "terminal" && e.get("parent").is_none() == lead)
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found[0]
}

/// `cost_usd` of every `turn_finished` event of the lead (`lead`) or of the worker.
fn turn_costs(events: &[Value], lead: bool) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["type"] == "turn_finished" && e.get("parent").is_none() == lead)
        .map(|e| e["cost_usd"].clone())
        .collect()
}

/// What a sub-agent stopped for `reason` hands its parent, up to its duration.
fn stopped_result(reason: &str, partial: &str, turns: u32, tools: u32, tokens: u64) -> String {
    format!(
        "partial ({reason})\n[the worker sub-agent was stopped ({reason}) before it finished; its work so far:]\n\
         {partial}\n\n[worker: {turns} turns, {tools} tool calls, {tokens} tokens, "
    )
}

/// The lead's result of its one Task call, from its last request.
fn lead_task_result(mock: &MockLlm) -> String {
    let requests = mock.requests();
    let last = requests.iter().rfind(|r| !is_worker(r)).unwrap();
    let results = results(last);
    assert_eq!(results.len(), 1, "{results:?}");
    results[0].clone()
}

/// Asserts `usd` is `cents` cents, to within float noise.
fn assert_dollars(usd: &Value, cents: u32) {
    let usd = usd.as_f64().unwrap_or_else(|| panic!("not a cost: {usd}"));
    let expected = f64::from(cents) / 100.0;
    assert!((usd - expected).abs() < 1e-9, "{usd} != {expected}");
}

/// A lead that delegates one piece, then answers "carried on" once it has the
/// result; the worker answers with `worker(its results so far)`.
async fn delegating(worker: impl Fn(&[String]) -> Reply + Send + Sync + 'static) -> MockLlm {
    MockLlm::start_with(move |request, _| {
        let results = results(request);
        if is_worker(request) {
            return worker(&results);
        }
        if results.is_empty() {
            return says_then_delegates("delegating", "look at the notes");
        }
        Reply::text("carried on")
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_token_budget_stops_the_sub_agent_and_the_lead_carries_on_with_its_work() {
    let mock = delegating(|results| match results.len() {
        0 => says_then_reads("r1", "found half of it", "notes.txt"),
        _ => Reply::text("the worker should have been stopped"),
    })
    .await;
    let dir = workspace("maxTokens: 10\n");
    let out = run_on(&mock, dir.path(), &["--json", "summarize"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");

    let requests = mock.requests();
    assert_eq!(
        requests.iter().filter(|r| is_worker(r)).count(),
        1,
        "no worker turn past its budget"
    );
    let events = events(&out);
    let worker = terminal(&events, false);
    assert_eq!(
        (
            &worker["outcome"],
            &worker["reason"],
            &worker["partial"],
            &worker["stats"]["turns"],
            &worker["stats"]["tool_calls"]
        ),
        (
            &json!("partial"),
            &json!("budget: tokens"),
            &json!("found half of it"),
            &json!(1),
            &json!(0)
        )
    );
    // The turn that spent the budget asked for a Read: it was not run.
    assert!(
        !events
            .iter()
            .any(|e| e["type"] == "tool_started" && e["call_id"] == "r1"),
        "a call past the budget ran"
    );

    let result = lead_task_result(&mock);
    let expected = stopped_result("budget: tokens", "found half of it", 1, 0, 15);
    assert!(result.starts_with(&expected), "{result}");
    let lead = terminal(&events, true);
    assert_eq!(
        (&lead["outcome"], &lead["text"]),
        (&json!("completed"), &json!("carried on"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_tokens_stops_the_lead_at_its_next_turn_and_exits_one() {
    let mock = MockLlm::start(vec![
        says_then_reads("r1", "looking at the notes", "notes.txt"),
        says_then_reads("r2", "still looking", "other.txt"),
        Reply::text("the lead should have been stopped"),
    ])
    .await;
    let dir = workspace("");
    // 15 tokens a turn: the first turn leaves room for a second, the second spends it.
    let args = ["--json", "--max-tokens", "20", "read everything"];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "orchestrate: stopped (budget: tokens) before the lead finished\n"
    );
    assert_eq!(mock.request_count(), 2);
    let events = events(&out);
    let lead = terminal(&events, true);
    assert_eq!(
        (
            &lead["outcome"],
            &lead["reason"],
            &lead["partial"],
            &lead["stats"]["turns"],
            &lead["stats"]["tool_calls"]
        ),
        (
            &json!("partial"),
            &json!("budget: tokens"),
            &json!("still looking"),
            &json!(2),
            &json!(2)
        )
    );
    assert_eq!(
        events.last(),
        Some(lead),
        "the lead's end is the last event"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_cost_counts_the_sub_agents_spending_and_stops_the_lead() {
    // 10 prompt and 5 output tokens a turn at $1000 and $2000 a million: $0.02 a
    // turn. The lead's turn and the worker's spend $0.04 of the run's $0.03.
    let mock = delegating(|_| Reply::text("worker done")).await;
    let dir = workspace("");
    user_config(
        dir.path(),
        "[model_info.\"m\"]\ninput_price = 1000.0\noutput_price = 2000.0\n",
    );
    let args = ["--json", "--max-cost", "0.03", "delegate it"];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "orchestrate: stopped (budget: cost) before the lead finished\n"
    );
    assert_eq!(mock.request_count(), 2, "the lead asks no second time");
    let events = events(&out);
    let worker = terminal(&events, false);
    assert_eq!(
        (&worker["outcome"], &worker["text"]),
        (&json!("completed"), &json!("worker done")),
        "the worker's one turn ends it before any boundary"
    );
    let lead = terminal(&events, true);
    assert_eq!(
        (&lead["outcome"], &lead["reason"], &lead["partial"]),
        (
            &json!("partial"),
            &json!("budget: cost"),
            &json!("delegating")
        )
    );
    assert_dollars(&lead["stats"]["cost_usd"], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_timeout_cuts_the_lead_s_stream_and_keeps_what_it_said() {
    let mock = MockLlm::start(vec![says_then_hangs("half a thought")]).await;
    let dir = workspace("");
    let args = ["--json", "--timeout", "1s", "think"];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "orchestrate: timed out before the lead finished; what ran was stopped\n"
    );
    let events = events(&out);
    let lead = terminal(&events, true);
    assert_eq!(
        (&lead["outcome"], &lead["partial"]),
        (&json!("timed_out"), &json!("half a thought"))
    );
    assert_eq!(mock.request_count(), 1);
    assert!(
        mock.wait_for_disconnects(1, DEADLINE).await,
        "the held stream was cut"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_timeout_kills_a_running_command_and_what_it_left_behind() {
    let command = "echo started; setsid sh -c 'readlink /proc/self > detached; exec sleep 600' & \
                   while [ ! -s detached ]; do sleep 0.01; done; sleep 600";
    let mock = MockLlm::start(vec![Reply::tool_calls(&[(
        "b1",
        "Bash",
        json!({"command": command}),
    )])])
    .await;
    let dir = workspace("");
    let args = [
        "--json",
        "--permission-mode",
        "bypassPermissions",
        "--timeout",
        "3s",
        "wait a long time",
    ];
    // Bounded by the harness's deadline: the command alone would take ten minutes.
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let events = events(&out);
    let lead = terminal(&events, true);
    assert_eq!(lead["outcome"], json!("timed_out"), "{lead}");
    let finished = events
        .iter()
        .find(|e| e["type"] == "tool_finished")
        .expect("the call ended");
    assert_eq!(finished["is_error"], json!(true));
    // Nothing it started lives on, the detached sleeper included.
    let detached: i32 = std::fs::read_to_string(dir.path().join("detached"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let gone = std::fs::read_to_string(format!("/proc/{detached}/stat"))
        .map_or(true, |stat| stat.contains(") Z "));
    assert!(gone, "the detached process {detached} outlived the run");
    // Its output so far is in the journal.
    let state = crate::support::harness::state(dir.path());
    let lead_id = orchestrate::runs::list(&state)[0].id;
    let journal = std::fs::read_to_string(state.journal(lead_id)).unwrap();
    assert!(
        journal.contains("cancelled before it ended; its output so far:\\nstarted\\n"),
        "{journal}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_timeout_stops_the_sub_agent_and_the_lead_carries_on() {
    let mock = delegating(|_| says_then_hangs("half a thought")).await;
    let dir = workspace("timeout: 1s\n");
    let out = run_on(&mock, dir.path(), &["--json", "delegate it"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let events = events(&out);
    let worker = terminal(&events, false);
    assert_eq!(
        (&worker["outcome"], &worker["partial"]),
        (&json!("timed_out"), &json!("half a thought"))
    );
    // The cut turn sent no usage: the worker spent no tokens that were counted.
    let result = lead_task_result(&mock);
    let expected = "timed_out\n[the worker sub-agent's time ran out before it finished; its work so far:]\n\
         half a thought\n\n[worker: 1 turns, 0 tool calls, 0 tokens, ";
    assert!(result.starts_with(expected), "{result}");
    let lead = terminal(&events, true);
    assert_eq!(
        (&lead["outcome"], &lead["text"]),
        (&json!("completed"), &json!("carried on"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_timeout_bounds_one_sub_agent_whose_role_has_none() {
    let mock = MockLlm::start_with(|request, _| {
        let results = results(request);
        if is_worker(request) {
            return says_then_hangs("a start");
        }
        if results.is_empty() {
            let args = json!({"description": "one piece", "prompt": "look", "subagent_type": "worker", "timeout": 1});
            return says_then_calls("delegating", &[("t1", "Task", args)]);
        }
        Reply::text("carried on")
    })
    .await;
    let dir = workspace("");
    let out = run_on(&mock, dir.path(), &["--json", "delegate it"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let events = events(&out);
    let worker = terminal(&events, false);
    assert_eq!(
        (&worker["outcome"], &worker["partial"]),
        (&json!("timed_out"), &json!("a start"))
    );
    assert!(lead_task_result(&mock).starts_with("timed_out\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_children_on_two_slots_one_timing_out_all_reach_their_outcomes() {
    let mock = MockLlm::start_with(|request, _| {
        let results = results(request);
        if is_worker(request) {
            let prompt = request.body["messages"][1]["content"]
                .as_str()
                .unwrap_or("");
            return match prompt {
                "hang" => says_then_hangs("a start"),
                other => Reply::text(format!("did {other}")),
            };
        }
        if results.is_empty() {
            let calls: Vec<(String, Value)> = ["a", "hang", "b", "c", "d"]
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let mut args =
                        json!({"description": p, "prompt": p, "subagent_type": "worker"});
                    if *p == "hang" {
                        args["timeout"] = json!(1);
                    }
                    (format!("t{i}"), args)
                })
                .collect();
            let calls: Vec<(&str, &str, Value)> = calls
                .iter()
                .map(|(id, a)| (id.as_str(), "Task", a.clone()))
                .collect();
            return says_then_calls("five at once", &calls);
        }
        Reply::text("carried on")
    })
    .await;
    let dir = workspace("");
    let args = ["--json", "--max-parallel", "2", "delegate five"];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let events = events(&out);
    let mut outcomes: Vec<String> = events
        .iter()
        .filter(|e| e["type"] == "terminal" && e.get("parent").is_some())
        .map(|e| e["outcome"].as_str().unwrap().to_owned())
        .collect();
    outcomes.sort();
    assert_eq!(
        outcomes,
        [
            "completed",
            "completed",
            "completed",
            "completed",
            "timed_out"
        ]
    );
    let lead = terminal(&events, true);
    assert_eq!(lead["outcome"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_turns_stops_the_sub_agent_gracefully_and_the_lead_carries_on() {
    let mock = delegating(|results| match results.len() {
        0 => says_then_reads("r1", "read one", "notes.txt"),
        1 => says_then_reads("r2", "read two", "other.txt"),
        _ => Reply::text("the worker should have been stopped"),
    })
    .await;
    let dir = workspace("maxTurns: 2\n");
    let out = run_on(&mock, dir.path(), &["-q", "delegate it"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "carried on\n");
    let requests = mock.requests();
    assert_eq!(requests.iter().filter(|r| is_worker(r)).count(), 2);
    let result = lead_task_result(&mock);
    let expected = stopped_result("budget: turns", "read two", 2, 2, 30);
    assert!(result.starts_with(&expected), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_read_five_turns_in_a_row_gets_a_note_then_stops_the_agent() {
    let mock = MockLlm::start_with(|request, _| {
        let n = results(request).len() + 1;
        if n > 5 {
            return Reply::text("the lead should have been stopped");
        }
        says_then_reads(&format!("r{n}"), &format!("try {n}"), "notes.txt")
    })
    .await;
    let dir = workspace("");
    let out = run_on(&mock, dir.path(), &["--json", "read the notes"], &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "orchestrate: stopped (loop) before the lead finished\n"
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 5, "no turn after the fifth call");
    let note = |n: u32| {
        format!(
            "\n\n[Note: you have now made this exact call, with these arguments, {n} times in a \
             row; its result will not change. Do something else, or give your answer. At 5 \
             times in a row you will be stopped.]"
        )
    };
    let sent = results(&requests[4]);
    assert_eq!(sent.len(), 4);
    let plain = &sent[0];
    assert!(plain.contains("the notes"), "{plain}");
    assert_eq!(
        sent,
        [
            plain.clone(),
            plain.clone(),
            format!("{plain}{}", note(3)),
            format!("{plain}{}", note(4)),
        ]
    );
    assert_eq!(
        results(&requests[3])[2],
        sent[2],
        "the third result carried the note when it was first sent"
    );

    let events = events(&out);
    let fifth = events
        .iter()
        .find(|e| e["type"] == "tool_finished" && e["call_id"] == "r5")
        .unwrap();
    assert_eq!(fifth["is_error"], true);
    assert!(
        fifth["preview"]
            .as_str()
            .unwrap()
            .starts_with("Error: this call was not run: it is the same call, with the same arguments, made 5 times in a row."),
        "{fifth}"
    );
    let lead = terminal(&events, true);
    assert_eq!(
        (
            &lead["outcome"],
            &lead["reason"],
            &lead["partial"],
            &lead["stats"]["turns"]
        ),
        (
            &json!("partial"),
            &json!("loop"),
            &json!("try 5"),
            &json!(5)
        )
    );
}

/// A lead that delegates, a worker that answers, and the lead's answer, each turn
/// with its own usage:
/// - lead, 1st: 100k prompt (40k cached), 10k out: 60k × $2 + 40k × $0.5 + 10k × $8 = $0.22
/// - worker: 50k prompt, 5k out: 50k × $2 + 5k × $8 = $0.14
/// - lead, 2nd: 120k prompt (100k cached), 2.5k out: 20k × $2 + 100k × $0.5 + 2.5k × $8 = $0.11
async fn priced_team() -> MockLlm {
    MockLlm::start_with(|request, _| {
        if is_worker(request) {
            return with_usage(Reply::text("worker done"), 50_000, 0, 5_000);
        }
        if results(request).is_empty() {
            return with_usage(
                says_then_delegates("delegating", "look at the notes"),
                100_000,
                40_000,
                10_000,
            );
        }
        with_usage(Reply::text("merged"), 120_000, 100_000, 2_500)
    })
    .await
}

/// The rows of `sessions show`'s table, each cut into its columns, without the time.
fn shown_rows(shown: &str) -> Vec<Vec<String>> {
    shown
        .lines()
        .skip_while(|l| !l.starts_with("agent"))
        .skip(1)
        .take_while(|l| !l.is_empty() && !l.starts_with("all agents"))
        .map(|l| {
            let columns: Vec<&str> = l.split_whitespace().collect();
            columns[..columns.len() - 1]
                .iter()
                .map(|c| (*c).to_owned())
                .collect()
        })
        .collect()
}

/// `sessions` (its one run's row, without the start time) and `sessions show`
/// (its table's rows) of the workspace.
async fn listed_and_shown(
    mock: &MockLlm,
    dir: &std::path::Path,
) -> (Vec<String>, Vec<Vec<String>>) {
    let list = run_on(mock, dir, &["sessions"], &[]).await;
    assert_eq!(list.status.code(), Some(0), "{}", text(&list.stderr));
    let listed = text(&list.stdout);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    let row: Vec<String> = lines[1].split_whitespace().map(str::to_owned).collect();
    let show = run_on(mock, dir, &["sessions", "show", &row[0]], &[]).await;
    assert_eq!(show.status.code(), Some(0), "{}", text(&show.stderr));
    (row[3..].to_vec(), shown_rows(&text(&show.stdout)))
}

/// The id `orchestrate sessions` lists first.
async fn listed_id(mock: &MockLlm, dir: &std::path::Path) -> String {
    let list = run_on(mock, dir, &["sessions"], &[]).await;
    let listed = text(&list.stdout);
    listed
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_follows_the_configured_prices_to_the_cent_with_sub_agents_rolled_up() {
    let mock = priced_team().await;
    let dir = workspace("");
    user_config(
        dir.path(),
        "[model_info.\"m\"]\ninput_price = 2.0\ncached_input_price = 0.5\noutput_price = 8.0\n",
    );
    let out = run_on(&mock, dir.path(), &["--json", "delegate it"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let events = events(&out);

    let lead_turns = turn_costs(&events, true);
    assert_eq!(lead_turns.len(), 2);
    assert_dollars(&lead_turns[0], 22);
    assert_dollars(&lead_turns[1], 11);
    let worker_turns = turn_costs(&events, false);
    assert_eq!(worker_turns.len(), 1);
    assert_dollars(&worker_turns[0], 14);
    assert_dollars(&terminal(&events, false)["stats"]["cost_usd"], 14);
    let lead = terminal(&events, true);
    assert_eq!(lead["text"], "merged");
    assert_dollars(&lead["stats"]["cost_usd"], 22 + 14 + 11);

    let (listed, shown) = listed_and_shown(&mock, dir.path()).await;
    assert_eq!(
        listed,
        [
            "completed",
            "orchestrator",
            "2",
            "287.5k",
            "$0.47",
            "delegate",
            "it"
        ]
    );
    // Each agent's row shows its own turns' tokens and cost; the last line, the
    // whole run's.
    assert_eq!(
        shown,
        [
            vec!["orchestrator", "completed", "2", "1", "232.5k", "$0.33"],
            vec!["├", "worker#1", "completed", "1", "0", "55.0k", "$0.14"],
        ]
    );
    let show = run_on(
        &mock,
        dir.path(),
        &["sessions", "show", &listed_id(&mock, dir.path()).await],
        &[],
    )
    .await;
    let total = text(&show.stdout)
        .lines()
        .find(|l| l.starts_with("all agents"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "));
    assert_eq!(total.as_deref(), Some("all agents 287.5k $0.47"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_price_is_a_null_cost_and_a_dash() {
    let mock = priced_team().await;
    let dir = workspace("");
    let out = run_on(&mock, dir.path(), &["--json", "delegate it"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let events = events(&out);
    assert_eq!(turn_costs(&events, true), [Value::Null, Value::Null]);
    assert_eq!(turn_costs(&events, false), [Value::Null]);
    let lead = terminal(&events, true);
    assert_eq!(
        (&lead["outcome"], &lead["stats"]["cost_usd"]),
        (&json!("completed"), &Value::Null)
    );

    let (listed, shown) = listed_and_shown(&mock, dir.path()).await;
    assert_eq!(listed[3..5], ["287.5k", "–"]);
    assert_eq!(
        shown,
        [
            vec!["orchestrator", "completed", "2", "1", "232.5k", "–"],
            vec!["├", "worker#1", "completed", "1", "0", "55.0k", "–"],
        ]
    );
}

/// Runs `args` in `dir` to its end (no mock: a replay, or a recording against
/// `--base-url`).
async fn run_plain(dir: &std::path::Path, args: &[&str]) -> Output {
    let child = crate::cli::command(dir, args, &[]).output();
    tokio::time::timeout(DEADLINE, child)
        .await
        .expect("orchestrate did not exit in time")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_run_costs_to_the_cent_what_the_built_in_table_says() {
    // gpt-4.1 in the built-in table: $2 in, $0.50 cached, $8 out per million.
    let mock = priced_team().await;
    let dir = workspace("");
    let cassette = dir.path().join("run.jsonl");
    let cassette = cassette.to_str().unwrap();
    let url = mock.base_url();
    let recorded = run_plain(
        dir.path(),
        &[
            "--base-url",
            &url,
            "--model",
            "gpt-4.1",
            "--record",
            cassette,
            "delegate it",
        ],
    )
    .await;
    assert_eq!(
        recorded.status.code(),
        Some(0),
        "{}",
        text(&recorded.stderr)
    );

    let replayed = run_plain(
        dir.path(),
        &[
            "--replay",
            cassette,
            "--model",
            "gpt-4.1",
            "--json",
            "delegate it",
        ],
    )
    .await;
    assert_eq!(
        replayed.status.code(),
        Some(0),
        "{}",
        text(&replayed.stderr)
    );
    let events = events(&replayed);
    // Lead: 60k plain + 40k cached in, 10k out = $0.12 + $0.02 + $0.08; then
    // 20k + 100k cached in, 2.5k out = $0.04 + $0.05 + $0.02. Worker: 50k in, 5k
    // out = $0.10 + $0.04.
    let lead = terminal(&events, true);
    assert_dollars(&lead["stats"]["cost_usd"], 22 + 11 + 14);
    assert_dollars(&terminal(&events, false)["stats"]["cost_usd"], 14);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_that_spends_the_run_s_budget_stops_the_others_at_once() {
    let spend = Gate::new();
    let paid = spend.clone();
    let mock = MockLlm::start_with(move |request, _| {
        let task = request.body["messages"][1]["content"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        match (is_worker(request), task.as_str()) {
            // Its answer comes once the other worker is streaming.
            (true, "spend") => with_usage(Reply::text("spent it"), 500, 0, 10)
                .with_end(End::HoldAfter(0, paid.clone())),
            (true, _) => says_then_hangs("half"),
            (false, _) if results(request).is_empty() => says_then_calls(
                "delegating",
                &[
                    (
                        "t1",
                        "Task",
                        json!({"description": "spend", "prompt": "spend", "subagent_type": "worker"}),
                    ),
                    (
                        "t2",
                        "Task",
                        json!({"description": "hang", "prompt": "hang", "subagent_type": "worker"}),
                    ),
                ],
            ),
            (false, _) => Reply::text("the lead should have been stopped"),
        }
    })
    .await;
    let dir = workspace("");
    let args = ["--json", "--max-tokens", "100", "split it"];
    let (child, mut lines) = crate::support::harness::spawn_json(&mut crate::cli::command_on(
        &mock,
        dir.path(),
        &args,
        &[],
    ));
    // The other worker has streamed its words; only then does the first
    // answer, spending it all.
    let mut seen = Vec::new();
    let streaming = async {
        while let Ok(Some(line)) = lines.next_line().await {
            let event: Value = serde_json::from_str(&line).unwrap();
            let half = event["type"] == "text_delta" && event["text"] == "half";
            seen.push(line);
            if half {
                return;
            }
        }
        panic!("the run ended before the other worker streamed");
    };
    tokio::time::timeout(DEADLINE, streaming)
        .await
        .expect("the other worker never streamed");
    spend.open();
    while let Ok(Some(line)) = lines.next_line().await {
        seen.push(line);
    }
    let status = tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .expect("the run ended")
        .unwrap();
    let out = Output {
        status: status.status,
        stdout: (seen.join("\n") + "\n").into_bytes(),
        stderr: status.stderr,
    };
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    // The other worker's request was cut off mid-stream, its words kept.
    assert!(
        mock.wait_for_disconnects(1, DEADLINE).await,
        "the held stream was cut"
    );
    let events = events(&out);
    let stopped: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "terminal" && e["partial"] == json!("half"))
        .collect();
    let [hung] = stopped.as_slice() else {
        panic!("{events:?}")
    };
    assert_eq!(
        (&hung["outcome"], &hung["reason"]),
        (&json!("partial"), &json!("budget: tokens"))
    );
    let lead = terminal(&events, true);
    assert_eq!(lead["reason"], json!("budget: tokens"), "{lead}");
}

/// A run whose process died after `ms` milliseconds and `tokens` tokens of its
/// lead's one turn, journaled as the lead's journal holds it; its id.
fn died_after(workspace: &std::path::Path, ms: u64, tokens: u64) -> orchestrate::SessionId {
    died_after_with(workspace, ms, tokens, &json!(null))
}

/// As [`died_after`], its run given `limits` (as the lead's journal keeps them).
fn died_after_with(
    workspace: &std::path::Path,
    ms: u64,
    tokens: u64,
    limits: &Value,
) -> orchestrate::SessionId {
    let id = orchestrate::SessionId::new();
    let sessions = crate::support::harness::state(workspace).sessions();
    std::fs::create_dir_all(&sessions).unwrap();
    let event = |at: u64, kind: Value| {
        let mut event = json!({"seq": 0, "session": id, "agent": "orchestrator"});
        event
            .as_object_mut()
            .unwrap()
            .extend(kind.as_object().unwrap().clone());
        json!({"record": "event", "event": event, "at": at})
    };
    let t0 = 1_700_000_000_000_u64;
    let lines = [
        json!({"record": "header", "session": id, "agent": "orchestrator", "model": "m", "run": id, "format": 1}),
        event(
            t0,
            json!({"type": "session_started", "model": "m", "resumed": false}),
        ),
        json!({"record": "run_started", "prompt": 1, "limits": limits}),
        json!({"record": "message", "message": {"role": "user", "content": "go"}}),
        event(
            t0 + 1,
            json!({"type": "turn_started", "turn": 1, "attempt": 1}),
        ),
        event(
            t0 + ms,
            json!({"type": "turn_finished", "turn": 1, "text": "", "tool_calls": 0,
                   "usage": {"input_tokens": tokens, "output_tokens": 0}, "cost_usd": null}),
        ),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(sessions.join(format!("{id}.jsonl")), text).unwrap();
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_carried_on_is_held_to_what_is_left_of_its_budget() {
    let mock = MockLlm::start(vec![Reply::text("a fresh budget was given")]).await;
    // Tokens: 500 spent, 100 allowed.
    let dir = workspace("");
    died_after(dir.path(), 10, 500);
    let args = ["--json", "--max-tokens", "100", "resume"];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let seen = events(&out);
    let lead = terminal(&seen, true);
    assert_eq!(
        (&lead["outcome"], &lead["reason"]),
        (&json!("partial"), &json!("budget: tokens"))
    );
    // Time: it had run 4 s of 3.
    let dir = workspace("");
    died_after(dir.path(), 4000, 10);
    let args = ["--json", "--timeout", "3s", "resume"];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let seen = events(&out);
    let lead = terminal(&seen, true);
    assert_eq!(lead["outcome"], json!("timed_out"), "{lead}");
    // The limits its run was given hold without the flags.
    let dir = workspace("");
    died_after_with(dir.path(), 10, 500, &json!({"max_tokens": 100}));
    let out = run_on(&mock, dir.path(), &["--json", "resume"], &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let seen = events(&out);
    let lead = terminal(&seen, true);
    assert_eq!(lead["reason"], json!("budget: tokens"), "{lead}");
    assert_eq!(mock.request_count(), 0, "no request on a spent budget");
    // Limits a later resume gave (journaled after) are the ones that hold.
    let dir = workspace("");
    let lead = died_after_with(dir.path(), 10, 500, &json!({"max_tokens": 100}));
    let journal = crate::support::harness::state(dir.path()).journal(lead);
    let mut lines = std::fs::read_to_string(&journal).unwrap();
    lines.push_str("{\"record\":\"limits\",\"limits\":{\"max_tokens\":10000}}\n");
    std::fs::write(&journal, lines).unwrap();
    let out = run_on(&mock, dir.path(), &["resume"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "a fresh budget was given\n");
}
