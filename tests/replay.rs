//! Honest replays through the real binary: a run recorded against the mock, then
//! replayed with another task, or where a tool call fails that succeeded in the
//! recording (or the reverse), fails with exit 1 naming the place where the run
//! left the recording; `--replay-lenient` plays on, and the same run replays
//! cleanly.

use std::path::Path;

use serde_json::json;

use crate::cli::{orchestrate, run_on, text};
use crate::support::mock_llm::{MockLlm, Recorded, Reply};

const LENIENCY: &str = " (--replay-lenient plays on regardless)\n";

/// Records `task` for the explorer in a workspace that has `notes.txt` or not: it
/// reads the file, then answers.
async fn record(with_notes: bool, task: &str) -> (tempfile::TempDir, String) {
    let mock = MockLlm::start_with(|request: &Recorded, _| {
        let answered = request.body["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        if answered {
            return Reply::text("notes read");
        }
        Reply::tool_calls(&[("r1", "Read", json!({"file_path": "notes.txt"}))])
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    workspace(dir.path(), with_notes);
    let cassette = dir.path().join("run.jsonl").to_str().unwrap().to_owned();
    let args = ["-q", "--agent", "explorer", "--record", &cassette, task];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(text(&out.stdout), "notes read\n", "{}", text(&out.stderr));
    assert_eq!(mock.request_count(), 2);
    (dir, cassette)
}

fn workspace(dir: &Path, with_notes: bool) {
    if with_notes {
        std::fs::write(dir.join("notes.txt"), "Ship on Friday.\n").unwrap();
    }
}

/// Replays `cassette` for `task` in a new workspace, with `more` flags.
async fn replay(
    cassette: &str,
    with_notes: bool,
    task: &str,
    more: &[&str],
) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    workspace(dir.path(), with_notes);
    let mut args = vec!["-q", "--agent", "explorer", "--replay", cassette];
    args.extend_from_slice(more);
    args.push(task);
    orchestrate(dir.path(), &args, &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_of_another_task_fails_naming_the_place() {
    let (_dir, cassette) = record(true, "Read the notes.").await;
    let same = replay(&cassette, true, "Read the notes.", &[]).await;
    assert_eq!(
        (text(&same.stdout).as_str(), text(&same.stderr).as_str()),
        ("notes read\n", "")
    );
    assert_eq!(same.status.code(), Some(0));

    let other = replay(&cassette, true, "Delete the notes.", &[]).await;
    assert_eq!(
        text(&other.stderr),
        format!(
            "orchestrate: replay: the run left the recording at \"explorer/turn 1\": the task differs from the recording's: sent \"Delete the notes.\", recorded \"Read the notes.\"{LENIENCY}"
        )
    );
    assert_eq!(text(&other.stdout), "");
    assert_eq!(other.status.code(), Some(1));

    let lenient = replay(&cassette, true, "Delete the notes.", &["--replay-lenient"]).await;
    assert_eq!(
        text(&lenient.stdout),
        "notes read\n",
        "{}",
        text(&lenient.stderr)
    );
    assert_eq!(lenient.status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_whose_tool_call_fails_where_the_recording_succeeded_fails() {
    let (_dir, cassette) = record(true, "Read the notes.").await;
    // No notes.txt here: the recorded Read succeeded, this one fails.
    let out = replay(&cassette, false, "Read the notes.", &[]).await;
    let err = text(&out.stderr);
    assert!(
        err.starts_with(
            "orchestrate: replay: the run left the recording at \"explorer/turn 2\": the result of call \"r1\" is an error where the recording had success: \""
        ) && err.ends_with(LENIENCY)
            && err.lines().count() == 1,
        "{err}"
    );
    assert_eq!(out.status.code(), Some(1));

    let lenient = replay(&cassette, false, "Read the notes.", &["--replay-lenient"]).await;
    assert_eq!(
        text(&lenient.stdout),
        "notes read\n",
        "{}",
        text(&lenient.stderr)
    );
    assert_eq!(lenient.status.code(), Some(0));

    // The reverse: recorded without the file, replayed with it.
    let (_dir, cassette) = record(false, "Read the notes.").await;
    let out = replay(&cassette, true, "Read the notes.", &[]).await;
    let err = text(&out.stderr);
    assert!(
        err.starts_with(
            "orchestrate: replay: the run left the recording at \"explorer/turn 2\": the result of call \"r1\" is a success where the recording had an error: \""
        ) && err.ends_with(&format!("Ship on Friday.\"{LENIENCY}")),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(1));
}

#[tokio::test]
async fn a_replay_flag_without_a_cassette_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = orchestrate(dir.path(), &["--replay-lenient", "go"], &[]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--replay <FILE>"),
        "{}",
        text(&out.stderr)
    );
}
