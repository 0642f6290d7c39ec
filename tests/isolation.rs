//! Parallel writers in private checkouts, through the real binary against real
//! git: edits to different parts of one file all merged, the same line changed
//! twice merged once and reported once as a conflict with its branch kept, the
//! person's uncommitted and untracked work carried in and kept, a checkout's
//! Bash kept out of the person's tree and `.git`, a clone's planted monitor
//! and hook never run by orchestrate's own git, a workspace in a subfolder, a
//! merge cut off by kill -9 done once on resume, and no git: shared, with a
//! warning.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::cli::{command_on, run_on, text};
use crate::support::harness::{self, DEADLINE, state, wait_until};
use crate::support::mock_llm::{MockLlm, Recorded, Reply};

const BYPASS: [&str; 2] = ["--permission-mode", "bypassPermissions"];

/// The first words of the built-in coder's prompt.
const CODER: &str = "You are a careful software engineer";

/// Runs `git args` in `dir` as the person would; its output.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "p")
        .env("GIT_AUTHOR_EMAIL", "p@x")
        .env("GIT_COMMITTER_NAME", "p")
        .env("GIT_COMMITTER_EMAIL", "p@x")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Three functions, far enough apart that each can change on its own.
pub(crate) const LIB: &str = "fn a() {\n    1\n}\n\nfn b() {\n    2\n}\n\nfn c() {\n    3\n}\n";

/// A repository with `lib.rs` committed (`.local/`, where the binary keeps its
/// state in the tests, ignored as a person's home repository would).
pub(crate) fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    git(root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join("lib.rs"), LIB).unwrap();
    std::fs::write(root.join(".gitignore"), ".local/\n").unwrap();
    git(root, &["add", "."]);
    git(root, &["commit", "-q", "-m", "first"]);
    dir
}

/// The prompt a sub-agent was given: its first user message.
fn task_of(request: &Recorded) -> String {
    request.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// The lead's Task calls, one per prompt, all to the coder.
fn tasks(prompts: &[&str]) -> Reply {
    let calls: Vec<(String, Value)> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                format!("t{i}"),
                json!({"description": format!("piece {i}"), "prompt": p, "subagent_type": "coder"}),
            )
        })
        .collect();
    let calls: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, a)| (id.as_str(), "Task", a.clone()))
        .collect();
    Reply::tool_calls(&calls)
}

/// The results of the lead's calls, by call id, once it has them all.
fn results(mock: &MockLlm) -> Vec<(String, String)> {
    let requests = mock.requests();
    let last = requests
        .iter()
        .rev()
        .find(|r| !r.system().starts_with(CODER))
        .unwrap();
    harness::tool_results(last)
}

/// A coder that reads `lib.rs`, replaces `old` with `new` in it, and says done.
fn edit(request: &Recorded, old: &str, new: &str) -> Reply {
    match request.results() {
        0 => Reply::tool_calls(&[("r", "Read", json!({"file_path": "lib.rs"}))]),
        1 => Reply::tool_calls(&[(
            "e",
            "Edit",
            json!({"file_path": "lib.rs", "old_string": old, "new_string": new}),
        )]),
        _ => Reply::text("edited"),
    }
}

/// A mock whose lead gives coders the prompts `pieces`, and whose coders
/// each change `old` to `new` in `lib.rs`.
pub(crate) async fn editing_coders(
    pieces: &'static [&'static str],
    old: &'static str,
    new: &'static str,
) -> MockLlm {
    MockLlm::start_with(move |request: &Recorded, _| {
        if request.system().starts_with(CODER) {
            return edit(request, old, new);
        }
        match request.results() {
            0 => tasks(pieces),
            _ => Reply::text("done"),
        }
    })
    .await
}

/// How many requests the built-in coder made.
pub(crate) fn coder_requests(mock: &MockLlm) -> usize {
    mock.requests()
        .iter()
        .filter(|r| r.system().starts_with(CODER))
        .count()
}

