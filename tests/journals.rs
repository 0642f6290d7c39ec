//! Journals at the edges, through the real binary: a tail torn inside a
//! character, a damaged line in the middle, a disk that fills mid-run, and a
//! journal of today's format checked in, which later builds must still resume.

use std::path::{Path, PathBuf};

use orchestrate::journal::read_journal;
use orchestrate::runs::{self, RunStatus};
use serde_json::json;

use crate::cli::{command_on, run_on, text, wrapped};
use crate::support::harness::{DEADLINE, state};
use crate::support::mock_llm::{MockLlm, Recorded, Reply};

/// The journal of a run's lead.
fn lead_journal(workspace: &Path) -> PathBuf {
    let state = state(workspace);
    let run = &runs::list(&state)[0];
    state.journal(run.id)
}

/// The messages of a request, as (role, content or tool call id) pairs.
fn messages(request: &Recorded) -> Vec<(String, String)> {
    let said = |m: &serde_json::Value| match m["role"].as_str() {
        Some("tool") => format!(
            "{} {}",
            m["tool_call_id"].as_str().unwrap_or(""),
            m["content"].as_str().unwrap_or("")
        ),
        Some("assistant") if m["tool_calls"].is_array() => {
            let calls: Vec<&str> = (m["tool_calls"].as_array().unwrap().iter())
                .map(|c| c["id"].as_str().unwrap_or(""))
                .collect();
            format!("calls {}", calls.join(" "))
        }
        _ => m["content"].as_str().unwrap_or("").to_owned(),
    };
    (request.body["messages"].as_array().unwrap().iter())
        .skip(1)
        .map(|m| (m["role"].as_str().unwrap_or("").to_owned(), said(m)))
        .collect()
}

