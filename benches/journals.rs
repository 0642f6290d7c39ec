//! What journals cost: the bytes a run writing a 100 KB file journals, and the
//! time `orchestrate sessions` takes over 100 runs of 100 sub-agents each.
//!
//! `cargo bench --bench journals` (`JOURNAL_ROUNDS`, default 3). Everything runs
//! the `orchestrate` binary against the mock LLM, in a fresh workspace whose
//! state is under its own `HOME`.
//!
//! - Bytes: a lead whose one call Writes a new 100 000-byte file, Writes over
//!   such a file with one line changed, or Edits one line of it, then answers.
//!   The row gives the bytes of every `*.jsonl` file beside the file's own.
//! - Listing: one real run (a lead whose one turn makes 100 Task calls, each
//!   worker a Read and an answer) copied to 100 runs under fresh ids, then
//!   `orchestrate sessions` timed with the runs' index removed before each call
//!   (every journal read), with the index in place, and after one run's lead
//!   journal grew; beside `ls -l` of the journals' folder (a stat of each) and
//!   `orchestrate --version` (the binary's start). `JOURNAL_KEEP=1` keeps the
//!   listing's workspace instead of timing it, for profiling.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

#[path = "../tests/support/mock_llm.rs"]
mod mock_llm;

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mock_llm::{MockLlm, Recorded, Reply};
use orchestrate::protocol::SessionId;
use orchestrate::state::StateDir;
use serde_json::{Value, json};

const FILE_BYTES: usize = 100_000;
const RUNS: usize = 100;
const WORKERS: usize = 100;
/// Calls of `orchestrate sessions` a round, for each case.
const CALLS: usize = 10;

