//! Permission modes through the runtime: what runs, what is asked, what is refused,
//! and that a refused call is an error result the session goes on from.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use orchestrate::tools::permissions::{Answer, Approver, PermissionMode, PermissionRequest};
use orchestrate::{Runtime, RuntimeConfig, ToolRegistry};
use serde_json::{Value, json};

use crate::support::harness;
use crate::support::mock_llm::{MockLlm, Reply};

/// Answers every question the same way and counts them.
#[derive(Debug)]
struct Scripted {
    answer: Answer,
    asked: AtomicUsize,
}

impl Approver for Scripted {
    fn ask(&self, _request: PermissionRequest) -> BoxFuture<'_, Answer> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { self.answer })
    }
}

/// Runs one prompt in which the model makes `calls`, then answers "done"; returns
/// the tool results the model got back, the workspace and the approver's count.
async fn run(
    mode: PermissionMode,
    approver: Option<Arc<Scripted>>,
    calls: &[(&str, &str, Value)],
) -> (Vec<String>, tempfile::TempDir, usize) {
    let mock = MockLlm::start(vec![Reply::tool_calls(calls), Reply::text("done")]).await;
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().canonicalize().unwrap();
    let mut config = RuntimeConfig::new(
        &workspace,
        harness::client(&mock, std::time::Duration::from_secs(5)),
    );
    config.state = Some(harness::state(&workspace));
    if let Some(approver) = &approver {
        config.approver = approver.clone();
    }
    let runtime = Runtime::start(config).await.unwrap();
    let mut spec = harness::spec(ToolRegistry::standard());
    spec.permission_mode = mode;
    let session = runtime.start_session(spec).await.unwrap();
    let (outcome, _) = harness::run(&runtime, session, "change things").await;
    assert_eq!(
        harness::finished_text(&outcome),
        "done",
        "the session went on after its tool results"
    );
    runtime.shutdown().await;
    let results = harness::tool_results(&mock.requests()[1])
        .into_iter()
        .map(|(_, content)| content)
        .collect();
    let asked = approver.map_or(0, |a| a.asked.load(Ordering::SeqCst));
    (results, dir, asked)
}

fn write(id: &str, path: &str) -> (String, &'static str, Value) {
    (
        id.to_owned(),
        "Write",
        json!({"file_path": path, "content": "hello\n"}),
    )
}

fn calls<'a>(list: &'a [(String, &'static str, Value)]) -> Vec<(&'a str, &'static str, Value)> {
    list.iter()
        .map(|(id, name, args)| (id.as_str(), *name, args.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_refuses_edits_and_nothing_changes() {
    let list = [
        write("w1", "new.txt"),
        (
            "e1".to_owned(),
            "Edit",
            json!({"file_path": "x.txt", "old_string": "", "new_string": "x"}),
        ),
    ];
    let (results, dir, _) = run(PermissionMode::Plan, None, &calls(&list)).await;
    assert_eq!(
        results,
        [
            "Error: permission denied: Write is not allowed in plan mode, which allows read-only tools only",
            "Error: permission denied: Edit is not allowed in plan mode, which allows read-only tools only",
        ]
    );
    assert!(!dir.path().join("new.txt").exists() && !dir.path().join("x.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_mode_without_a_terminal_denies_and_names_the_flag() {
    let (results, dir, _) = run(
        PermissionMode::Default,
        None,
        &calls(&[write("w1", "new.txt")]),
    )
    .await;
    assert_eq!(
        results,
        [
            "Error: permission denied: Write needs approval under permission mode default, and there is no terminal to ask; run with --permission-mode acceptEdits to allow it"
        ]
    );
    assert!(!dir.path().join("new.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_edits_and_bypass_allow_edits_without_asking() {
    for mode in [
        PermissionMode::AcceptEdits,
        PermissionMode::BypassPermissions,
    ] {
        let approver = Arc::new(Scripted {
            answer: Answer::No,
            asked: AtomicUsize::new(0),
        });
        let (results, dir, asked) =
            run(mode, Some(approver), &calls(&[write("w1", "new.txt")])).await;
        assert!(
            results[0].starts_with("Created new.txt (1 lines, "),
            "{mode}: {results:?}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("new.txt")).unwrap(),
            "hello\n"
        );
        assert_eq!(asked, 0, "{mode}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_who_says_always_is_asked_once_per_tool() {
    let approver = Arc::new(Scripted {
        answer: Answer::Always,
        asked: AtomicUsize::new(0),
    });
    let list = [write("w1", "a.txt"), write("w2", "b.txt")];
    let (results, dir, asked) = run(PermissionMode::Default, Some(approver), &calls(&list)).await;
    assert!(
        results.iter().all(|r| r.starts_with("Created")),
        "{results:?}"
    );
    assert!(dir.path().join("a.txt").exists() && dir.path().join("b.txt").exists());
    assert_eq!(asked, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_who_says_no_refuses_that_call_only() {
    let approver = Arc::new(Scripted {
        answer: Answer::No,
        asked: AtomicUsize::new(0),
    });
    let (results, _dir, asked) = run(
        PermissionMode::Default,
        Some(approver),
        &calls(&[write("w1", "a.txt")]),
    )
    .await;
    assert_eq!(
        results,
        [
            "Error: permission denied: Write was not approved (permission mode default); run with --permission-mode acceptEdits to allow it"
        ]
    );
    assert_eq!(asked, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_refuses_commands_and_bypass_runs_them() {
    let bash = || {
        [(
            "b1".to_owned(),
            "Bash",
            json!({"command": "echo ran > ran.txt"}),
        )]
    };
    let (results, dir, _) = run(PermissionMode::Plan, None, &calls(&bash())).await;
    assert_eq!(
        results,
        [
            "Error: permission denied: Bash is not allowed in plan mode, which allows read-only tools only"
        ]
    );
    assert!(!dir.path().join("ran.txt").exists());
    let (results, dir, _) = run(PermissionMode::BypassPermissions, None, &calls(&bash())).await;
    assert_eq!(results, ["(no output)"]);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ran.txt")).unwrap(),
        "ran\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_tools_run_in_every_mode() {
    for mode in [PermissionMode::Plan, PermissionMode::Default] {
        let list = [("l1".to_owned(), "Ls", json!({}))];
        let (results, _dir, _) = run(mode, None, &calls(&list)).await;
        assert!(!results[0].starts_with("Error"), "{mode}: {results:?}");
    }
}