fn pair(role: &str, said: &str) -> (String, String) {
    (role.to_owned(), said.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tail_torn_inside_a_character_is_cut_and_the_run_resumes_whole() {
    let mock = MockLlm::start(vec![Reply::text("réponse ✓ 日本"), Reply::text("encore ✓")]).await;
    let dir = tempfile::tempdir().unwrap();
    let first = run_on(&mock, dir.path(), &["question ✓"], &[]).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));

    // Cut the journal inside the answer's 日: the answer and the run's end are
    // gone, the question is not.
    let path = lead_journal(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let answer = "réponse ✓ 日".as_bytes();
    let at = (bytes.windows(answer.len()))
        .position(|w| w == answer)
        .expect("the answer is journaled");
    std::fs::write(&path, &bytes[..at + answer.len() - 1]).unwrap();

    let listed = run_on(&mock, dir.path(), &["sessions"], &[]).await;
    assert_eq!(text(&listed.stderr), "", "a torn tail is no damage");
    assert!(
        text(&listed.stdout).contains("interrupted"),
        "{}",
        text(&listed.stdout)
    );

    let resumed = run_on(&mock, dir.path(), &["resume"], &[]).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    assert_eq!(text(&resumed.stdout), "encore ✓\n");
    assert_eq!(messages(&mock.requests()[1]), [pair("user", "question ✓")]);

    // The fragment was cut before the resumed run appended: every line reads.
    let read = read_journal(&path).unwrap();
    assert!(read.damaged.is_empty(), "{:?}", read.damaged);
    let again = std::fs::read(&path).unwrap();
    assert!(again.ends_with(b"\n"));
    assert!(
        !again
            .windows(answer.len() - 1)
            .any(|w| w == &answer[..answer.len() - 1])
    );
    assert_eq!(
        runs::list(&state(dir.path()))[0].status,
        RunStatus::Finished
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_line_mid_journal_is_named_and_the_run_carries_on_without_it() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("r1", "Read", json!({"file_path": "notes.txt"}))]),
        Reply::text("read it"),
        Reply::text("second answer"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "alpha\n").unwrap();
    let first = run_on(&mock, dir.path(), &["read the notes"], &[]).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));

    // The line holding the Read's result rots on disk.
    let path = lead_journal(dir.path());
    let journal = std::fs::read_to_string(&path).unwrap();
    let number = 1
        + (journal.lines())
            .position(|l| l.contains(r#""role":"tool""#))
            .expect("the result is journaled");
    let damaged: String = (journal.lines().enumerate())
        .map(|(i, l)| match i + 1 == number {
            true => format!("{}\n", "\u{fffd}".repeat(l.len() / 3)),
            false => format!("{l}\n"),
        })
        .collect();
    std::fs::write(&path, damaged).unwrap();
    let warning = format!(
        "orchestrate: warning: {}:{number}: damaged line skipped (",
        path.display()
    );

    let listed = run_on(&mock, dir.path(), &["sessions"], &[]).await;
    assert!(
        text(&listed.stderr).starts_with(&warning),
        "{}",
        text(&listed.stderr)
    );
    assert_eq!(text(&listed.stderr).lines().count(), 1);
    assert!(
        text(&listed.stdout).contains("completed"),
        "the run is still listed"
    );

    let follow = run_on(&mock, dir.path(), &["-c", "and now?"], &[]).await;
    assert_eq!(follow.status.code(), Some(0), "{}", text(&follow.stderr));
    assert!(
        text(&follow.stderr).starts_with(&warning),
        "{}",
        text(&follow.stderr)
    );
    assert_eq!(text(&follow.stdout), "second answer\n");
    // The call whose result was lost is answered as interrupted: the
    // conversation stays one any provider takes.
    assert_eq!(
        messages(&mock.requests()[2]),
        [
            pair("user", "read the notes"),
            pair("assistant", "calls r1"),
            pair(
                "tool",
                "r1 interrupted: this tool call did not complete and its result was lost"
            ),
            pair("assistant", "read it"),
            pair("user", "and now?"),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_of_the_first_format_resumes() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/journals/format-1");
    let mock = MockLlm::start(vec![Reply::text("resumed from format 1")]).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("agents/worker.md"),
        "---\nname: worker\ndescription: does one piece\ntools: Read\n---\nYou are a worker.\n",
    )
    .unwrap();
    let sessions = state(dir.path()).sessions();
    std::fs::create_dir_all(&sessions).unwrap();
    for entry in std::fs::read_dir(&fixture).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), sessions.join(entry.file_name())).unwrap();
    }
    let run = &runs::list(&state(dir.path()))[0];
    assert_eq!(run.status, RunStatus::Interrupted);
    assert_eq!(run.agents.len(), 2);

    let out = run_on(&mock, dir.path(), &["resume"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "resumed from format 1\n");
    assert_eq!(
        mock.request_count(),
        1,
        "the finished worker is not asked again"
    );
    assert_eq!(
        messages(&mock.requests()[0]),
        [
            pair("user", "go"),
            pair("assistant", "calls r1 t1"),
            pair("tool", "r1      1\talpha ✓\n"),
            pair(
                "tool",
                "t1 done\n\n[worker: 1 turns, 0 tool calls, 15 tokens, 0.0s]"
            ),
        ]
    );
}