/// Kills the running binary `child` at once (SIGKILL) and waits for it.
pub(crate) async fn kill_now(child: &mut tokio::process::Child) {
    child.start_kill().unwrap();
    child.wait().await.unwrap();
}

/// A mock whose lead gives one coder a piece, and whose coder runs `command`
/// in Bash, then says it is done.
async fn bash_coder(command: String) -> MockLlm {
    MockLlm::start_with(move |request: &Recorded, _| {
        if request.system().starts_with(CODER) {
            return match request.results() {
                0 => Reply::tool_calls(&[("b", "Bash", json!({ "command": command }))]),
                _ => Reply::text("ran it"),
            };
        }
        match request.results() {
            0 => tasks(&["run it"]),
            _ => Reply::text("done"),
        }
    })
    .await
}

/// The tool results of the last request of a sub-agent whose system prompt
/// starts with `system`.
fn results_of(mock: &MockLlm, system: &str) -> Vec<(String, String)> {
    let last = mock
        .requests()
        .into_iter()
        .rfind(|r| r.system().starts_with(system))
        .unwrap();
    harness::tool_results(&last)
}

/// The branches orchestrate left in the repository at `root`.
pub(crate) fn branches(root: &Path) -> Vec<String> {
    git(
        root,
        &[
            "branch",
            "--list",
            "orchestrate/*",
            "--format=%(refname:short)",
        ],
    )
    .lines()
    .map(str::to_owned)
    .collect()
}

