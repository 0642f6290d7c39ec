//! Control of a live run from another terminal, through the real binary:
//! `orchestrate ps`, `steer`, `stop` and `kill` against a run with three
//! sub-agents, and each against a workspace with no live run.

use std::path::Path;

use serde_json::json;

use crate::cli::{command_on, orchestrate, run_on, text};
use crate::support::harness::{DEADLINE, wait_until};
use crate::support::mock_llm::{End, Gate, MockLlm, Recorded, Reply};

fn role(dir: &Path, name: &str) {
    std::fs::write(
        dir.join(format!("agents/{name}.md")),
        format!("---\nname: {name}\ndescription: {name}\ntools: Read\n---\nYou are {name}.\n"),
    )
    .unwrap();
}

fn system(request: &Recorded) -> &str {
    request.body["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
}

fn messages(request: &Recorded) -> &Vec<serde_json::Value> {
    request.body["messages"].as_array().unwrap()
}

fn answered(request: &Recorded) -> bool {
    messages(request).iter().any(|m| m["role"] == "tool")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_run_is_shown_steered_stopped_and_killed_from_another_terminal() {
    let (alpha_go, beta_go) = (Gate::new(), Gate::new());
    let mock = MockLlm::start_with({
        let (alpha_go, beta_go) = (alpha_go.clone(), beta_go.clone());
        move |request, _| {
            let read = || Reply::tool_calls(&[("r1", "Read", json!({"file_path": "notes.txt"}))]);
            match system(request) {
                "You are alpha." if !answered(request) => {
                    read().with_end(End::HoldAfter(1, alpha_go.clone()))
                }
                "You are alpha." => {
                    let last = messages(request).last().unwrap();
                    Reply::text(format!("alpha heard: {}", last["content"].as_str().unwrap_or("")))
                }
                "You are beta." if !answered(request) => {
                    read().with_end(End::HoldAfter(1, beta_go.clone()))
                }
                "You are beta." => Reply::text("beta went on after all"),
                "You are gamma." => Reply::text("never").with_end(End::HoldAfter(1, Gate::new())),
                _ if answered(request) => {
                    let firsts: Vec<String> = messages(request)
                        .iter()
                        .filter(|m| m["role"] == "tool")
                        .map(|m| crate::support::harness::answer(m["content"].as_str().unwrap_or("")).to_owned())
                        .collect();
                    Reply::text(firsts.join(" | "))
                }
                _ => {
                    let task = |id: &str, role: &str| {
                        (id.to_owned(), json!({"description": role, "prompt": format!("work, {role}"), "subagent_type": role}))
                    };
                    let calls = [task("t1", "alpha"), task("t2", "beta"), task("t3", "gamma")];
                    let calls: Vec<(&str, &str, serde_json::Value)> =
                        calls.iter().map(|(id, a)| (id.as_str(), "Task", a.clone())).collect();
                    Reply::tool_calls(&calls)
                }
            }
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("agents")).unwrap();
    for name in ["alpha", "beta", "gamma"] {
        role(dir.path(), name);
    }
    std::fs::write(dir.path().join("notes.txt"), "notes\n").unwrap();
    let child = command_on(
        &mock,
        dir.path(),
        &["--permission-mode", "bypassPermissions", "fan out"],
        &[],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    wait_until("the three sub-agents are streaming", || {
        let asked = mock.requests();
        ["You are alpha.", "You are beta.", "You are gamma."]
            .iter()
            .all(|s| asked.iter().any(|r| system(r) == *s))
    })
    .await;

    let ps = run_on(&mock, dir.path(), &["ps"], &[]).await;
    assert_eq!(ps.status.code(), Some(0), "{}", text(&ps.stderr));
    let shown = text(&ps.stdout);
    let labels: Vec<&str> = shown
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(labels.len(), 4, "{shown}");
    assert_eq!(labels[0], "orchestrator");
    let mut workers = labels[1..].to_vec();
    workers.sort_unstable();
    assert_eq!(workers, ["alpha#1", "beta#1", "gamma#1"], "{shown}");
    assert!(
        shown
            .lines()
            .nth(1)
            .unwrap()
            .contains("waiting on 3 sub-agents"),
        "{shown}"
    );

    let nobody = run_on(&mock, dir.path(), &["stop", "nobody"], &[]).await;
    assert_eq!(nobody.status.code(), Some(1));
    assert!(
        text(&nobody.stderr)
            .starts_with("orchestrate: no agent \"nobody\" in this run (agents: orchestrator, "),
        "{}",
        text(&nobody.stderr)
    );

    let steer = run_on(
        &mock,
        dir.path(),
        &["steer", "alpha#1", "mind the README"],
        &[],
    )
    .await;
    assert_eq!(steer.status.code(), Some(0), "{}", text(&steer.stderr));
    let stop = run_on(&mock, dir.path(), &["stop", "beta#1"], &[]).await;
    assert_eq!(stop.status.code(), Some(0), "{}", text(&stop.stderr));
    assert_eq!(
        text(&stop.stdout),
        "beta#1 stops at its next turn boundary\n"
    );
    // gamma named by a prefix of its session id, as its journal gives it; a
    // prefix every agent shares names none.
    let state = crate::support::harness::state(dir.path());
    let journals = || -> Vec<(String, String)> {
        (std::fs::read_dir(state.sessions()).unwrap())
            .map(|e| e.unwrap().path())
            .map(|p| {
                let id = p.file_stem().unwrap().to_string_lossy().into_owned();
                (id, std::fs::read_to_string(&p).unwrap_or_default())
            })
            .collect()
    };
    let is_gamma = |journal: &str| {
        journal
            .lines()
            .next()
            .is_some_and(|h| h.contains("\"agent\":\"gamma\""))
    };
    // The header reaches the file within the writer's flush.
    wait_until("gamma's journal is written", || {
        journals().iter().any(|(_, j)| is_gamma(j))
    })
    .await;
    let all = journals();
    let ids: Vec<&String> = all.iter().map(|(id, _)| id).collect();
    let gamma = all
        .iter()
        .find(|(_, j)| is_gamma(j))
        .map(|(id, _)| id)
        .unwrap();
    let shared = (0..gamma.len())
        .take_while(|n| {
            ids.iter()
                .all(|id| id.as_bytes()[..*n] == gamma.as_bytes()[..*n])
        })
        .last()
        .unwrap_or(0);
    // Ids made in the same second share their first digits (the time).
    assert!(shared > 0, "{ids:?}");
    let vague = run_on(&mock, dir.path(), &["kill", &gamma[..shared]], &[]).await;
    assert_eq!(vague.status.code(), Some(1));
    assert!(
        text(&vague.stderr).ends_with("agents; give more of the id\n"),
        "{}",
        text(&vague.stderr)
    );
    let kill = run_on(&mock, dir.path(), &["kill", &gamma[..30]], &[]).await;
    assert_eq!(kill.status.code(), Some(0), "{}", text(&kill.stderr));
    alpha_go.open();
    beta_go.open();

    let out = tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        "alpha heard: mind the README | [the beta sub-agent was stopped (requested) before it finished; its work so far:] | cancelled\n"
    );
    let asked = |s: &str| mock.requests().iter().filter(|r| system(r) == s).count();
    assert_eq!(
        (
            asked("You are alpha."),
            asked("You are beta."),
            asked("You are gamma.")
        ),
        (2, 1, 1),
        "alpha went on with the message, beta stopped before another turn, gamma was cut off"
    );
    assert!(mock.disconnects() >= 1, "gamma's stream was dropped");

    // The run is over: nothing is live any more.
    for args in [
        vec!["ps"],
        vec!["steer", "alpha#1", "hello"],
        vec!["stop", "alpha#1"],
        vec!["kill", "alpha#1"],
    ] {
        let out = orchestrate(dir.path(), &args, &[]).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let said = text(&out.stderr);
        assert!(
            said.starts_with("orchestrate: no live run in "),
            "{args:?}: {said}"
        );
        assert_eq!(said.lines().count(), 1, "{said}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_socket_refuses_a_process_that_descends_from_the_run() {
    use orchestrate::control::{Control, Op, request};

    let mock = MockLlm::start(Vec::new()).await;
    let dir = tempfile::tempdir().unwrap();
    let runtime = crate::support::harness::runtime(&mock, dir.path()).await;
    let state = crate::support::harness::state(dir.path());
    let lead = runtime
        .start_session(crate::support::harness::spec(
            orchestrate::ToolRegistry::new(),
        ))
        .await
        .unwrap();
    let _lock = orchestrate::runs::lock::RunLock::acquire(&state, lead).unwrap();
    let _control = Control::serve(&state, lead, runtime.handle(), runtime.subscribe()).unwrap();

    // The process serving the run (a program embedding it) is answered.
    let reply = request(&state.socket(lead), &Op::Ps { full: false })
        .await
        .unwrap();
    assert!(reply.ok, "{reply:?}");
    // A process it started, such as an agent's command, is not, not even a steer.
    for args in [vec!["ps"], vec!["steer", "tester", "do as I say"]] {
        let out = orchestrate(dir.path(), &args, &[]).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(
            text(&out.stderr),
            format!(
                "orchestrate: {}the run closed the connection unanswered (it takes requests only from outside it)\n",
                if args[0] == "ps" {
                    format!("run {lead}: ")
                } else {
                    String::new()
                }
            )
        );
    }
    assert_eq!(mock.request_count(), 0, "the steer started no run");
    runtime.shutdown().await;
}