/// `orchestrate` run in a user and mount namespace of its own whose state
/// folder is a tmpfs of `size`; the state is copied to `keep` when it exits.
fn on_a_small_disk(
    direct: &tokio::process::Command,
    state_home: &Path,
    keep: &Path,
    size: &str,
) -> tokio::process::Command {
    let script = format!(
        "mount -t tmpfs -o size={size} tmpfs \"$XDG_STATE_HOME\" || exit 97; \"$@\"; rc=$?; cp -a \"$XDG_STATE_HOME/.\" '{}'; exit $rc",
        keep.display()
    );
    let mut cmd = wrapped(
        direct,
        "unshare",
        &[
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            &script,
            "sh",
        ],
    );
    cmd.env("XDG_STATE_HOME", state_home);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_that_fills_fails_the_session_naming_its_journal_cut_to_whole_lines() {
    let big = "x".repeat(400_000);
    let mock = MockLlm::start(vec![Reply::tool_calls(&[(
        "w1",
        "Write",
        json!({"file_path": "big.txt", "content": big}),
    )])])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let state_home = tempfile::tempdir().unwrap();
    let keep = tempfile::tempdir().unwrap();
    let (state_home, keep) = (state_home.path(), keep.path());
    let direct = command_on(
        &mock,
        dir.path(),
        &["--permission-mode", "acceptEdits", "write it"],
        &[],
    );
    let out = on_a_small_disk(&direct, state_home, keep, "256k").output();
    let out = tokio::time::timeout(DEADLINE, out).await.unwrap().unwrap();
    assert_ne!(
        out.status.code(),
        Some(97),
        "no tmpfs: {}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    let journals: Vec<PathBuf> = walk(keep)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    let [journal] = journals.as_slice() else {
        panic!("{journals:?}")
    };
    let name = journal.file_name().unwrap().to_str().unwrap();
    assert!(
        stderr.contains(name) && stderr.contains("No space left on device"),
        "{stderr}"
    );
    assert!(!dir.path().join("big.txt").exists(), "the Write never ran");
    // What is on disk is whole lines, and reads.
    let bytes = std::fs::read(journal).unwrap();
    assert!(
        bytes.ends_with(b"\n"),
        "cut back to its last whole line: {} bytes, ending {:?}; {stderr}",
        bytes.len(),
        String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(300)..])
    );
    let read = read_journal(journal).unwrap();
    assert!(read.damaged.is_empty(), "{:?}", read.damaged);
    let asked = |r: &orchestrate::journal::Record| matches!(r, orchestrate::journal::Record::Message { message: orchestrate::Message::User { content } } if content == "write it");
    assert!(
        read.records.iter().any(asked),
        "the lines before the failure stay"
    );
    // The run is listed from what was kept, and can be carried on.
    let keep_home = keep.display().to_string();
    let listed = run_on(
        &mock,
        dir.path(),
        &["sessions"],
        &[("XDG_STATE_HOME", &keep_home)],
    )
    .await;
    assert!(
        text(&listed.stdout).contains("interrupted"),
        "{}",
        text(&listed.stdout)
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        match path.is_dir() {
            true => found.extend(walk(&path)),
            false => found.push(path),
        }
    }
    found
}

/// A file of `bytes` bytes that reads like source: lines of words, quotes and a
/// tab, as a model writes.
fn source_text(bytes: usize) -> String {
    let mut text = String::new();
    let mut n = 0;
    while text.len() < bytes {
        text.push_str(&format!(
            "\tlet value_{n} = compute(\"item {n}\", {n}); // step {n}\n"
        ));
        n += 1;
    }
    text.truncate(bytes - 1);
    text.push('\n');
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_of_100_kb_journals_its_content_once() {
    let content = source_text(100_000);
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[(
            "w1",
            "Write",
            json!({"file_path": "big.rs", "content": content}),
        )]),
        Reply::text("written"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let args = ["--json", "--permission-mode", "acceptEdits", "write it"];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("big.rs")).unwrap(),
        content
    );
    let journaled: u64 = walk(&state(dir.path()).sessions())
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(
        journaled <= 220_000,
        "a 100 KB Write journaled {journaled} bytes"
    );
    // The stream still carries every event whole.
    let events: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |kind: &str| events.iter().find(|e| e["type"] == kind).unwrap().clone();
    let args: serde_json::Value =
        serde_json::from_str(of("tool_started")["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args["content"], content);
    let changed = of("file_changed");
    assert_eq!(changed["created"], true);
    assert!(changed["diff"].as_str().unwrap().len() > 100_000);
    // The model is told what was made, not its own content back.
    let requests = mock.requests();
    let result = &requests[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["content"];
    let lines = content.lines().count();
    assert_eq!(
        result.as_str().unwrap(),
        format!("Created big.rs ({lines} lines, 100000 bytes).")
    );
    // Resume reads the lean journal back as the whole conversation.
    let run = &runs::list(&state(dir.path()))[0];
    assert_eq!(run.status, RunStatus::Finished);
    assert_eq!(run.lead().stats.tool_calls, 1);
}
