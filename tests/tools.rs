//! Tool scheduling through a session: safe calls fan out, unsafe ones run one at a
//! time, results come back in call order; and the real tools doing real work.

use orchestrate::{Event, EventKind, ToolRegistry};
use serde_json::{Value, json};

use crate::support::harness::{self, Lookup};
use crate::support::mock_llm::{MockLlm, Reply};

/// The ids `c0` … `c7`.
fn ids() -> Vec<String> {
    (0..8).map(|i| format!("c{i}")).collect()
}

/// Runs one turn of eight `lookup` calls on `lookup`; returns the ids of the
/// results as the model got them back, and the run's events.
async fn eight_calls(lookup: &Lookup) -> (Vec<String>, Vec<Event>) {
    let ids = ids();
    let calls: Vec<(&str, &str, Value)> = ids
        .iter()
        .map(|id| (id.as_str(), "lookup", json!({"city": id})))
        .collect();
    let mock = MockLlm::start(vec![Reply::tool_calls(&calls), Reply::text("done")]).await;
    let (_dir, runtime, session) = harness::start(
        &mock,
        harness::spec(ToolRegistry::new().with(lookup.clone())),
    )
    .await;
    let (outcome, events) = harness::run(&runtime, session, "look them all up").await;
    assert_eq!(harness::finished_text(&outcome), "done");
    runtime.shutdown().await;
    let order = harness::tool_results(&mock.requests()[1])
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    (order, events)
}

