//! Runs that outlive their process, through the real binary against the mock:
//! killed with SIGKILL mid fan-out and resumed, killed mid tool batch, continued
//! with a follow-up, listed and shown, refused while another process runs them,
//! and a lead that crashes while its sub-agents run.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use orchestrate::runs::{self, RunStatus};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

use crate::cli::{command_on, run_on, text};
use crate::support::harness::{DEADLINE, state, wait_until};
use crate::support::mock_llm::{End, Gate, MockLlm, Recorded, Reply};

const WORKER: &str = "You are a worker.";

/// A workspace with a `worker` role (and Bash, for the tool-batch test).
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("agents/worker.md"),
        format!(
            "---\nname: worker\ndescription: does one piece\ntools: Read, Bash\n---\n{WORKER}\n"
        ),
    )
    .unwrap();
    dir
}

fn system(request: &Recorded) -> &str {
    request.body["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
}

/// A worker request's task (its first user message).
fn piece(request: &Recorded) -> String {
    request.body["messages"][1]["content"]
        .as_str()
        .unwrap_or("")
        .to_owned()
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

fn tasks(pieces: &[&str]) -> Reply {
    let calls: Vec<(String, Value)> = pieces
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                format!("t{i}"),
                json!({"description": p, "prompt": p, "subagent_type": "worker"}),
            )
        })
        .collect();
    let calls: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, args)| (id.as_str(), "Task", args.clone()))
        .collect();
    Reply::tool_calls(&calls)
}

/// The lead answers a turn of results with their first lines, joined.
fn merged(request: &Recorded) -> Reply {
    let firsts: Vec<String> = results(request)
        .iter()
        .map(|r| crate::support::harness::answer(r).to_owned())
        .collect();
    Reply::text(format!("merged: {}", firsts.join(" | ")))
}

/// The run's agents whose run finished.
fn finished_workers(workspace: &Path) -> usize {
    runs::list(&state(workspace)).first().map_or(0, |run| {
        run.agents[1..]
            .iter()
            .filter(|a| a.outcome.is_some())
            .count()
    })
}

