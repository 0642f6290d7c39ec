//! What a sandboxed Bash call costs: the CPU (user and system, of every process
//! it starts) and the wall time of one `true`, run as the Bash tool runs it
//! (the `orchestrate` launcher: a user and a mount namespace, orchestrate's
//! state hidden, the repository's git config and the agents' files read-only,
//! Landlock), beside the bare spawn of the same shell in a user namespace
//! (`unshare -U bash -c true`) and a plain `bash -c true`.
//!
//! The launcher is measured as installed (`orchestrate-sandbox`, beside the
//! binary) and as the fallback when it is not (`orchestrate` itself).
//!
//! Run with `cargo bench --bench sandbox` (`SANDBOX_CALLS`, default 300, calls
//! each). Prints one line per case: calls, CPU ms per call, wall ms per call.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod support;

use std::process::{Command, Stdio};
use std::time::Instant;

/// Runs `make()` `calls` times to its end (a launcher with a user namespace
/// given its id maps, as the Bash tool gives them); prints CPU and wall per call.
fn case(name: &str, calls: usize, mapped: bool, make: impl Fn() -> Command) {
    let cpu = support::stat_ms(13);
    let start = Instant::now();
    for _ in 0..calls {
        let mut child = make()
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The launcher's stdin is its lifeline: held open until it has ended.
        let lifeline = child.stdin.take();
        if mapped {
            orchestrate::tools::bash::launcher::continue_mapped(child.id()).unwrap();
        }
        let status = child.wait().unwrap();
        drop(lifeline);
        assert!(status.success(), "{name}: {status}");
    }
    let wall = start.elapsed().as_secs_f64() * 1000.0 / calls as f64;
    let cpu = (support::stat_ms(13) - cpu) / calls as f64;
    println!("{name:<22} {calls:>5} calls  {cpu:>6.2} ms CPU/call  {wall:>6.2} ms wall/call");
}

fn main() {
    let calls = support::env_or("SANDBOX_CALLS", 300);
    // A workspace that is a git repository with the files the sandbox protects,
    // and a state root to hide, as a run has them.
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap().join("ws");
    let state = dir.path().canonicalize().unwrap().join("state/orchestrate");
    for folder in [".git/hooks", ".git/info", ".claude", "agents"] {
        std::fs::create_dir_all(ws.join(folder)).unwrap();
    }
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(ws.join("CLAUDE.md"), "x\n").unwrap();
    let tmp = std::env::temp_dir();
    case("bash -c true", calls, false, || {
        let mut bash = Command::new("bash");
        bash.args(["-c", "true"]).current_dir(&ws);
        bash
    });
    case("unshare -U bash", calls, false, || {
        let mut bare = Command::new("unshare");
        bare.args(["-U", "bash", "-c", "true"]).current_dir(&ws);
        bare
    });
    for (name, launcher) in [
        (
            "orchestrate-sandbox",
            env!("CARGO_BIN_EXE_orchestrate-sandbox"),
        ),
        ("orchestrate (itself)", env!("CARGO_BIN_EXE_orchestrate")),
    ] {
        sandboxed(name, launcher, calls, &ws, &state, &tmp);
    }
}

/// The sandboxed `true` through `launcher` (the small binary, or the whole
/// `orchestrate` when the small one is not installed), as the Bash tool starts it.
fn sandboxed(
    name: &str,
    launcher: &str,
    calls: usize,
    ws: &std::path::Path,
    state: &std::path::Path,
    tmp: &std::path::Path,
) {
    case(name, calls, true, || {
        let mut sandboxed = Command::new(launcher);
        sandboxed
            .args(["__orchestrate-bash-launcher", "run", "--userns", "--hide"])
            .arg(state)
            .args(["--landlock", "--write"])
            .arg(ws)
            .arg("--write")
            .arg(tmp)
            .args(["--", "true"])
            .current_dir(ws);
        sandboxed
    });
}
