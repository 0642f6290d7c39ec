//! Checks that gate a sub-agent's work, through the real binary against real
//! git: a check that fails, is shown to the sub-agent, passes once it fixed
//! its work, and only then is the work merged; a check that never passes
//! leaves the work on its branch and the sub-agent `failed` (class `check`); a
//! check a deny rule refuses never runs.

use serde_json::{Value, json};

use crate::cli::{run_on, text};
use crate::isolation::{LIB, branches, coder_requests, repository};
use crate::support::harness;
use crate::support::mock_llm::{MockLlm, Recorded, Reply};

const BYPASS: [&str; 2] = ["--permission-mode", "bypassPermissions"];

/// The first words of the built-in coder's prompt.
const CODER: &str = "You are a careful software engineer";

/// The messages of `request` after its last user message, and that message.
fn since_last_prompt(request: &Recorded) -> (String, usize) {
    let messages = request.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let last = messages
        .iter()
        .rposition(|m| m["role"] == "user")
        .unwrap_or(0);
    let prompt = messages[last]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let results = messages[last..]
        .iter()
        .filter(|m| m["role"] == "tool")
        .count();
    (prompt, results)
}

/// A coder that reads `lib.rs` and changes `old` to `new` in it, then answers.
fn edit(results: usize, old: &str, new: &str) -> Reply {
    match results {
        0 => Reply::tool_calls(&[("r", "Read", json!({"file_path": "lib.rs"}))]),
        1 => Reply::tool_calls(&[(
            "e",
            "Edit",
            json!({"file_path": "lib.rs", "old_string": old, "new_string": new}),
        )]),
        _ => Reply::text(format!("changed to {new}")),
    }
}

/// The lead: one Task call to the coder with `check`, then its answer.
fn lead(request: &Recorded, check: &str, attempts: u32) -> Reply {
    match request.results() {
        0 => Reply::tool_calls(&[(
            "t",
            "Task",
            json!({"description": "b", "prompt": "change b", "subagent_type": "coder",
                   "check": check, "check_attempts": attempts}),
        )]),
        _ => Reply::text("done"),
    }
}

/// A mock whose lead gives one coder a piece with `check`, and whose coder
/// breaks `lib.rs`, then, told its check failed, fixes it.
async fn fixing_coder(check: String) -> MockLlm {
    MockLlm::start_with(move |request: &Recorded, _| {
        if !request.system().starts_with(CODER) {
            return lead(request, &check, 3);
        }
        let (prompt, results) = since_last_prompt(request);
        match prompt.starts_with("Check `") {
            false => edit(results, "    2", "    broken"),
            true => edit(results, "    broken", "    fixed"),
        }
    })
    .await
}