fn main() {
    let rounds = support::env_or("JOURNAL_ROUNDS", 3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for round in 1..=rounds {
        println!("round {round}");
        runtime.block_on(bytes());
        runtime.block_on(listing());
    }
}

/// The binary, in `workspace`, as a person runs it there.
fn orchestrate(workspace: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orchestrate"));
    cmd.arg("-C").arg(workspace).args(args);
    for var in [
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ORCHESTRATE_MODEL",
        "RUST_LOG",
        "XDG_STATE_HOME",
        "XDG_RUNTIME_DIR",
        "XDG_CONFIG_HOME",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("HOME", workspace)
        .stdin(std::process::Stdio::null());
    cmd
}

fn state(workspace: &Path) -> StateDir {
    let workspace = workspace.canonicalize().unwrap();
    StateDir::at(&workspace.join(".local/state/orchestrate"), &workspace)
}

/// Runs a task against `mock`, which must succeed.
async fn run_task(mock: &MockLlm, workspace: &Path, args: &[&str]) {
    let url = mock.base_url();
    let mut all = vec!["--base-url", url.as_str(), "--model", "m"];
    all.extend_from_slice(args);
    let mut cmd = orchestrate(workspace, &all);
    let out = tokio::process::Command::from(std::mem::replace(&mut cmd, Command::new("true")))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "orchestrate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Lines of source, `bytes` long in all.
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

async fn bytes() {
    let content = source_text(FILE_BYTES);
    let changed = content.replacen("step 500\n", "step five hundred\n", 1);
    let cases: [(&str, Option<&str>, Value); 3] = [
        (
            "Write, a new file",
            None,
            json!({"file_path": "big.rs", "content": content}),
        ),
        (
            "Write over it, one line changed",
            Some(&content),
            json!({"file_path": "big.rs", "content": changed}),
        ),
        (
            "Edit one line of it",
            Some(&content),
            json!({"file_path": "big.rs", "old_string": "step 500\n", "new_string": "step five hundred\n"}),
        ),
    ];
    println!(
        "{:<34} {:>10} {:>14} {:>7}",
        "case", "file", "journal bytes", "ratio"
    );
    for (label, before, call) in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut script = Vec::new();
        if let Some(before) = before {
            std::fs::write(dir.path().join("big.rs"), before).unwrap();
            script.push(Reply::tool_calls(&[(
                "r1",
                "Read",
                json!({"file_path": "big.rs", "limit": 1}),
            )]));
        }
        let tool = if call.get("content").is_some() {
            "Write"
        } else {
            "Edit"
        };
        script.push(Reply::tool_calls(&[("w1", tool, call)]));
        script.push(Reply::text("written"));
        let mock = MockLlm::start(script).await;
        run_task(
            &mock,
            dir.path(),
            &["--permission-mode", "acceptEdits", "change it"],
        )
        .await;
        let journaled = jsonl_bytes(&state(dir.path()).sessions());
        println!(
            "{label:<34} {FILE_BYTES:>10} {journaled:>14} {:>7.2}",
            journaled as f64 / FILE_BYTES as f64
        );
    }
}

fn jsonl_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

/// The mock's answer to the listing's run: the lead's turn makes the Task
/// calls, each worker Reads once and answers.
fn fan_out(request: &Recorded) -> Reply {
    let messages = request.body["messages"].as_array().unwrap();
    let system = messages[0]["content"].as_str().unwrap_or("");
    let last = &messages[messages.len() - 1];
    if system.contains("You are a bench worker") {
        return match last["role"].as_str() {
            Some("tool") => Reply::text("The piece is done: README.md has its title."),
            _ => Reply::tool_calls(&[("r1", "Read", json!({"file_path": "README.md"}))]),
        };
    }
    if last["role"] == "tool" {
        return Reply::text("Every piece is done.");
    }
    let calls: Vec<(String, Value)> = (0..WORKERS)
        .map(|i| {
            let input = json!({
                "description": format!("piece {i}"),
                "prompt": format!("Do piece {i} of the work: read README.md and say what it holds."),
                "subagent_type": "worker",
            });
            (format!("t{i}"), input)
        })
        .collect();
    let calls: Vec<(&str, &str, Value)> = (calls.iter())
        .map(|(id, input)| (id.as_str(), "Task", input.clone()))
        .collect();
    Reply::tool_calls(&calls)
}

/// Copies run `run`'s journals `copies` times, each under fresh ids.
fn copy_runs(sessions: &Path, copies: usize) {
    let journals: Vec<(SessionId, String)> = std::fs::read_dir(sessions)
        .unwrap()
        .flatten()
        .map(|e| {
            let path = e.path();
            let id = path.file_stem().unwrap().to_str().unwrap().parse().unwrap();
            (id, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    for _ in 0..copies {
        let fresh: Vec<(String, String)> = (journals.iter())
            .map(|(id, _)| (id.to_string(), SessionId::new().to_string()))
            .collect();
        for (id, text) in &journals {
            let mut text = text.clone();
            for (old, new) in &fresh {
                text = text.replace(old.as_str(), new);
            }
            let name = &fresh
                .iter()
                .find(|(old, _)| *old == id.to_string())
                .unwrap()
                .1;
            std::fs::write(sessions.join(format!("{name}.jsonl")), text).unwrap();
        }
    }
}

async fn listing() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path();
    std::fs::write(workspace.join("README.md"), "# A project\n").unwrap();
    std::fs::create_dir_all(workspace.join("agents")).unwrap();
    std::fs::write(
        workspace.join("agents/worker.md"),
        "---\nname: worker\ndescription: does one piece\ntools: Read\n---\nYou are a bench worker.\n",
    )
    .unwrap();
    let mock = MockLlm::start_with(|request, _| fan_out(request)).await;
    run_task(
        &mock,
        workspace,
        &["--max-parallel", "100", "do every piece"],
    )
    .await;
    let state = state(workspace);
    let sessions = state.sessions();
    copy_runs(&sessions, RUNS - 1);
    let journals = std::fs::read_dir(&sessions).unwrap().count();
    let index = state.dir().join("index");
    let listed = |cmd: &mut Command| {
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let table = listed(&mut orchestrate(workspace, &["sessions"]));
    let rows = String::from_utf8_lossy(&table).lines().count() - 1;
    assert_eq!(rows, RUNS, "the listing shows every run");
    println!(
        "`orchestrate sessions`, {RUNS} runs of {WORKERS} sub-agents ({journals} journals, {:.1} MB):",
        jsonl_bytes(&sessions) as f64 / 1e6
    );
    if std::env::var_os("JOURNAL_KEEP").is_some() {
        // Kept for profiling `orchestrate sessions` by hand.
        println!("  workspace kept: {}", workspace.display());
        let _ = dir.keep();
        return;
    }
    let lead = first_lead(&sessions);
    let cases: [Case<'_>; 5] = [
        (
            "`orchestrate --version`",
            Box::new(|| orchestrate(workspace, &["--version"])),
            Box::new(|| {}),
        ),
        (
            "`ls -l` of the journals",
            Box::new(|| {
                let mut ls = Command::new("ls");
                ls.arg("-l").arg(&sessions);
                ls
            }),
            Box::new(|| {}),
        ),
        (
            "no index: every journal read",
            Box::new(|| orchestrate(workspace, &["sessions"])),
            Box::new(|| {
                let _ = std::fs::remove_dir_all(&index);
            }),
        ),
        (
            "the index up to date",
            Box::new(|| orchestrate(workspace, &["sessions"])),
            Box::new(|| {}),
        ),
        (
            "one lead journal grown",
            Box::new(|| orchestrate(workspace, &["sessions"])),
            Box::new(|| grow(&lead)),
        ),
    ];
    for (label, command, before) in &cases {
        let mut times = Vec::new();
        for _ in 0..CALLS {
            before();
            let started = Instant::now();
            listed(&mut command());
            times.push(started.elapsed());
        }
        times.sort();
        println!(
            "  {label:<32} min {:>7.1} ms  median {:>7.1} ms  max {:>7.1} ms",
            ms(times[0]),
            ms(times[times.len() / 2]),
            ms(times[times.len() - 1])
        );
    }
}

/// A timed case: its label, the command, and what is done before each call.
type Case<'a> = (&'a str, Box<dyn Fn() -> Command + 'a>, Box<dyn Fn() + 'a>);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A lead's journal.
fn first_lead(sessions: &Path) -> PathBuf {
    std::fs::read_dir(sessions)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .next()
                .is_some_and(|header| !header.contains("\"parent\""))
        })
        .unwrap()
}

/// Appends a prompt-joined record to a journal, as a live run would.
fn grow(journal: &Path) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(journal)
        .unwrap();
    writeln!(file, "{{\"record\":\"prompt_joined\",\"prompt\":9}}").unwrap();
}
