//! The README's first Quick start command, run as written (with the test build of
//! the binary instead of `cargo run --release`): a replayed fan-out fixes the sample
//! project's bug in a scratch repository (the coder in a private checkout, its fix
//! merged once its check passes), its tests pass, and the repository's own copy is
//! untouched.

use std::path::Path;

use crate::cli::text;
use crate::support::harness::DEADLINE;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_start_fixes_the_sample_bug_in_a_scratch_copy() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sample = root.join("examples/quickstart/project/src/lib.rs");
    let before = std::fs::read_to_string(&sample).unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new("bash");
    command
        .arg(root.join("examples/quickstart/run.sh"))
        .env("ORCHESTRATE_BIN", env!("CARGO_BIN_EXE_orchestrate"))
        .env("HOME", home.path())
        .env("TMPDIR", home.path())
        .kill_on_drop(true);
    for var in [
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "XDG_STATE_HOME",
        "XDG_RUNTIME_DIR",
    ] {
        command.env_remove(var);
    }
    // Twice the usual deadline: the replay is paced like the recording (about 12 s)
    // and the sample crate is compiled twice.
    let out = tokio::time::timeout(DEADLINE * 2, command.output())
        .await
        .expect("the quick start did not finish in time")
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");

    let scratch = stdout
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("scratch copy of examples/quickstart/project: "))
        .map(Path::new)
        .expect("the script names its scratch copy");
    assert!(scratch.starts_with(home.path()));
    let fixed = std::fs::read_to_string(scratch.join("src/lib.rs")).unwrap();
    assert!(
        fixed.contains("Some((lengths[mid - 1] + lengths[mid]) as f64 / 2.0)"),
        "{fixed}"
    );
    // The agents' own test runs were real: the tester saw the failure, the coder
    // saw it pass (their tool results, in the scratch copy's journals).
    let state = orchestrate::state::StateDir::at(
        &home.path().join(".local/state/orchestrate"),
        &scratch.canonicalize().unwrap(),
    );
    let journals: String = std::fs::read_dir(state.sessions())
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    for seen in [
        "test median_length_even ... FAILED",
        "test median_length_even ... ok",
    ] {
        assert!(journals.contains(seen), "no tool result shows {seen:?}");
    }
    assert!(
        stdout.contains("test result: ok. 6 passed; 0 failed"),
        "{stdout}"
    );
    // The coder worked in a private checkout of the scratch repository; its fix
    // was merged once `cargo test` passed there.
    for said in [
        "coder#1: isolated in ",
        "coder#1: check passed (attempt 1 of 3)",
        "coder#1: merged +",
        "coder#1 merged: src/lib.rs",
    ] {
        assert!(stderr.contains(said), "{said:?} not said:\n{stderr}");
    }
    // The lead fanned out to three sub-agents at once, then a coder; every tool ran.
    for agent in ["explorer#1", "tester#1", "reviewer#1", "coder#1"] {
        assert!(
            stderr.contains(&format!("{agent}: started")),
            "{agent} never started:\n{stderr}"
        );
    }
    assert!(!stderr.contains("failed"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&sample).unwrap(), before);
}