/// The private checkouts still in the workspace's state.
fn checkouts(root: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(state(root).checkouts()) {
        Ok(entries) => entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().is_some_and(|n| n != ".scratch"))
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_coders_editing_three_functions_of_one_file_are_all_merged() {
    let mock = MockLlm::start_with(|request: &Recorded, _| {
        if request.system().starts_with(CODER) {
            let n = task_of(request);
            let (old, new) = match n.as_str() {
                "a" => ("    1", "    10"),
                "b" => ("    2", "    20"),
                _ => ("    3", "    30"),
            };
            return edit(request, old, new);
        }
        match request.results() {
            0 => tasks(&["a", "b", "c"]),
            _ => Reply::text("all three done"),
        }
    })
    .await;
    let dir = repository();
    let root = dir.path();
    let mut args = BYPASS.to_vec();
    args.push("change a, b and c");
    let out = run_on(&mock, root, &args, &[]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(root.join("lib.rs")).unwrap(),
        LIB.replace("    1\n", "    10\n")
            .replace("    2\n", "    20\n")
            .replace("    3\n", "    30\n"),
        "{stderr}\n{:?}",
        results(&mock)
    );
    for (call, result) in results(&mock) {
        assert!(
            result.starts_with("completed\nchanges: merged (1 file, +1 \u{2212}1)\n"),
            "{call}: {result}"
        );
    }
    // Uncommitted, in the person's tree; their index and history untouched.
    assert_eq!(git(root, &["diff", "--cached", "--name-only"]), "");
    assert_eq!(git(root, &["log", "--oneline"]).lines().count(), 1);
    assert_eq!(git(root, &["status", "--porcelain"]), " M lib.rs\n");
    assert_eq!(
        branches(root).len(),
        3,
        "each agent's work is on its branch"
    );
    // Checkpoints: before the first change, before each merge, at the end.
    let checkpoints = git(
        root,
        &[
            "for-each-ref",
            "--format=%(subject)",
            "refs/orchestrate/checkpoints/",
        ],
    );
    let merges = checkpoints.matches("before merging orchestrate/").count();
    assert_eq!(
        (checkpoints.lines().count(), merges),
        (5, 3),
        "{checkpoints}"
    );
    assert!(checkouts(root).is_empty(), "{:?}", checkouts(root));
    assert_eq!(stderr.matches(" merged: lib.rs").count(), 3, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_coders_changing_one_line_merge_once_and_report_the_conflict() {
    let mock = MockLlm::start_with(|request: &Recorded, _| {
        if request.system().starts_with(CODER) {
            let new = format!("    {}", task_of(request));
            return edit(request, "    2", &new);
        }
        match request.results() {
            0 => tasks(&["two", "deux"]),
            _ => Reply::text("done"),
        }
    })
    .await;
    let dir = repository();
    let root = dir.path();
    let mut args = BYPASS.to_vec();
    args.extend(["--json", "change b twice"]);
    let out = run_on(&mock, root, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let results = results(&mock);
    let merged: Vec<_> = results
        .iter()
        .filter(|(_, r)| r.starts_with("completed\nchanges: merged (1 file, +1 \u{2212}1)\n"))
        .collect();
    let conflicts: Vec<_> = results
        .iter()
        .filter(|(_, r)| {
            r.starts_with("completed\nchanges: conflict in lib.rs (branch orchestrate/")
        })
        .collect();
    assert_eq!((merged.len(), conflicts.len()), (1, 1), "{results:?}");
    let first_line = conflicts[0].1.lines().nth(1).unwrap();
    let branch = first_line
        .trim_start_matches("changes: conflict in lib.rs (branch ")
        .trim_end_matches(')');
    // The tree has the merged one's line; the other's is on its branch.
    let now = std::fs::read_to_string(root.join("lib.rs")).unwrap();
    let kept = git(root, &["show", &format!("{branch}:lib.rs")]);
    let lines = |text: &str| text.lines().nth(5).unwrap().to_owned();
    let mut both = [lines(&now), lines(&kept)];
    both.sort();
    assert_eq!(both, ["    deux".to_owned(), "    two".to_owned()]);
    assert!(!now.contains("<<<<<<<"), "no conflict markers: {now}");
    // The events say it too.
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let of = |kind: &str| events.iter().filter(|e| e["type"] == kind).count();
    assert_eq!((of("isolated"), of("merged"), of("conflicted")), (2, 1, 1));
    let conflicted = events.iter().find(|e| e["type"] == "conflicted").unwrap();
    assert_eq!(conflicted["files"], json!(["lib.rs"]));
    assert_eq!(conflicted["branch"], branch);
    assert_eq!(conflicted["agent"], "coder");
    // `sessions show` lists the branch left for the person.
    let run = branch.split('/').nth(1).unwrap();
    let show = run_on(&mock, root, &["sessions", "show", run], &[]).await;
    let shown = text(&show.stdout);
    assert!(
        shown.contains(&format!("branch {branch}: coder (conflict in lib.rs)")),
        "{shown}"
    );
    assert!(shown.contains("disk: "), "{shown}");
    // Pruned once old enough: every branch of the run goes.
    let prune = run_on(
        &mock,
        root,
        &["sessions", "prune", "--older-than", "1h"],
        &[],
    )
    .await;
    assert_eq!(text(&prune.stdout), "nothing to prune\n");
    let prune = run_on(
        &mock,
        root,
        &["sessions", "prune", "--older-than", "0"],
        &[],
    )
    .await;
    assert_eq!(prune.status.code(), Some(0), "{}", text(&prune.stderr));
    assert_eq!(
        text(&prune.stdout)
            .matches("deleted branch orchestrate/")
            .count(),
        2
    );
    assert!(branches(root).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_persons_uncommitted_and_untracked_work_is_carried_in_and_kept() {
    let mock = MockLlm::start_with(|request: &Recorded, _| {
        if request.system().starts_with(CODER) {
            return match request.results() {
                0 => Reply::tool_calls(&[("r", "Read", json!({"file_path": "notes.txt"}))]),
                1 => Reply::tool_calls(&[("r2", "Read", json!({"file_path": "lib.rs"}))]),
                2 => Reply::tool_calls(&[(
                    "e",
                    "Edit",
                    json!({"file_path": "lib.rs", "old_string": "    3", "new_string": "    30"}),
                )]),
                _ => Reply::text("done"),
            };
        }
        match request.results() {
            0 => tasks(&["c"]),
            _ => Reply::text("done"),
        }
    })
    .await;
    let dir = repository();
    let root = dir.path();
    std::fs::write(root.join("notes.txt"), "the person's notes\n").unwrap();
    std::fs::write(root.join("lib.rs"), LIB.replace("    1\n", "    mine\n")).unwrap();
    std::fs::write(root.join("staged.rs"), "staged\n").unwrap();
    git(root, &["add", "staged.rs"]);
    let mut args = BYPASS.to_vec();
    args.push("change c");
    let out = run_on(&mock, root, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The coder saw the untracked notes in its checkout.
    let seen = results_of(&mock, CODER);
    assert!(seen[0].1.contains("the person's notes"), "{seen:?}");
    assert_eq!(
        std::fs::read_to_string(root.join("lib.rs")).unwrap(),
        LIB.replace("    1\n", "    mine\n")
            .replace("    3\n", "    30\n")
    );
    assert_eq!(
        std::fs::read_to_string(root.join("notes.txt")).unwrap(),
        "the person's notes\n"
    );
    assert_eq!(
        git(root, &["diff", "--cached", "--name-only"]),
        "staged.rs\n"
    );
    assert_eq!(git(root, &["stash", "list"]), "");
    assert_eq!(git(root, &["rev-parse", "--abbrev-ref", "HEAD"]), "main\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_in_a_checkout_cannot_write_the_persons_tree_or_git_directory() {
    let dir = repository();
    let root = dir.path().canonicalize().unwrap();
    let config_before = std::fs::read(root.join(".git/config")).unwrap();
    let state_dir = state(&root);
    let attempt = format!(
        "pwd; echo x > {root}/pwned; echo '[core]' >> {root}/.git/config; touch {root}/.git/hooks/pre-commit; \
         ls {checkouts} || echo unlisted; ls {sessions} || echo hidden; \
         echo y > mine.txt && git add mine.txt && git -c user.name=a -c user.email=a@x commit -qm mine && echo committed",
        root = root.display(),
        checkouts = state_dir.checkouts().display(),
        sessions = state_dir.sessions().display(),
    );
    let mock = bash_coder(attempt).await;
    let mut args = BYPASS.to_vec();
    args.push("try to escape");
    let out = run_on(&mock, &root, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = &results_of(&mock, CODER)[0].1;
    let checkouts = state(&root).checkouts();
    assert!(said.starts_with(&checkouts.display().to_string()), "{said}");
    assert!(
        said.contains("committed"),
        "it may commit in its clone: {said}"
    );
    assert!(!root.join("pwned").exists());
    assert!(!root.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read(root.join(".git/config")).unwrap(),
        config_before
    );
    // What it committed in its clone is merged like the rest of its work.
    assert_eq!(
        std::fs::read_to_string(root.join("mine.txt")).unwrap(),
        "y\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_or_hook_planted_in_a_clone_never_runs() {
    let dir = repository();
    let root = dir.path().canonicalize().unwrap();
    let marker = tempfile::tempdir().unwrap();
    let ran = marker.path().join("ran");
    let plant = format!(
        "git config core.fsmonitor 'touch {ran}-fsmonitor'; \
         for h in pre-commit post-commit post-checkout reference-transaction; do \
         printf '#!/bin/sh\\ntouch {ran}-%s\\n' $h > .git/hooks/$h; chmod +x .git/hooks/$h; done; \
         echo z >> lib.rs",
        ran = ran.display()
    );
    let mock = bash_coder(plant).await;
    // Unsandboxed, so that the planting succeeds.
    let mut args = BYPASS.to_vec();
    args.extend(["--sandbox", "off", "plant"]);
    let out = run_on(&mock, &root, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        std::fs::read_to_string(root.join("lib.rs"))
            .unwrap()
            .ends_with("z\n"),
        "the work was merged"
    );
    let left: Vec<_> = std::fs::read_dir(marker.path())
        .unwrap()
        .flatten()
        .collect();
    assert!(left.is_empty(), "a planted program ran: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_in_a_subfolder_works_in_the_same_subfolder_of_its_checkout() {
    let dir = repository();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/lib.rs"), LIB).unwrap();
    git(&root, &["add", "."]);
    git(&root, &["commit", "-q", "-m", "sub"]);
    let mock = editing_coders(&["b"], "    2", "    22").await;
    let workspace = root.join("sub");
    let mut args = BYPASS.to_vec();
    args.extend(["--json", "change b"]);
    let out = run_on(&mock, &workspace, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(workspace.join("lib.rs")).unwrap(),
        LIB.replace("    2\n", "    22\n")
    );
    assert_eq!(std::fs::read_to_string(root.join("lib.rs")).unwrap(), LIB);
    let isolated: Value = text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "isolated")
        .unwrap();
    assert!(
        isolated["path"].as_str().unwrap().ends_with("/sub"),
        "{isolated}"
    );
    assert_eq!(isolated["base"].as_str().unwrap().len(), 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_without_git_is_shared_with_a_warning_when_isolation_was_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("lib.rs"), LIB).unwrap();
    let mock = editing_coders(&["b", "b"], "    2\n", "    22\n").await;
    // Asked for: the reason is said, once.
    let mut args = BYPASS.to_vec();
    args.extend(["--isolation", "worktree", "change b"]);
    let out = run_on(&mock, root, &args, &[]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let warning = "orchestrate: warning: sub-agents share the workspace: no private checkout: ";
    assert_eq!(stderr.matches(warning).count(), 1, "{stderr}");
    assert!(stderr.contains("is not in a git repository"), "{stderr}");
    // Shared: the first coder's edit is in the tree, the second found no "    2".
    assert_eq!(
        std::fs::read_to_string(root.join("lib.rs")).unwrap(),
        LIB.replace("    2\n", "    22\n")
    );
    for (_, result) in results(&mock) {
        assert!(!result.contains("changes:"), "{result}");
    }
    // Only where possible (`auto`, the default): nothing to say.
    let mut args = BYPASS.to_vec();
    args.push("change b again");
    let out = run_on(&mock, root, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("share the workspace"),
        "{}",
        text(&out.stderr)
    );
}

/// A `git` that stops at `merge-tree` (saying so in `marker`) until `go`
/// exists, and is the real one otherwise.
fn stalling_git(bin: &Path, marker: &Path, go: &Path) {
    let real = String::from_utf8(
        std::process::Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let script = format!(
        "#!/bin/sh\nfor a in \"$@\"; do if [ \"$a\" = merge-tree ]; then touch {marker}; while [ ! -e {go} ]; do sleep 0.05; done; fi; done\nexec {real} \"$@\"\n",
        marker = marker.display(),
        go = go.display(),
        real = real.trim()
    );
    std::fs::create_dir_all(bin).unwrap();
    std::fs::write(bin.join("git"), script).unwrap();
    std::fs::set_permissions(
        bin.join("git"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_cut_off_by_kill_9_is_done_once_when_the_run_is_resumed() {
    let mock = editing_coders(&["b"], "    2", "    22").await;
    let dir = repository();
    let root = dir.path().canonicalize().unwrap();
    let tools = tempfile::tempdir().unwrap();
    let (bin, marker, go) = (
        tools.path().join("bin"),
        tools.path().join("merging"),
        tools.path().join("go"),
    );
    stalling_git(&bin, &marker, &go);
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut args = BYPASS.to_vec();
    args.push("change b");
    let mut child = command_on(&mock, &root, &args, &[("PATH", &path)])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the merge has begun", || marker.exists()).await;
    kill_now(&mut child).await;
    std::fs::write(&go, "").unwrap();
    assert_eq!(std::fs::read_to_string(root.join("lib.rs")).unwrap(), LIB);
    let before = coder_requests(&mock);
    let mut args = BYPASS.to_vec();
    args.push("resume");
    let out = tokio::time::timeout(DEADLINE, run_on(&mock, &root, &args, &[]))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        coder_requests(&mock),
        before,
        "the coder is not asked again"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("lib.rs")).unwrap(),
        LIB.replace("    2\n", "    22\n")
    );
    let results = results(&mock);
    assert!(
        results[0]
            .1
            .starts_with("completed\nchanges: merged (1 file, +1 \u{2212}1)"),
        "{results:?}"
    );
    assert!(checkouts(&root).is_empty());
    assert_eq!(branches(&root).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_of_an_isolated_one_works_in_its_checkout() {
    let dir = repository();
    let root = dir.path().canonicalize().unwrap();
    let roles = root.join(".claude/agents");
    std::fs::create_dir_all(&roles).unwrap();
    std::fs::write(
        roles.join("nester.md"),
        "---\nname: nester\ndescription: Delegates.\nisolation: worktree\n---\nYou nest.\n",
    )
    .unwrap();
    let mock = MockLlm::start_with(|request: &Recorded, _| {
        if request.system().starts_with(CODER) {
            return edit(request, "    2", "    22");
        }
        if request.system().starts_with("You nest.") {
            return match request.results() {
                0 => Reply::tool_calls(&[(
                    "inner",
                    "Task",
                    json!({"description": "b", "prompt": "b", "subagent_type": "coder"}),
                )]),
                _ => Reply::text("nested done"),
            };
        }
        match request.results() {
            0 => Reply::tool_calls(&[(
                "outer",
                "Task",
                json!({"description": "nest", "prompt": "nest", "subagent_type": "nester"}),
            )]),
            _ => Reply::text("done"),
        }
    })
    .await;
    let mut args = BYPASS.to_vec();
    args.extend(["--json", "nest"]);
    let out = run_on(&mock, &root, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(root.join("lib.rs")).unwrap(),
        LIB.replace("    2\n", "    22\n")
    );
    // The nester's result says the merge; the coder's (inside it) has none.
    let outer = &results(&mock)[0].1;
    assert!(
        outer.starts_with("completed\nchanges: merged (1 file, +1 \u{2212}1)"),
        "{outer}"
    );
    let inner = &results_of(&mock, "You nest.")[0].1;
    assert!(inner.starts_with("completed\nedited"), "{inner}");
    let isolated = text(&out.stdout)
        .lines()
        .filter(|l| l.contains(r#""type":"isolated""#))
        .count();
    assert_eq!(isolated, 1, "one checkout, the nester's");
    assert_eq!(branches(&root).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_coders_work_is_kept_on_its_branch_and_not_merged() {
    use crate::support::mock_llm::{End, Gate};
    let held = Gate::new();
    let mock = MockLlm::start_with({
        let held = held.clone();
        move |request: &Recorded, _| {
            if request.system().starts_with(CODER) {
                // Its third turn never ends: it is mid-run when Ctrl-C comes.
                return match request.results() {
                    2 => Reply::text("almost").with_end(End::HoldAfter(1, held.clone())),
                    _ => edit(request, "    2", "    22"),
                };
            }
            match request.results() {
                0 => tasks(&["b"]),
                _ => Reply::text("done"),
            }
        }
    })
    .await;
    let dir = repository();
    let root = dir.path().canonicalize().unwrap();
    let mut args = BYPASS.to_vec();
    args.push("change b");
    let child = command_on(&mock, &root, &args, &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the coder is in its third turn", || {
        mock.requests()
            .iter()
            .any(|r| r.system().starts_with(CODER) && r.results() == 2)
    })
    .await;
    let out = crate::cli::interrupt(child).await;
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(root.join("lib.rs")).unwrap(), LIB);
    let kept = branches(&root);
    assert_eq!(kept.len(), 1, "{}", text(&out.stderr));
    let on_branch = git(&root, &["show", &format!("{}:lib.rs", kept[0])]);
    assert_eq!(on_branch, LIB.replace("    2\n", "    22\n"));
    assert!(checkouts(&root).is_empty(), "{:?}", checkouts(&root));
    held.open();
}