const BYPASS: [&str; 2] = ["--permission-mode", "bypassPermissions"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_killed_mid_run_resumes_without_asking_again_what_was_answered() {
    let held = Gate::new();
    let after_kill = Arc::new(AtomicBool::new(false));
    let mock = MockLlm::start_with({
        let (held, after_kill) = (held.clone(), after_kill.clone());
        move |request, _| {
            if system(request) == WORKER {
                let task = piece(request);
                let answer = Reply::text(format!("result of {task}"));
                // Pieces 3 and 4 are still streaming when the process dies.
                let slow = task.ends_with('3') || task.ends_with('4');
                if slow && !after_kill.load(Ordering::SeqCst) {
                    return answer.with_end(End::HoldAfter(2, held.clone()));
                }
                return answer;
            }
            if results(request).is_empty() {
                return tasks(&["piece 0", "piece 1", "piece 2", "piece 3", "piece 4"]);
            }
            merged(request)
        }
    })
    .await;
    let dir = workspace();
    let mut args = BYPASS.to_vec();
    args.push("split the work");
    let mut child = command_on(&mock, dir.path(), &args, &[])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("three workers finished and two are streaming", || {
        let streaming = mock
            .requests()
            .iter()
            .filter(|r| system(r) == WORKER && ["piece 3", "piece 4"].contains(&piece(r).as_str()))
            .count();
        finished_workers(dir.path()) == 3 && streaming == 2
    })
    .await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let run = &runs::list(&state(dir.path()))[0];
    assert_eq!(run.status, RunStatus::Interrupted);
    // The dead process's control socket is found stale and removed.
    let socket = state(dir.path()).socket(run.id).path();
    assert!(socket.exists());
    let ps = run_on(&mock, dir.path(), &["ps"], &[]).await;
    assert_eq!(ps.status.code(), Some(1));
    assert!(!socket.exists());

    after_kill.store(true, Ordering::SeqCst);
    let mut args = BYPASS.to_vec();
    args.push("resume");
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "merged: result of piece 0 | result of piece 1 | result of piece 2 | result of piece 3 | result of piece 4\n"
    );
    let requests = mock.requests();
    let asked = |p: &str| {
        requests
            .iter()
            .filter(|r| system(r) == WORKER && piece(r) == p)
            .count()
    };
    let counts: Vec<usize> = (0..5).map(|i| asked(&format!("piece {i}"))).collect();
    assert_eq!(
        counts,
        [1, 1, 1, 2, 2],
        "finished workers are not asked again"
    );
    let lead_turns = requests.iter().filter(|r| system(r) != WORKER).count();
    assert_eq!(lead_turns, 2, "the lead's answered turn is not asked again");
    assert_eq!(
        runs::list(&state(dir.path()))[0].status,
        RunStatus::Finished
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_mid_tool_batch_never_runs_a_call_twice() {
    let mock = MockLlm::start_with(|request, _| {
        if system(request) == WORKER {
            if results(request).is_empty() {
                let one = json!({"command": "echo one >> runs.log"});
                // The second call waits for the test's go, so the kill lands in it.
                let two = json!({"command": "echo two >> runs.log; until [ -f release ]; do sleep 0.02; done"});
                return Reply::tool_calls(&[("b1", "Bash", one), ("b2", "Bash", two)]);
            }
            return Reply::text(format!("worker saw: {}", results(request).join(" / ")));
        }
        if results(request).is_empty() {
            return tasks(&["log twice"]);
        }
        merged(request)
    })
    .await;
    let dir = workspace();
    let mut args = BYPASS.to_vec();
    args.push("log it");
    let mut child = command_on(&mock, dir.path(), &args, &[])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let log = dir.path().join("runs.log");
    wait_until("the second call is running", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("two"))
    })
    .await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    // The orphaned shell of the second call goes too.
    std::fs::write(dir.path().join("release"), "").unwrap();

    let mut args = BYPASS.to_vec();
    args.push("resume");
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "one\ntwo\n",
        "no call ran twice"
    );
    let second = mock
        .requests()
        .into_iter()
        .rev()
        .find(|r| system(r) == WORKER)
        .unwrap();
    let told = results(&second);
    assert_eq!(told.len(), 2);
    assert!(
        !told[0].starts_with("interrupted"),
        "the finished call kept its result: {told:?}"
    );
    assert!(
        told[1].starts_with("interrupted"),
        "the cut-off call is reported: {told:?}"
    );
    assert!(
        text(&out.stdout).starts_with("merged: worker saw:"),
        "{}",
        text(&out.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_continues_with_a_follow_up_in_the_same_conversation() {
    let mock = MockLlm::start_with(|request, n| {
        let last = request.body["messages"].as_array().unwrap().last().unwrap()["content"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        Reply::text(format!("answer {n} to {last}"))
    })
    .await;
    let dir = workspace();
    let first = run_on(&mock, dir.path(), &["first question"], &[]).await;
    assert_eq!(text(&first.stdout), "answer 0 to first question\n");

    // A run that ended, and no prompt: how it ended, and no request.
    let again = run_on(&mock, dir.path(), &["resume"], &[]).await;
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(text(&again.stdout), "answer 0 to first question\n");
    assert_eq!(mock.request_count(), 1);

    let id = runs::list(&state(dir.path()))[0].id.to_string();
    let follow = run_on(
        &mock,
        dir.path(),
        &["resume", &id[..13], "second question"],
        &[],
    )
    .await;
    assert_eq!(follow.status.code(), Some(0), "{}", text(&follow.stderr));
    assert_eq!(text(&follow.stdout), "answer 1 to second question\n");
    let third = run_on(&mock, dir.path(), &["-c", "third question"], &[]).await;
    assert_eq!(text(&third.stdout), "answer 2 to third question\n");

    let messages: Vec<(String, String)> = mock.requests()[2].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let pair = |r: &str, c: &str| (r.to_owned(), c.to_owned());
    assert_eq!(
        messages,
        [
            pair("user", "first question"),
            pair("assistant", "answer 0 to first question"),
            pair("user", "second question"),
            pair("assistant", "answer 1 to second question"),
            pair("user", "third question"),
        ]
    );
    let runs = runs::list(&state(dir.path()));
    assert_eq!(runs.len(), 1, "a follow-up is the same run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_lists_the_runs_and_shows_one_as_a_tree() {
    let mock = MockLlm::start_with(|request, _| {
        if system(request) == WORKER {
            return Reply::text(format!("done: {}", piece(request)));
        }
        if results(request).is_empty() {
            return tasks(&["piece a", "piece b"]);
        }
        merged(request)
    })
    .await;
    let dir = workspace();
    let out = run_on(&mock, dir.path(), &["do two pieces\nand more text"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let list = run_on(&mock, dir.path(), &["sessions"], &[]).await;
    let lines: Vec<String> = text(&list.stdout).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let columns: Vec<&str> = lines[1].split_whitespace().collect();
    let id = columns[0];
    assert_eq!(
        &columns[3..],
        [
            "completed",
            "orchestrator",
            "3",
            "60",
            "–",
            "do",
            "two",
            "pieces"
        ]
    );
    let run = &runs::list(&state(dir.path()))[0];
    assert!(run.id.to_string().starts_with(id));

    let show = run_on(&mock, dir.path(), &["sessions", "show", id], &[]).await;
    assert_eq!(show.status.code(), Some(0), "{}", text(&show.stderr));
    let shown = text(&show.stdout);
    let rows: Vec<Vec<&str>> = shown
        .lines()
        .skip_while(|l| !l.starts_with("agent"))
        .skip(1)
        .take_while(|l| !l.is_empty() && !l.starts_with("all agents"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let heads: Vec<Vec<&str>> = rows.iter().map(|r| r[..r.len() - 1].to_vec()).collect();
    assert_eq!(
        heads,
        [
            vec!["orchestrator", "completed", "2", "2", "30", "–"],
            vec!["├", "worker#1", "completed", "1", "0", "15", "–"],
            vec!["├", "worker#2", "completed", "1", "0", "15", "–"],
        ]
    );
    assert!(
        shown.ends_with("answer:\nmerged: done: piece a | done: piece b\n"),
        "{shown}"
    );
    let unknown = run_on(&mock, dir.path(), &["sessions", "show", "ffff"], &[]).await;
    assert_eq!(unknown.status.code(), Some(2));
    assert_eq!(
        text(&unknown.stderr),
        "orchestrate: no run \"ffff\" here (see `orchestrate sessions`)\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_another_process_runs_is_not_resumed() {
    let gate = Gate::new();
    let mock = MockLlm::start_with({
        let gate = gate.clone();
        move |_, _| Reply::text("at last").with_end(End::HoldAfter(1, gate.clone()))
    })
    .await;
    let dir = workspace();
    let mut child = command_on(&mock, dir.path(), &["a long task"], &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the run is live", || {
        runs::list(&state(dir.path()))
            .first()
            .is_some_and(|r| r.status == RunStatus::Running)
    })
    .await;
    let refused = run_on(&mock, dir.path(), &["resume", "more"], &[]).await;
    assert_eq!(refused.status.code(), Some(2));
    let pid = child.id().unwrap();
    let said = text(&refused.stderr);
    assert!(
        said.contains(&format!("is live in process {pid}")),
        "{said}"
    );
    gate.open();
    let done = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lead_that_crashes_while_its_sub_agents_run_gets_their_results() {
    let gate = Gate::new();
    let mock = MockLlm::start_with({
        let gate = gate.clone();
        move |request, _| {
            if system(request) == WORKER {
                let answer = Reply::text(format!("result of {}", piece(request)));
                return answer.with_end(End::HoldAfter(1, gate.clone()));
            }
            if results(request).is_empty() {
                return tasks(&["piece 0", "piece 1", "piece 2"]);
            }
            merged(request)
        }
    })
    .await;
    let dir = workspace();
    let mut child = command_on(&mock, dir.path(), &["--json", "split it"], &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("three sub-agents are streaming", || {
        mock.requests()
            .iter()
            .filter(|r| system(r) == WORKER)
            .count()
            == 3
    })
    .await;
    let (_, socket) = orchestrate::control::live_sockets(&state(dir.path()))
        .await
        .remove(0);
    let crash = orchestrate::control::Op::Crash {
        agent: "orchestrator".into(),
    };
    let reply = orchestrate::control::request(&socket, &crash)
        .await
        .unwrap();
    assert!(reply.ok, "{reply:?}");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut events = Vec::new();
    let mut opened = false;
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let event: Value = serde_json::from_str(&line).unwrap();
            if event["type"] == "restarted" && !opened {
                // The lead is down and back; its sub-agents have been running all along.
                opened = true;
                gate.open();
            }
            events.push(event);
        }
    };
    tokio::time::timeout(DEADLINE, read).await.unwrap();
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(opened, "the lead restarted");
    let worker_requests = mock
        .requests()
        .iter()
        .filter(|r| system(r) == WORKER)
        .count();
    assert_eq!(worker_requests, 3, "no sub-agent started again");
    assert_eq!(mock.disconnects(), 0, "no sub-agent's stream was dropped");
    let cancelled = events
        .iter()
        .filter(|e| e["type"] == "terminal" && e["outcome"] == "cancelled")
        .count();
    assert_eq!(cancelled, 0);
    let last = events.last().unwrap();
    assert_eq!(
        last["text"],
        "merged: result of piece 0 | result of piece 1 | result of piece 2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_two_levels_down_resumes_at_every_depth() {
    const MIDDLE: &str = "You delegate.";
    const LEAF: &str = "You look things up.";
    let held = Gate::new();
    let after_kill = Arc::new(AtomicBool::new(false));
    let mock = MockLlm::start_with({
        let (held, after_kill) = (held.clone(), after_kill.clone());
        move |request, _| {
            let task = |role: &str, prompt: &str| {
                let args = json!({"description": prompt, "prompt": prompt, "subagent_type": role});
                Reply::tool_calls(&[("deep1", "Task", args)])
            };
            match system(request) {
                LEAF if after_kill.load(Ordering::SeqCst) => Reply::text("the leaf's finding"),
                LEAF => Reply::text("the leaf's finding").with_end(End::HoldAfter(1, held.clone())),
                MIDDLE if results(request).is_empty() => task("leaf", "look it up"),
                MIDDLE => Reply::text(format!(
                    "middle got: {}",
                    crate::support::harness::answer(&results(request)[0])
                )),
                _ if results(request).is_empty() => task("middle", "find out"),
                _ => merged(request),
            }
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("agents")).unwrap();
    for (name, tools, prompt) in [("middle", "Task", MIDDLE), ("leaf", "Read", LEAF)] {
        std::fs::write(
            dir.path().join(format!("agents/{name}.md")),
            format!("---\nname: {name}\ndescription: {name}\ntools: {tools}\n---\n{prompt}\n"),
        )
        .unwrap();
    }
    let mut child = command_on(&mock, dir.path(), &["go deep"], &[])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the leaf is streaming", || {
        mock.requests().iter().any(|r| system(r) == LEAF)
    })
    .await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    after_kill.store(true, Ordering::SeqCst);
    let out = run_on(&mock, dir.path(), &["resume"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "merged: middle got: the leaf's finding\n"
    );
    let asked = |s: &str| mock.requests().iter().filter(|r| system(r) == s).count();
    assert_eq!(asked(LEAF), 2, "the leaf was cut off and asked again");
    assert_eq!(
        asked(MIDDLE),
        2,
        "the middle's first turn was answered, then its second"
    );
    let lead = mock
        .requests()
        .iter()
        .filter(|r| ![LEAF, MIDDLE].contains(&system(r)))
        .count();
    assert_eq!(lead, 2);
    let run = &runs::list(&state(dir.path()))[0];
    assert_eq!(run.agents.len(), 3, "no sub-agent was started twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_task_was_never_saved_asks_for_a_prompt() {
    let mock = MockLlm::start(vec![Reply::text("fresh start")]).await;
    let dir = workspace();
    // The process died right after writing the header, before the task.
    let id = orchestrate::SessionId::new();
    let sessions = state(dir.path()).sessions();
    std::fs::create_dir_all(&sessions).unwrap();
    let header = json!({"record": "header", "session": id, "agent": "orchestrator", "model": "m", "run": id});
    std::fs::write(sessions.join(format!("{id}.jsonl")), format!("{header}\n")).unwrap();

    let out = run_on(&mock, dir.path(), &["resume"], &[]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        format!(
            "orchestrate: run {id} has nothing to carry on (its process died before its task was saved); give a PROMPT\n"
        )
    );
    assert_eq!(mock.request_count(), 0);
    let given = run_on(&mock, dir.path(), &["-c", "start over"], &[]).await;
    assert_eq!(given.status.code(), Some(0), "{}", text(&given.stderr));
    assert_eq!(text(&given.stdout), "fresh start\n");
}
