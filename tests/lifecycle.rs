//! A sub-agent's life as its caller and the person see it, through the real
//! binary: falling back to another model when its own does not exist or stays
//! overloaded (and never when a key or a request is refused), with the error a
//! parent receives naming what failed; background sub-agents whose caller goes
//! on, reads them with TaskOutput, stops one with TaskStop, answers first and
//! still hears them, and gets their results after a kill -9 and `resume`.

use serde_json::{Value, json};

use crate::cli::{run_on, text};
use crate::support::harness::tool_results;
use crate::support::mock_llm::{End, Gate, MockLlm, Recorded, Reply};

/// The model a request asked for.
fn model(request: &Recorded) -> &str {
    request.body["model"].as_str().unwrap_or_default()
}

/// A 404 as OpenAI sends it for a model that does not exist.
fn no_such_model() -> Reply {
    Reply::Status {
        status: 404,
        headers: vec![("x-request-id".into(), "req_missing".into())],
        body: json!({ "error": {
            "message": "The model `m` does not exist or you do not have access to it.",
            "type": "invalid_request_error",
            "code": "model_not_found",
        } })
        .to_string(),
    }
}

/// The `--json` events of a run's output.
fn events(stdout: &[u8]) -> Vec<Value> {
    text(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_does_not_exist_falls_back_once_in_the_same_conversation() {
    let mock = MockLlm::start_with(|request, _| match model(request) {
        "m" => no_such_model(),
        _ => Reply::text("answered by the fallback"),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let args = ["--json", "--fallback-model", "m2", "say hi"];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let models: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| model(r).to_owned())
        .collect();
    assert_eq!(models, ["m", "m2"], "no retry of a missing model, one hop");
    let second = &mock.requests()[1];
    let prompt = &second.body["messages"].as_array().unwrap().last().unwrap()["content"];
    assert_eq!(prompt, "say hi", "the same conversation goes on");
    let events = events(&out.stdout);
    let fallback: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "model_fallback")
        .collect();
    assert_eq!(fallback.len(), 1);
    assert_eq!(fallback[0]["from"], "m");
    assert_eq!(fallback[0]["to"], "m2");
    assert_eq!(fallback[0]["reason"], "model_not_found");
    let terminal = events.iter().find(|e| e["type"] == "terminal").unwrap();
    assert_eq!(terminal["outcome"], "completed");

    // Plain lines say so on the agent's line.
    let out = run_on(&mock, dir.path(), &["--fallback-model", "m2", "again"], &[]).await;
    assert_eq!(out.status.code(), Some(0));
    let err = text(&out.stderr);
    assert!(
        err.contains("model m failed (model_not_found): carrying on with m2"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_stays_overloaded_falls_back_after_its_retries() {
    let mock = MockLlm::start_with(|request, _| match model(request) {
        "m" => Reply::status(529, "Overloaded"),
        _ => Reply::text("the fallback answers"),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--json",
        "--max-attempts",
        "3",
        "--retry-base-ms",
        "10",
        "--fallback-model",
        "m2",
        "go",
    ];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let models: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| model(r).to_owned())
        .collect();
    assert_eq!(models, ["m", "m", "m", "m2"]);
    let events = events(&out.stdout);
    let fallback = events
        .iter()
        .find(|e| e["type"] == "model_fallback")
        .unwrap();
    assert_eq!(fallback["reason"], "overloaded");

    // Without a fallback the run fails, naming the model.
    let args = [
        "--quiet",
        "--max-attempts",
        "2",
        "--retry-base-ms",
        "10",
        "go",
    ];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "orchestrate: gave up after 2 attempts: HTTP 529: Overloaded\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_never_falls_back_and_the_parent_hears_what_failed() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents");
    std::fs::create_dir(&agents).unwrap();
    std::fs::write(
        agents.join("scout.md"),
        "---\nname: scout\ndescription: Looks around.\nmodel: sub-1\nfallbackModel: m2\n---\nYou look around.\n",
    )
    .unwrap();
    let mock = MockLlm::start_with(|request, _| match (model(request), request.results()) {
        ("sub-1", _) => Reply::Status {
            status: 401,
            headers: vec![("request-id".into(), "req_011CKey".into())],
            body: json!({ "error": { "message": "invalid x-api-key", "type": "authentication_error" } })
                .to_string(),
        },
        ("m", 0) => Reply::tool_calls(&[(
            "call_scout",
            "Task",
            json!({ "description": "look", "prompt": "Look around.", "subagent_type": "scout" }),
        )]),
        ("m", _) => Reply::text("the scout could not run"),
        _ => Reply::text("a fallback was asked"),
    })
    .await;
    let out = run_on(&mock, dir.path(), &["--quiet", "look around"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let requests = mock.requests();
    assert!(
        requests.iter().all(|r| model(r) != "m2"),
        "a 401 never falls back"
    );
    let last = requests.last().unwrap();
    let (_, result) = &tool_results(last)[0];
    let first = result.lines().next().unwrap();
    assert_eq!(first, "failed (auth)", "{result}");
    for part in [
        "HTTP 401",
        "invalid x-api-key",
        "request id req_011CKey",
        "model sub-1",
    ] {
        assert!(result.contains(part), "{part} missing from: {result}");
    }
}

/// The first words of the scout's system prompt.
const SCOUT: &str = "You scout the code.";

/// A workspace whose `scout` role reads and answers.
fn scout_workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents");
    std::fs::create_dir(&agents).unwrap();
    std::fs::write(
        agents.join("scout.md"),
        format!("---\nname: scout\ndescription: Scouts the code.\ntools: Read\n---\n{SCOUT}\n"),
    )
    .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "the bug is in parse.rs\n").unwrap();
    dir
}

/// A Task call that starts the scout in the background.
fn scout_in_background() -> Reply {
    Reply::tool_calls(&[(
        "bg",
        "Task",
        json!({
            "description": "scout",
            "prompt": "Find the bug.",
            "subagent_type": "scout",
            "run_in_background": true,
        }),
    )])
}

/// The task id the lead's first tool result gave.
fn task_of(request: &Recorded) -> String {
    let results = tool_results(request);
    let first = results[0].1.lines().next().unwrap_or_default();
    first
        .strip_prefix("started in background: task_id ")
        .unwrap_or_else(|| panic!("not a background start: {}", results[0].1))
        .to_owned()
}

/// The lead's requests (every one that is not the scout's).
fn lead_requests(mock: &MockLlm) -> Vec<Recorded> {
    let all = mock.requests().into_iter();
    all.filter(|r| !r.system().starts_with(SCOUT)).collect()
}

/// The user messages of a request, after its first.
fn later_prompts(request: &Recorded) -> Vec<String> {
    let messages = request.body["messages"].as_array().unwrap();
    let users = messages.iter().filter(|m| m["role"] == "user");
    users
        .skip(1)
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The tokens an agent's own turns used, and those its run's terminal
/// event counts (its sub-agents' rolled in).
fn own_and_rolled_up(events: &[Value], agent: &str) -> (u64, u64) {
    let total = |usage: &Value| {
        usage["input_tokens"].as_u64().unwrap_or(0) + usage["output_tokens"].as_u64().unwrap_or(0)
    };
    let sum = |kind: &str, usage: &dyn Fn(&Value) -> &Value| -> u64 {
        (events.iter())
            .filter(|e| e["type"] == kind && e["agent"] == agent)
            .map(|e| total(usage(e)))
            .sum()
    };
    (
        sum("turn_finished", &|e| &e["usage"]),
        sum("terminal", &|e| &e["stats"]["usage"]),
    )
}

/// Runs the binary with `--json`, calling `on_event` with each event as it
/// comes, until it returns true (the process is then killed with SIGKILL
/// once `before_kill` returns) or the run ends; its exit code (`None` when
/// killed) and every event read.
async fn watch_run(
    mut command: tokio::process::Command,
    mut on_event: impl FnMut(&Value) -> bool,
    before_kill: impl std::future::Future<Output = ()>,
) -> (Option<i32>, Vec<Value>) {
    let (mut child, mut lines) = crate::support::harness::spawn_json(&mut command);
    let mut events = Vec::new();
    let mut killed = false;
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let event: Value = serde_json::from_str(&line).unwrap();
            let kill = on_event(&event);
            events.push(event);
            if kill {
                before_kill.await;
                // kill -9: nothing of the process runs after this.
                crate::isolation::kill_now(&mut child).await;
                killed = true;
                return;
            }
        }
    };
    tokio::time::timeout(crate::support::harness::DEADLINE, read)
        .await
        .expect("the run did not end in time");
    let code = match killed {
        true => None,
        false => child.wait().await.unwrap().code(),
    };
    (code, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_goes_on_while_its_background_sub_agent_runs_and_reads_it_with_task_output() {
    let gate = Gate::new();
    let mock = MockLlm::start_with({
        let gate = gate.clone();
        move |request, _| {
            if request.system().starts_with(SCOUT) {
                return Reply::text("the bug is in parse.rs, line 12")
                    .with_end(End::HoldAfter(0, gate.clone()));
            }
            match tool_results(request).len() {
                0 => scout_in_background(),
                1 => Reply::tool_calls(&[(
                    "peek",
                    "TaskOutput",
                    json!({ "task_id": task_of(request), "block": false }),
                )]),
                2 => {
                    // The scout may answer now; the lead waits for it.
                    gate.open();
                    Reply::tool_calls(&[(
                        "wait",
                        "TaskOutput",
                        json!({ "task_id": task_of(request), "timeout": 60_000 }),
                    )])
                }
                _ => Reply::text("the scout found it"),
            }
        }
    })
    .await;
    let dir = scout_workspace();
    let out = run_on(&mock, dir.path(), &["--json", "find the bug"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lead = lead_requests(&mock);
    assert_eq!(lead.len(), 4);
    let results = tool_results(&lead[3]);
    let (started, peek, wait) = (&results[0].1, &results[1].1, &results[2].1);
    assert!(
        started.starts_with("started in background: task_id "),
        "{started}"
    );
    assert!(
        peek.starts_with("running\n"),
        "the lead went on first: {peek}"
    );
    assert!(wait.starts_with("completed\n"), "{wait}");
    assert!(wait.contains("the bug is in parse.rs, line 12"), "{wait}");
    // TaskOutput took the result: it does not come a second time.
    assert!(later_prompts(&lead[3]).is_empty());
    let events = events(&out.stdout);
    let task = task_of(&lead[1]);
    let scout_end = events
        .iter()
        .find(|e| e["session"] == task.as_str() && e["type"] == "terminal")
        .expect("the scout's session is the task id");
    assert_eq!(scout_end["outcome"], "completed");
    // What the scout spent is its caller's too (through TaskOutput).
    let (lead_own, lead_rolled) = own_and_rolled_up(&events, "orchestrator");
    let (scout_own, _) = own_and_rolled_up(&events, "scout");
    assert!(scout_own > 0);
    assert_eq!(lead_rolled, lead_own + scout_own);
    assert!(
        events
            .iter()
            .any(|e| e["session"] == task.as_str() && e["parent"].is_string())
    );
    let last = events.last().unwrap();
    assert_eq!(
        (last["type"].as_str(), last["text"].as_str()),
        (Some("terminal"), Some("the scout found it"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_answers_first_waits_for_its_stopped_background_sub_agent_and_hears_it() {
    let gate = Gate::new();
    let scouting = Gate::new();
    let mock = MockLlm::start_with({
        let (gate, scouting) = (gate.clone(), scouting.clone());
        move |request, _| {
            if request.system().starts_with(SCOUT) {
                scouting.open();
                return match request.results() {
                    0 => Reply::tool_calls(&[("r", "Read", json!({ "file_path": "notes.txt" }))])
                        .with_end(End::HoldAfter(0, gate.clone())),
                    _ => Reply::text("should not be asked: it was stopped"),
                };
            }
            if !later_prompts(request).is_empty() {
                return Reply::text("final, with the scout's notes");
            }
            match tool_results(request).len() {
                0 => scout_in_background(),
                // Stopped once it is streaming its first turn.
                1 => Reply::tool_calls(&[(
                    "stop",
                    "TaskStop",
                    json!({ "task_id": task_of(request) }),
                )])
                .with_end(End::HoldAfter(0, scouting.clone())),
                _ => Reply::text("done for now"),
            }
        }
    })
    .await;
    let dir = scout_workspace();
    let command = crate::cli::command_on(&mock, dir.path(), &["--json", "find the bug"], &[]);
    let (code, events) = watch_run(
        command,
        |event| {
            // The lead has answered and waits: only now may the scout go on.
            if event["type"] == "background_wait" {
                gate.open();
            }
            false
        },
        async {},
    )
    .await;
    assert_eq!(code, Some(0));
    // The lead answered and waited before the scout ended.
    let at = |kind: &str, agent: &str| {
        events
            .iter()
            .position(|e| e["type"] == kind && e["agent"] == agent)
            .unwrap_or_else(|| panic!("no {kind} of {agent}"))
    };
    assert!(at("background_wait", "orchestrator") < at("terminal", "scout"));
    let lead = lead_requests(&mock);
    assert_eq!(lead.len(), 4);
    let task = task_of(&lead[1]);
    let stopped = &tool_results(&lead[2])[1].1;
    assert!(
        stopped.starts_with("stopping the scout sub-agent"),
        "{stopped}"
    );
    let heard = later_prompts(&lead[3]);
    assert_eq!(heard.len(), 1, "{heard:?}");
    let expected =
        format!("Background sub-agent scout (task_id {task}) ended:\npartial (requested)\n");
    assert!(heard[0].starts_with(&expected), "{}", heard[0]);
    let scout_requests = mock
        .requests()
        .iter()
        .filter(|r| r.system().starts_with(SCOUT))
        .count();
    assert_eq!(scout_requests, 1, "the stop came before its next turn");
    let last = events.last().unwrap();
    assert_eq!(last["text"], "final, with the scout's notes");
    // What the scout spent is its caller's too (through the message).
    let (lead_own, lead_rolled) = own_and_rolled_up(&events, "orchestrator");
    let (scout_own, _) = own_and_rolled_up(&events, "scout");
    assert_eq!(lead_rolled, lead_own + scout_own);
}

/// A lead that starts the scout in the background, answers that it waits,
/// and once the scout's result has joined says `heard`; the scout says
/// `scouted` once `gate` opens.
async fn waiting_lead(gate: &Gate, scouted: &'static str, heard: &'static str) -> MockLlm {
    let gate = gate.clone();
    MockLlm::start_with(move |request, _| {
        if request.system().starts_with(SCOUT) {
            return Reply::text(scouted).with_end(End::HoldAfter(0, gate.clone()));
        }
        match (tool_results(request).len(), later_prompts(request).len()) {
            (0, _) => scout_in_background(),
            (_, 0) => Reply::text("waiting for the scout"),
            _ => Reply::text(heard),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_while_a_background_sub_agent_runs_gets_its_result_after_resume() {
    let gate = Gate::new();
    let mock = waiting_lead(&gate, "scouted: parse.rs", "resumed and heard the scout").await;
    let dir = scout_workspace();
    let command = crate::cli::command_on(&mock, dir.path(), &["--json", "find the bug"], &[]);
    // Killed once what the run did is on disk (written within a tenth of a
    // second, as every journal line is).
    let state = crate::support::harness::state(dir.path());
    let written = async {
        crate::support::harness::wait_until("the journals hold the start and the answer", || {
            let journals = std::fs::read_dir(state.sessions())
                .into_iter()
                .flatten()
                .flatten();
            let text: String = journals
                .filter_map(|f| std::fs::read_to_string(f.path()).ok())
                .collect();
            text.contains("waiting for the scout") && text.contains("\"agent\":\"scout\"")
        })
        .await;
    };
    let (code, _) = watch_run(command, |event| event["type"] == "background_wait", written).await;
    assert_eq!(code, None, "killed");
    gate.open();
    let out = run_on(&mock, dir.path(), &["--json", "resume"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lead = lead_requests(&mock);
    let task = task_of(&lead[1]);
    let last = lead.last().unwrap();
    let heard = later_prompts(last);
    assert_eq!(heard.len(), 1, "delivered once: {heard:?}");
    let expected =
        format!("Background sub-agent scout (task_id {task}) ended:\ncompleted\nscouted: parse.rs");
    assert!(
        heard[0].starts_with(&expected),
        "{}\nexpected: {expected}",
        heard[0]
    );
    let events = events(&out.stdout);
    let scouts: std::collections::BTreeSet<&str> = events
        .iter()
        .filter(|e| e["agent"] == "scout")
        .filter_map(|e| e["session"].as_str())
        .collect();
    assert_eq!(
        scouts.into_iter().collect::<Vec<_>>(),
        [task.as_str()],
        "the same sub-agent, not a new one"
    );
    assert_eq!(
        events.last().unwrap()["text"],
        "resumed and heard the scout"
    );
}

/// The agent_id a Task result ends with.
fn agent_id(result: &str) -> String {
    let at = result.rfind("agent_id ").expect("an agent_id") + "agent_id ".len();
    result[at..].trim_end_matches(']').trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_stopped_at_its_turn_limit_goes_on_with_resume() {
    const WORKER: &str = "You work through notes.";
    let mock = MockLlm::start_with(|request, _| {
        if request.system().starts_with(WORKER) {
            return match request.results() {
                0 => Reply::tool_calls(&[("read", "Read", json!({ "file_path": "notes.txt" }))]),
                _ => Reply::text("the notes say the bug is in parse.rs"),
            };
        }
        let results = tool_results(request);
        match results.len() {
            0 => Reply::tool_calls(&[(
                "first",
                "Task",
                json!({ "description": "notes", "prompt": "Read the notes.", "subagent_type": "worker" }),
            )]),
            1 => Reply::tool_calls(&[
                (
                    "again",
                    "Task",
                    json!({
                        "description": "go on",
                        "prompt": "Go on: say what the notes say.",
                        "subagent_type": "worker",
                        "resume": agent_id(&results[0].1),
                    }),
                ),
                (
                    "wrong",
                    "Task",
                    json!({
                        "description": "nobody",
                        "prompt": "Go on.",
                        "subagent_type": "worker",
                        "resume": "01a21c98-0599-7305-bbed-c1c8d6d5a111",
                    }),
                ),
            ]),
            _ => Reply::text("the worker found it"),
        }
    })
    .await;
    let dir = scout_workspace();
    std::fs::write(
        dir.path().join("agents/worker.md"),
        format!(
            "---\nname: worker\ndescription: Works.\ntools: Read\nmaxTurns: 1\n---\n{WORKER}\n"
        ),
    )
    .unwrap();
    let out = run_on(&mock, dir.path(), &["--json", "what do the notes say"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lead = lead_requests(&mock)
        .into_iter()
        .filter(|r| !r.system().starts_with(WORKER))
        .collect::<Vec<_>>();
    let results = tool_results(lead.last().unwrap());
    let (first, again, wrong) = (&results[0].1, &results[1].1, &results[2].1);
    assert!(first.starts_with("partial (budget: turns)\n"), "{first}");
    assert!(again.starts_with("completed\n"), "{again}");
    assert!(
        again.contains("the notes say the bug is in parse.rs"),
        "{again}"
    );
    assert_eq!(agent_id(first), agent_id(again), "the same sub-agent");
    assert!(
        wrong.contains("no sub-agent of this run has that agent_id"),
        "{wrong}"
    );
    // The follow-up came after its whole conversation.
    let follow_up = mock
        .requests()
        .into_iter()
        .rfind(|r| r.system().starts_with(WORKER))
        .unwrap();
    let messages = follow_up.body["messages"].as_array().unwrap();
    let contents: Vec<&str> = messages
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(contents.contains(&"Read the notes."), "{contents:?}");
    assert!(
        contents
            .iter()
            .any(|c| c.contains("the bug is in parse.rs")),
        "{contents:?}"
    );
    assert_eq!(contents.last(), Some(&"Go on: say what the notes say."));
    let events = events(&out.stdout);
    let workers: std::collections::BTreeSet<&str> = events
        .iter()
        .filter(|e| e["agent"] == "worker")
        .filter_map(|e| e["session"].as_str())
        .collect();
    assert_eq!(workers.len(), 1, "{workers:?}");
}

/// Runs the binary with `--json`; at each event, `act` may send the live run
/// a control request. Its exit code and every event.
async fn run_with_control(
    mut command: tokio::process::Command,
    state: orchestrate::state::StateDir,
    act: impl Fn(&Value) -> Option<orchestrate::control::Op>,
) -> (Option<i32>, Vec<Value>) {
    let (mut child, mut lines) = crate::support::harness::spawn_json(&mut command);
    let mut events = Vec::new();
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let event: Value = serde_json::from_str(&line).unwrap();
            if let Some(op) = act(&event) {
                let reply = crate::support::harness::control(&state, &op).await;
                assert!(reply.ok, "{reply:?}");
            }
            events.push(event);
        }
    };
    tokio::time::timeout(crate::support::harness::DEADLINE, read)
        .await
        .expect("the run did not end in time");
    (child.wait().await.unwrap().code(), events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_cancelled_while_it_waits_has_its_background_sub_agents_cancelled() {
    const MIDDLE: &str = "You delegate in the background.";
    let mock = MockLlm::start_with(|request, _| {
        if request.system().starts_with(SCOUT) {
            // Never answers: only a cancel ends it.
            return Reply::text("never").with_end(End::HoldAfter(0, Gate::new()));
        }
        if request.system().starts_with(MIDDLE) {
            return match request.results() {
                0 => scout_in_background(),
                _ => Reply::text("the middle waits for its scout"),
            };
        }
        match request.results() {
            0 => Reply::tool_calls(&[(
                "mid",
                "Task",
                json!({ "description": "middle", "prompt": "Delegate.", "subagent_type": "middle" }),
            )]),
            _ => Reply::text("the lead goes on without them"),
        }
    })
    .await;
    let dir = scout_workspace();
    std::fs::write(
        dir.path().join("agents/middle.md"),
        format!("---\nname: middle\ndescription: Delegates.\ntools: Task\n---\n{MIDDLE}\n"),
    )
    .unwrap();
    let state = crate::support::harness::state(dir.path());
    let command = crate::cli::command_on(&mock, dir.path(), &["--json", "go"], &[]);
    let (code, events) = run_with_control(command, state, |event| {
        (event["type"] == "background_wait" && event["agent"] == "middle").then(|| {
            orchestrate::control::Op::Kill {
                agent: "middle#1".into(),
            }
        })
    })
    .await;
    assert_eq!(code, Some(0));
    let ended = |agent: &str| {
        events
            .iter()
            .find(|e| e["type"] == "terminal" && e["agent"] == agent)
            .map(|e| e["outcome"].clone())
    };
    assert_eq!(ended("middle"), Some(json!("cancelled")));
    assert_eq!(
        ended("scout"),
        Some(json!("cancelled")),
        "its caller's cancel reached it"
    );
    // The lead's own end (a cancelled sub-agent's last events may come
    // after it).
    let lead = events
        .iter()
        .rfind(|e| e["type"] == "terminal" && e["agent"] == "orchestrator")
        .expect("the lead ended");
    assert_eq!(lead["text"], "the lead goes on without them");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_crashes_while_it_waits_hears_its_background_sub_agent_once() {
    let gate = Gate::new();
    let mock = waiting_lead(&gate, "scouted once", "heard the scout").await;
    let dir = scout_workspace();
    let state = crate::support::harness::state(dir.path());
    let crashed = std::sync::atomic::AtomicBool::new(false);
    let command = crate::cli::command_on(&mock, dir.path(), &["--json", "go"], &[]);
    let (code, events) = run_with_control(command, state, |event| {
        if event["type"] == "restarted" {
            // Back from its crash, waiting again: the scout may end.
            gate.open();
        }
        let first_wait = event["type"] == "background_wait"
            && !crashed.swap(true, std::sync::atomic::Ordering::SeqCst);
        first_wait.then(|| orchestrate::control::Op::Crash {
            agent: "orchestrator".into(),
        })
    })
    .await;
    assert_eq!(code, Some(0));
    assert!(gate.is_open(), "the lead crashed and came back");
    let scouts = mock
        .requests()
        .iter()
        .filter(|r| r.system().starts_with(SCOUT))
        .count();
    assert_eq!(
        scouts, 1,
        "one scout, followed again rather than started again"
    );
    let last = lead_requests(&mock).pop().unwrap();
    assert_eq!(later_prompts(&last).len(), 1, "heard once");
    assert_eq!(events.last().unwrap()["text"], "heard the scout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_outcome_shows_in_the_task_result_the_journal_and_the_summary() {
    let dir = scout_workspace();
    let role = |name: &str, extra: &str| {
        let text = format!(
            "---\nname: {name}\ndescription: The {name} one.\ntools: Read\n{extra}---\nYou are the {name} one.\n"
        );
        std::fs::write(dir.path().join(format!("agents/{name}.md")), text).unwrap();
    };
    role("done", "");
    role("short", "maxTurns: 1\n");
    role("broken", "model: broken-1\n");
    role("slow", "");
    let mock = MockLlm::start_with(|request, _| {
        let system = request.system();
        if system.starts_with("You are the done one.") {
            return Reply::text("done and dusted");
        }
        if system.starts_with("You are the short one.") {
            return Reply::tool_calls(&[("r", "Read", json!({ "file_path": "notes.txt" }))]);
        }
        if system.starts_with("You are the slow one.") {
            return Reply::text("never").with_end(End::HoldAfter(0, Gate::new()));
        }
        if model(request) == "broken-1" {
            return Reply::status(401, "bad key");
        }
        match request.results() {
            0 => {
                let task = |id: &str, role: &str, timeout: Option<u64>| {
                    let mut input =
                        json!({ "description": role, "prompt": "Go.", "subagent_type": role });
                    if let Some(t) = timeout {
                        input["timeout"] = json!(t);
                    }
                    (id.to_owned(), input)
                };
                let calls = [
                    task("a", "done", None),
                    task("b", "short", None),
                    task("c", "broken", None),
                    task("d", "slow", Some(1)),
                ];
                let calls: Vec<(&str, &str, Value)> = calls
                    .iter()
                    .map(|(id, input)| (id.as_str(), "Task", input.clone()))
                    .collect();
                Reply::tool_calls(&calls)
            }
            _ => Reply::text("four outcomes"),
        }
    })
    .await;
    let out = run_on(&mock, dir.path(), &["go"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The Task results' first lines.
    let last = lead_requests(&mock).pop().unwrap();
    let firsts: Vec<String> = tool_results(&last)
        .iter()
        .map(|(_, r)| r.lines().next().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        firsts,
        [
            "completed",
            "partial (budget: turns)",
            "failed (auth)",
            "timed_out"
        ]
    );
    // The summary's status column.
    let err = text(&out.stderr);
    let status = |label: &str| {
        let row = err
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no row {label} in:\n{err}"));
        row.split_whitespace().nth(1).unwrap_or_default().to_owned()
    };
    assert_eq!(status("done#1"), "completed");
    assert_eq!(status("short#1"), "partial");
    assert_eq!(status("broken#1"), "failed");
    assert_eq!(status("slow#1"), "timed_out");
    // How each ended, as its journal keeps it.
    let state = crate::support::harness::state(dir.path());
    let mut outcomes = Vec::new();
    for file in std::fs::read_dir(state.sessions()).unwrap().flatten() {
        let journal = std::fs::read_to_string(file.path()).unwrap();
        let records: Vec<Value> = journal
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let agent = records[0]["agent"].as_str().unwrap_or_default().to_owned();
        for record in records.iter().filter(|r| r["record"] == "terminal") {
            let outcome = record["outcome"]["outcome"].as_str().unwrap_or_default();
            outcomes.push((agent.clone(), outcome.to_owned()));
        }
    }
    outcomes.sort();
    let expected = [
        ("broken", "failed"),
        ("done", "completed"),
        ("orchestrator", "completed"),
        ("short", "partial"),
        ("slow", "timed_out"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(a, o)| ((*a).to_owned(), (*o).to_owned()))
        .collect();
    assert_eq!(outcomes, expected);
}