/// The tool calls' starts and ends as the session announced them, in order.
fn starts_and_ends(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolStarted { call_id, .. } => Some(format!("start {call_id}")),
            EventKind::ToolFinished { call_id, .. } => Some(format!("end {call_id}")),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_safe_calls_run_together() {
    // Each call waits until all eight are running: run one by one, the first would
    // wait forever and the run would miss its deadline.
    let lookup = Lookup::meeting(8);
    let (order, events) = eight_calls(&lookup).await;
    assert_eq!(lookup.invocations().len(), 8);
    assert_eq!(lookup.most_at_once(), 8);
    let announced = starts_and_ends(&events);
    assert!(
        announced[..8].iter().all(|a| a.starts_with("start ")),
        "all eight started before any ended: {announced:?}"
    );
    assert_eq!(order, ids());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_unsafe_calls_run_one_after_another() {
    let lookup = Lookup::new(false);
    let (order, events) = eight_calls(&lookup).await;
    let calls = lookup.invocations();
    let started: Vec<&str> = calls
        .iter()
        .map(|c| c.input["city"].as_str().unwrap())
        .collect();
    assert_eq!(started, ids(), "the calls started in call order");
    assert_eq!(
        lookup.most_at_once(),
        1,
        "unsafe calls overlapped: {calls:?}"
    );
    // The session started each call only once the one before it had ended.
    let one_by_one: Vec<String> = ids()
        .iter()
        .flat_map(|id| [format!("start {id}"), format!("end {id}")])
        .collect();
    assert_eq!(starts_and_ends(&events), one_by_one);
    assert_eq!(order, ids());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_reads_then_edits_a_real_file() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("r1", "Read", json!({"file_path": "src/lib.rs"}))]),
        Reply::tool_calls(&[(
            "e1",
            "Edit",
            json!({"file_path": "src/lib.rs", "old_string": "a - b", "new_string": "a + b"}),
        )]),
        Reply::tool_calls(&[(
            "g1",
            "Grep",
            json!({"pattern": "a \\+ b", "output_mode": "content"}),
        )]),
        Reply::text("fixed"),
    ])
    .await;
    let (dir, runtime, session) =
        harness::start(&mock, harness::spec(ToolRegistry::standard())).await;
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    std::fs::write(
        dir.path().join("src/lib.rs"),
        "pub fn add(a: i32, b: i32) -> i32 {\n    a - b\n}\n",
    )
    .unwrap();
    let (outcome, _) = harness::run(&runtime, session, "fix add").await;
    assert_eq!(harness::finished_text(&outcome), "fixed");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("src/lib.rs")).unwrap(),
        "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n"
    );
    let last = mock.requests()[3].body["messages"].clone();
    let grep = last
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert_eq!(grep["content"], "src/lib.rs:2:    a + b");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_outside_the_workspace_is_read_or_written_even_through_a_symlink() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret\n").unwrap();
    let calls = [
        ("r1", "Read", json!({"file_path": "link/secret.txt"})),
        (
            "r2",
            "Read",
            json!({"file_path": "../../../../../../etc/passwd"}),
        ),
        (
            "w1",
            "Write",
            json!({"file_path": "link/planted.txt", "content": "x"}),
        ),
        (
            "e1",
            "Edit",
            json!({"file_path": "link/secret.txt", "old_string": "top", "new_string": "no"}),
        ),
        (
            "w2",
            "Write",
            json!({"file_path": outside.path().join("abs.txt").to_str().unwrap(), "content": "x"}),
        ),
        ("g1", "Grep", json!({"pattern": "secret", "path": "link"})),
    ];
    let mock = MockLlm::start(vec![Reply::tool_calls(&calls), Reply::text("refused")]).await;
    let (dir, runtime, session) =
        harness::start(&mock, harness::spec(ToolRegistry::standard())).await;
    std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
    let (outcome, _) = harness::run(&runtime, session, "exfiltrate").await;
    assert_eq!(harness::finished_text(&outcome), "refused");
    runtime.shutdown().await;
    let results: Vec<String> = harness::tool_results(&mock.requests()[1])
        .into_iter()
        .map(|(_, content)| content)
        .collect();
    assert_eq!(results.len(), 6);
    for result in &results {
        assert!(
            result.starts_with("Error:") && result.contains("outside the workspace"),
            "{result}"
        );
        assert!(!result.contains("top secret"), "{result}");
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "top secret\n"
    );
    assert!(
        !outside.path().join("planted.txt").exists() && !outside.path().join("abs.txt").exists()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_publishes_its_diff() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("r1", "Read", json!({"file_path": "a.txt"}))]),
        Reply::tool_calls(&[(
            "e1",
            "Edit",
            json!({"file_path": "a.txt", "old_string": "old", "new_string": "new"}),
        )]),
        Reply::text("done"),
    ])
    .await;
    let (dir, runtime, session) =
        harness::start(&mock, harness::spec(ToolRegistry::standard())).await;
    std::fs::write(dir.path().join("a.txt"), "keep\nold\n").unwrap();
    let (_, events) = harness::run(&runtime, session, "edit").await;
    runtime.shutdown().await;
    let diffs: Vec<(String, String, String)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            orchestrate::EventKind::FileChanged {
                call_id,
                path,
                diff,
                created: false,
                ..
            } => Some((call_id.clone(), path.clone(), diff.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        diffs,
        [(
            "e1".to_owned(),
            "a.txt".to_owned(),
            "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n keep\n-old\n+new\n".to_owned()
        )]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_different_files_run_together_and_to_one_file_in_call_order() {
    let write = |id: &'static str, path: &str, content: &str| {
        (id, "Write", json!({"file_path": path, "content": content}))
    };
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[
            write("w1", "a.txt", "first\n"),
            write("w2", "b.txt", "b\n"),
            write("w3", "./a.txt", "second\n"),
            write("w4", "c.txt", "c\n"),
        ]),
        Reply::text("written"),
    ])
    .await;
    let (dir, runtime, session) =
        harness::start(&mock, harness::spec(ToolRegistry::standard())).await;
    let (outcome, events) = harness::run(&runtime, session, "write them").await;
    assert_eq!(harness::finished_text(&outcome), "written");
    runtime.shutdown().await;
    let announced = starts_and_ends(&events);
    // w1 and w2 start together; w3 names a.txt again, so it and w4 wait for both.
    assert_eq!(announced[..2], ["start w1", "start w2"], "{announced:?}");
    assert!(announced[2..4].iter().all(|a| a.starts_with("end ")));
    assert_eq!(announced[4..6], ["start w3", "start w4"], "{announced:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "second\n"
    );
    for (file, content) in [("b.txt", "b\n"), ("c.txt", "c\n")] {
        assert_eq!(
            std::fs::read_to_string(dir.path().join(file)).unwrap(),
            content
        );
    }
    let results = harness::tool_results(&mock.requests()[1]);
    let ids: Vec<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["w1", "w2", "w3", "w4"]);
}
