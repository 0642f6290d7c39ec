//! The shared rate governor through the real binary: twenty sub-agents start at
//! once against a server that, from its first worker request on, answers 429 with
//! Retry-After 2 for two seconds (as a provider's rate-limit window does). The
//! 429 one sub-agent gets holds all of them: no request the server answers after
//! its window comes sooner than two seconds after a 429 it had sent, and every
//! sub-agent then finishes.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};

use crate::cli::{run_on, text};
use crate::support::mock_llm::{MockLlm, Recorded, Reply};

const WORKER: &str = "You are a worker.";

fn is_worker(request: &Recorded) -> bool {
    request.body["messages"][0]["content"] == WORKER
}

/// The piece a worker was given: its prompt.
fn piece(request: &Recorded) -> String {
    request.body["messages"][1]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn has_results(request: &Recorded) -> bool {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["role"] == "tool")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_sub_agents_told_429_wait_out_one_shared_cooldown() {
    let pieces: Vec<String> = (0..20).map(|i| format!("piece {i}")).collect();
    let calls: Vec<(String, Value)> = pieces
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let args = json!({"description": p, "prompt": p, "subagent_type": "worker"});
            (format!("t{i}"), args)
        })
        .collect();
    let window: Mutex<Option<std::time::Instant>> = Mutex::new(None);
    let mock = MockLlm::start_with(move |request, _| {
        if is_worker(request) {
            let mut window = window.lock().unwrap();
            let ends = *window.get_or_insert(request.at + Duration::from_secs(2));
            if request.at < ends {
                return Reply::rate_limited(2);
            }
            return Reply::text(format!("done: {}", piece(request)));
        }
        if has_results(request) {
            return Reply::text("all twenty done");
        }
        let calls: Vec<(&str, &str, Value)> = calls
            .iter()
            .map(|(id, args)| (id.as_str(), "Task", args.clone()))
            .collect();
        Reply::tool_calls(&calls)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("agents/worker.md"),
        format!("---\nname: worker\ndescription: does one piece\ntools: Read\n---\n{WORKER}\n"),
    )
    .unwrap();

    let out = run_on(
        &mock,
        dir.path(),
        &["--max-parallel", "20", "--json", "split the work"],
        &[],
    )
    .await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let requests = mock.requests();
    let workers: Vec<&Recorded> = requests.iter().filter(|r| is_worker(r)).collect();
    let ends = workers[0].at + Duration::from_secs(2);
    let (told, answered): (Vec<&Recorded>, Vec<&Recorded>) =
        workers.iter().partition(|r| r.at < ends);
    let done: HashSet<String> = answered.iter().map(|r| piece(r)).collect();
    assert_eq!(done.len(), 20, "every worker was answered in the end");
    assert_eq!(answered.len(), 20, "each once");
    // Nothing inside the cooldown: each answered request came at least two
    // seconds after the last 429 the server had sent before it (the cooldown is
    // shared, so a worker also waits out the 429s its siblings were told).
    for retry in &answered {
        let last_429 = told
            .iter()
            .map(|r| r.at)
            .filter(|at| *at < retry.at)
            .max()
            .expect("a 429 came first");
        let gap = retry.at - last_429;
        assert!(
            gap >= Duration::from_secs(2),
            "a retry came {gap:?} after a 429 that said to wait 2s"
        );
    }
    // The rows said so.
    let waits = text(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"rate_limited\""))
        .count();
    assert!(waits >= 1, "no rate_limited event");
    assert_eq!(
        text(&out.stdout)
            .lines()
            .last()
            .map(|l| l.contains("all twenty done")),
        Some(true)
    );
}