/// The binary in a new repository asked to change b (`--json`), exit 0: the
/// repository, its path and what the binary wrote.
async fn change_b(mock: &MockLlm) -> (tempfile::TempDir, std::path::PathBuf, std::process::Output) {
    let dir = repository();
    let root = dir.path().canonicalize().unwrap();
    let mut args = BYPASS.to_vec();
    args.extend(["--json", "change b"]);
    let out = run_on(mock, &root, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    (dir, root, out)
}

/// The lead's Task result.
fn task_result(mock: &MockLlm) -> String {
    let last = mock
        .requests()
        .into_iter()
        .rfind(|r| !r.system().starts_with(CODER))
        .unwrap();
    harness::tool_results(&last)[0].1.clone()
}

fn events(stdout: &[u8], kind: &str) -> Vec<Value> {
    text(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_check_is_shown_to_the_sub_agent_and_its_fix_merged_once_it_passes() {
    let check = "grep -q fixed lib.rs";
    let mock = fixing_coder(check.to_owned()).await;
    let (_dir, root, out) = change_b(&mock).await;
    assert_eq!(
        std::fs::read_to_string(root.join("lib.rs")).unwrap(),
        LIB.replace("    2\n", "    fixed\n")
    );
    let result = task_result(&mock);
    assert!(
        result.starts_with(
            "completed\nchanges: merged (1 file, +1 \u{2212}1)\ncheck: passed (attempt 2 of 3)\n"
        ),
        "{result}"
    );
    // Both of its runs are counted.
    assert!(result.contains("[coder: 6 turns, 4 tool calls"), "{result}");
    // The coder was told exactly what failed.
    let told = mock
        .requests()
        .into_iter()
        .filter(|r| r.system().starts_with(CODER))
        .map(|r| since_last_prompt(&r).0)
        .find(|p| p.starts_with("Check `"))
        .unwrap();
    assert!(
        told.starts_with("Check `grep -q fixed lib.rs` failed (exit 1, attempt 1 of 3):"),
        "{told}"
    );
    let checked = events(&out.stdout, "checked");
    let seen: Vec<(u64, Value, bool)> = checked
        .iter()
        .map(|e| {
            (
                e["attempt"].as_u64().unwrap(),
                e["exit_code"].clone(),
                e["passed"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, [(1, json!(1), false), (2, json!(0), true)]);
    assert_eq!(checked[0]["agent"], "coder");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_that_never_passes_fails_the_sub_agent_and_leaves_its_work_on_its_branch() {
    let mock = MockLlm::start_with(|request: &Recorded, _| {
        if !request.system().starts_with(CODER) {
            return lead(request, "exit 3", 2);
        }
        let (prompt, results) = since_last_prompt(request);
        match prompt.starts_with("Check `") {
            false => edit(results, "    2", "    22"),
            true => Reply::text("I cannot make it pass"),
        }
    })
    .await;
    let (_dir, root, out) = change_b(&mock).await;
    assert_eq!(std::fs::read_to_string(root.join("lib.rs")).unwrap(), LIB);
    let result = task_result(&mock);
    let kept = branches(&root);
    assert_eq!(kept.len(), 1);
    let expected = format!(
        "failed (check)\nchanges: not merged (branch {})\ncheck: failed (2 attempts)\nthe coder sub-agent failed (check): check `exit 3` failed (2 attempts)",
        kept[0]
    );
    assert!(result.starts_with(&expected), "{result}");
    let passed: Vec<bool> = events(&out.stdout, "checked")
        .iter()
        .map(|e| e["passed"].as_bool().unwrap())
        .collect();
    assert_eq!(passed, [false, false]);
    // Its own last run ended failed, class check: in its events and on record.
    let ended: Vec<Value> = events(&out.stdout, "terminal")
        .into_iter()
        .filter(|e| e["agent"] == "coder")
        .collect();
    let last = ended.last().unwrap();
    assert_eq!(
        (last["outcome"].as_str(), last["class"].as_str()),
        (Some("failed"), Some("check")),
        "{last}"
    );
    let run = orchestrate::runs::list(&harness::state(&root))[0].clone();
    let coder = run.agents.iter().find(|a| a.role == "coder").unwrap();
    assert!(
        matches!(&coder.outcome, Some(orchestrate::protocol::Outcome::Failed { class, .. }) if class == "check"),
        "{:?}",
        coder.outcome
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_a_deny_rule_refuses_never_runs() {
    let dir = repository();
    let root = dir.path().canonicalize().unwrap();
    let marker = root.join("ran");
    let check = format!("touch {}", marker.display());
    let mock = MockLlm::start_with(move |request: &Recorded, _| {
        if !request.system().starts_with(CODER) {
            return lead(request, &check, 3);
        }
        edit(since_last_prompt(request).1, "    2", "    22")
    })
    .await;
    let mut args = BYPASS.to_vec();
    args.extend(["--disallowedTools", "Bash(touch:*)", "change b"]);
    let out = run_on(&mock, &root, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!marker.exists(), "the refused check ran");
    let result = task_result(&mock);
    assert!(result.contains("check: failed (1 attempt)"), "{result}");
    assert!(result.contains("was refused"), "{result}");
    assert_eq!(std::fs::read_to_string(root.join("lib.rs")).unwrap(), LIB);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_during_a_check_resumes_without_running_a_finished_check_again() {
    use crate::cli::command_on;
    use crate::support::harness::wait_until;
    let tmp = crate::cli::binary_tmp();
    let marks = tempfile::tempdir_in(&tmp).unwrap();
    let (started, go) = (marks.path().join("second"), marks.path().join("go"));
    // The first run fails at once; the second waits for the test's go.
    let check = format!(
        "if grep -q fixed lib.rs; then touch {started}; while [ ! -e {go} ]; do sleep 0.05; done; else exit 1; fi",
        started = started.display(),
        go = go.display()
    );
    let mock = fixing_coder(check).await;
    let dir = repository();
    let root = dir.path().canonicalize().unwrap();
    let mut args = BYPASS.to_vec();
    args.push("change b");
    let mut child = command_on(&mock, &root, &args, &[])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the second check runs", || started.exists()).await;
    crate::isolation::kill_now(&mut child).await;
    std::fs::write(&go, "").unwrap();
    let before = coder_requests(&mock);
    let mut args = BYPASS.to_vec();
    args.push("resume");
    let out = run_on(&mock, &root, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        coder_requests(&mock),
        before,
        "the coder is not asked again"
    );
    let result = task_result(&mock);
    assert!(
        result.starts_with(
            "completed\nchanges: merged (1 file, +1 \u{2212}1)\ncheck: passed (attempt 2 of 3)\n"
        ),
        "{result}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("lib.rs")).unwrap(),
        LIB.replace("    2\n", "    fixed\n")
    );
}
