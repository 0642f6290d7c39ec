//! Chaos: 100 sub-agents under mixed provider faults (429 with Retry-After, 500,
//! 529, a drop mid-stream, a stall, a malformed chunk) on a fifth of their
//! requests. Every sub-agent finishes, no tool result is lost or duplicated (read
//! back from the journals), and every journaled conversation keeps the tool-call
//! protocol without a repair.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use orchestrate::conversation::enforce_protocol;
use orchestrate::journal::{Record, read_journal};
use orchestrate::roles::catalog::Catalog;
use orchestrate::task::{Caller, Task, TaskEnv};
use orchestrate::tools::permissions::PermissionMode;
use orchestrate::{Message, Outcome, ToolRegistry};
use serde_json::{Value, json};

use crate::support::harness;
use crate::support::mock_llm::{End, Gate, MockLlm, Recorded, Reply};

const WORKER: &str = "You are a chaos worker.";
const WORKERS: usize = 100;

fn system(request: &Recorded) -> &str {
    request.body["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
}

fn messages(request: &Recorded) -> &Vec<Value> {
    request.body["messages"].as_array().unwrap()
}

/// The fault for a request, by a hash of what it asks: a fifth of the requests
/// fail on their first attempt, and a few of those on their second too, so every
/// one succeeds within the retry budget.
fn fault(key: u64, attempt: usize) -> Option<Reply> {
    let roll = key % 100;
    if roll >= 20 || attempt > 1 + usize::from(roll < 4) {
        return None;
    }
    let answer = Reply::text("this answer does not arrive whole");
    Some(match (key / 100) % 6 {
        0 => Reply::rate_limited(1),
        1 => Reply::status(500, "boom"),
        2 => Reply::status(529, "Overloaded"),
        3 => answer.with_end(End::DropAfter(2)),
        // Nothing more comes: the stream's idle timeout cuts it.
        4 => answer.with_end(End::HoldAfter(1, Gate::new())),
        _ => answer.with_malformed_chunk(1),
    })
}

fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_sub_agents_under_mixed_faults_all_finish_and_lose_nothing() {
    let attempts: Arc<Mutex<HashMap<u64, usize>>> = Arc::default();
    let mock = MockLlm::start_with({
        let attempts = attempts.clone();
        move |request, _| {
            // The same request (same conversation so far) is the same key.
            let key = fnv(&messages(request).iter().map(Value::to_string).collect::<String>());
            let attempt = {
                let mut seen = attempts.lock().unwrap();
                let n = seen.entry(key).or_insert(0);
                *n += 1;
                *n
            };
            if let Some(reply) = fault(key, attempt) {
                return reply;
            }
            let answered = messages(request).iter().filter(|m| m["role"] == "tool").count();
            if system(request) == WORKER {
                let piece = messages(request)[1]["content"].as_str().unwrap().to_owned();
                if answered == 0 {
                    let read = json!({"file_path": "data.txt"});
                    return Reply::tool_calls(&[(&format!("read-{piece}"), "Read", read)]);
                }
                return Reply::text(format!("{piece} done"));
            }
            // The lead: two turns of 50 Task calls, then its answer.
            let calls = |from: usize| -> Reply {
                let calls: Vec<(String, Value)> = (from..from + WORKERS / 2)
                    .map(|i| {
                        let prompt = format!("piece {i}");
                        (format!("t{i}"), json!({"description": prompt, "prompt": prompt, "subagent_type": "worker"}))
                    })
                    .collect();
                let calls: Vec<(&str, &str, Value)> =
                    calls.iter().map(|(id, a)| (id.as_str(), "Task", a.clone())).collect();
                Reply::tool_calls(&calls)
            };
            match answered {
                0 => calls(0),
                n if n == WORKERS / 2 => calls(WORKERS / 2),
                _ => Reply::text(format!("all {answered} pieces done")),
            }
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data.txt"), "the data\n").unwrap();
    let roles = dir.path().join("roles");
    std::fs::create_dir_all(&roles).unwrap();
    std::fs::write(
        roles.join("worker.md"),
        format!("---\nname: worker\ndescription: one piece\ntools: Read\n---\n{WORKER}\n"),
    )
    .unwrap();
    // A stalled stream is cut after half a second without an event.
    let runtime = harness::runtime_with(&mock, dir.path(), Duration::from_millis(500)).await;
    let catalog = Arc::new(RwLock::new(Catalog::load(std::slice::from_ref(&roles))));
    let env = Arc::new(TaskEnv::new(
        runtime.handle(),
        catalog,
        WORKERS,
        1,
        ToolRegistry::standard(),
    ));
    let caller = Caller {
        depth: 0,
        model: "mock-model".into(),
        permission_mode: PermissionMode::BypassPermissions,
        place: "lead".into(),
    };
    let lead = runtime
        .start_session(harness::spec(
            ToolRegistry::new().with(Task::new(env, caller)),
        ))
        .await
        .unwrap();
    let (outcome, _) = tokio::time::timeout(
        Duration::from_secs(120),
        harness::run(&runtime, lead, "split it"),
    )
    .await
    .expect("the fan-out finished");
    runtime.shutdown().await;
    let Outcome::Completed { text, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(text, &format!("all {WORKERS} pieces done"));
    let faulted = attempts
        .lock()
        .unwrap()
        .values()
        .filter(|n| **n > 1)
        .count();
    assert!(
        faulted >= 30,
        "a fifth of the ~200 distinct requests faulted (saw {faulted})"
    );

    // From the journals: each session's tool results, each call's exactly once,
    // and its conversation needing no repair.
    let mut workers = 0;
    for entry in std::fs::read_dir(crate::support::harness::state(dir.path()).sessions()).unwrap() {
        let records = read_journal(&entry.unwrap().path()).unwrap().records;
        let transcript: Vec<Message> = records
            .iter()
            .filter_map(|r| match r {
                Record::Message { message } => Some(message.clone()),
                _ => None,
            })
            .collect();
        let calls: Vec<String> = transcript
            .iter()
            .filter_map(|m| match m {
                Message::Assistant(a) => Some(a.tool_calls.iter().map(|c| c.id.clone())),
                _ => None,
            })
            .flatten()
            .collect();
        let mut results: Vec<String> = transcript
            .iter()
            .filter_map(|m| match m {
                Message::Tool(r) => Some(r.tool_call_id.clone()),
                _ => None,
            })
            .collect();
        results.sort();
        let mut expected = calls.clone();
        expected.sort();
        assert_eq!(results, expected, "every call has exactly one result");
        let (_, repairs) = enforce_protocol(&transcript);
        assert_eq!(
            (repairs.inserted, repairs.dropped),
            (0, 0),
            "{transcript:?}"
        );
        let is_worker =
            matches!(records.first(), Some(Record::Header { agent, .. }) if agent == "worker");
        workers += usize::from(is_worker);
    }
    assert_eq!(workers, WORKERS);
}
