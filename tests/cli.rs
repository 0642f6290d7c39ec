//! The real `orchestrate` binary against the mock server: answers, exit codes, one-line
//! errors, `--json`, and keys that never leak.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncBufReadExt;

use crate::support::harness::{DEADLINE, TEST_KEY, tool_results};
use crate::support::mock_llm::{End, Gate, MockLlm, Reply, StreamReply, ev_role, ev_text};

pub(crate) fn command(
    workspace: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_orchestrate"));
    cmd.arg("-C").arg(workspace).args(args).kill_on_drop(true);
    for var in [
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ORCHESTRATE_MODEL",
        "RUST_LOG",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
    ] {
        cmd.env_remove(var);
    }
    // Roles are also looked up in $HOME: a workspace of its own keeps the machine's
    // own role files out of the test, and its state (no XDG folder of the
    // machine's) in the workspace.
    cmd.env("HOME", workspace);
    for var in ["XDG_STATE_HOME", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME"] {
        cmd.env_remove(var);
    }
    // A temporary directory of its own, apart from every folder a test makes
    // (workspaces in the system's, "outside" folders under the target
    // directory): what the sandbox lets a command write is the workspace and
    // this, wherever the checkout is.
    cmd.env("TMPDIR", binary_tmp());
    cmd.envs(env.iter().copied());
    cmd.stdin(std::process::Stdio::null());
    cmd
}

/// The binary's temporary directory in the tests.
pub(crate) fn binary_tmp() -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("binary-tmp");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub(crate) async fn orchestrate(workspace: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let child = command(workspace, args, env).output();
    tokio::time::timeout(DEADLINE, child)
        .await
        .expect("orchestrate did not exit in time")
        .unwrap()
}

/// The binary in `workspace` against `mock`: `--base-url` and `--model m`, then
/// `args`.
pub(crate) fn command_on(
    mock: &MockLlm,
    workspace: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> tokio::process::Command {
    let url = mock.base_url();
    let mut all = vec!["--base-url", url.as_str(), "--model", "m"];
    all.extend_from_slice(args);
    command(workspace, &all, env)
}

/// `direct` started by `program args…` instead (a confining wrapper, a shell that
/// sets a limit first): the same arguments and environment after them.
pub(crate) fn wrapped(
    direct: &tokio::process::Command,
    program: &str,
    args: &[&str],
) -> tokio::process::Command {
    let direct = direct.as_std();
    let mut wrapped = tokio::process::Command::new(program);
    wrapped
        .args(args)
        .arg(direct.get_program())
        .args(direct.get_args())
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null());
    for (name, value) in direct.get_envs() {
        match value {
            Some(value) => wrapped.env(name, value),
            None => wrapped.env_remove(name),
        };
    }
    wrapped
}

/// Runs [`command_on`] to its exit.
pub(crate) async fn run_on(
    mock: &MockLlm,
    workspace: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let child = command_on(mock, workspace, args, env).output();
    tokio::time::timeout(DEADLINE, child)
        .await
        .expect("orchestrate did not exit in time")
        .unwrap()
}

/// Ctrl-C for the running binary `child` (a SIGINT); what it left when it
/// exited.
pub(crate) async fn interrupt(child: tokio::process::Child) -> Output {
    let pid = child.id().unwrap().to_string();
    let kill = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(kill.success());
    tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .unwrap()
        .unwrap()
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_prints_the_final_answer_and_exits_zero() {
    let mock = MockLlm::start(vec![Reply::text("Hello from the model.")]).await;
    let dir = tempfile::tempdir().unwrap();
    let url = mock.base_url();
    let out = orchestrate(
        dir.path(),
        &[
            "--quiet",
            "--base-url",
            &url,
            "--model",
            "mock-model",
            "say hello",
        ],
        &[("OPENAI_API_KEY", TEST_KEY)],
    )
    .await;
    assert_eq!(text(&out.stderr), "");
    assert_eq!(text(&out.stdout), "Hello from the model.\n");
    assert_eq!(out.status.code(), Some(0));
    let request = &mock.requests()[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(
        request.authorization.as_deref(),
        Some(format!("Bearer {TEST_KEY}").as_str())
    );
    assert_eq!(request.body["model"], "mock-model");
    assert_eq!(request.body["messages"][1]["content"], "say hello");

    let journals: Vec<_> = std::fs::read_dir(crate::support::harness::state(dir.path()).sessions())
        .unwrap()
        .collect();
    assert_eq!(journals.len(), 1);
    let journal = std::fs::read_to_string(journals[0].as_ref().unwrap().path()).unwrap();
    assert!(journal.contains("Hello from the model."));
    assert!(
        !journal.contains(TEST_KEY),
        "the key leaked into the journal"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_base_url_and_model_come_from_the_environment_too() {
    let mock = MockLlm::start(vec![Reply::text("from env")]).await;
    let dir = tempfile::tempdir().unwrap();
    let url = mock.base_url();
    let out = orchestrate(
        dir.path(),
        &["hi"],
        &[
            ("OPENAI_BASE_URL", &url),
            ("ORCHESTRATE_MODEL", "env-model"),
        ],
    )
    .await;
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("from env\n", Some(0))
    );
    assert_eq!(mock.requests()[0].body["model"], "env-model");
    assert_eq!(mock.requests()[0].authorization, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthorized_exits_one_with_one_line_and_no_key() {
    let mock = MockLlm::start(vec![Reply::status(401, "Incorrect API key provided")]).await;
    let dir = tempfile::tempdir().unwrap();
    let out = run_on(
        &mock,
        dir.path(),
        &["--quiet", "hi"],
        &[("OPENAI_API_KEY", TEST_KEY)],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "orchestrate: HTTP 401: Incorrect API key provided\n"
    );
    assert_eq!(text(&out.stdout), "");
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_configuration_exits_two_and_names_what_to_set() {
    let dir = tempfile::tempdir().unwrap();
    let out = orchestrate(dir.path(), &["hi"], &[]).await;
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    for name in ["OPENAI_API_KEY", "OPENAI_BASE_URL", "--base-url"] {
        assert!(err.contains(name), "{err}");
    }
    let out = orchestrate(
        dir.path(),
        &["--base-url", "http://127.0.0.1:9/v1", "hi"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "orchestrate: no model given: pass --model M or set ORCHESTRATE_MODEL\n"
    );
    let out = orchestrate(
        dir.path(),
        &["--base-url", "ftp://nowhere/v1", "--model", "m", "hi"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("invalid base URL"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_exhausted_and_unreachable_servers_fail_with_one_line() {
    let mock = MockLlm::start(
        (0..3)
            .map(|_| Reply::status(503, "Service Unavailable"))
            .collect(),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let fast = ["--max-attempts", "3", "--retry-base-ms", "10"];
    let mut args = vec!["--quiet"];
    args.extend(fast);
    args.push("hi");
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "orchestrate: gave up after 3 attempts: HTTP 503: Service Unavailable\n"
    );
    assert_eq!(mock.request_count(), 3);

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let url = format!("http://127.0.0.1:{port}/v1");
    let mut args = vec!["--quiet", "--base-url", url.as_str(), "--model", "m"];
    args.extend(fast);
    args.push("hi");
    let out = orchestrate(dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    // In words, not the HTTP stack's (`client error (Connect)`).
    assert_eq!(
        err,
        format!(
            "orchestrate: gave up after 3 attempts: cannot connect to 127.0.0.1:{port}: connection refused\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_prints_one_event_per_line() {
    let mock = MockLlm::start(vec![Reply::text("json answer")]).await;
    let dir = tempfile::tempdir().unwrap();
    let out = run_on(&mock, dir.path(), &["--json", "hi"], &[]).await;
    assert_eq!(out.status.code(), Some(0));
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"session_started"));
    assert!(
        types.contains(&"turn_started")
            && types.contains(&"text_delta")
            && types.contains(&"turn_finished")
    );
    let last = events.last().unwrap();
    assert_eq!(last["type"], "terminal");
    assert_eq!(last["outcome"], "completed");
    assert_eq!(last["text"], "json answer");
    assert_eq!(last["agent"], "orchestrator");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_keeps_crashing_exits_one_instead_of_hanging() {
    let mock = MockLlm::start(vec![Reply::text("unreachable")]).await;
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--quiet",
        "--inject-panic-at-turn",
        "1",
        "--inject-panics",
        "100",
        "hi",
    ];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "orchestrate: session crashed 3 times within 60s; giving up: injected fault: session panicked at turn 1\n"
    );
    assert_eq!(mock.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_gracefully_prints_the_partial_answer_and_exits_130() {
    // Five words a tenth of a second apart, so the child has read the first ones well
    // before the interrupt; then nothing more until the child goes away.
    let mut chunks = vec![ev_role()];
    chunks.extend((0..50).map(|i| ev_text(format!("w{i} "))));
    let slow = Reply::Stream(StreamReply {
        chunks,
        ttft: Duration::ZERO,
        delay: Duration::from_millis(100),
        end: End::HoldAfter(6, Gate::new()),
    });
    let mock = MockLlm::start(vec![slow]).await;
    let dir = tempfile::tempdir().unwrap();
    let child = command_on(&mock, dir.path(), &["--quiet", "count"], &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    crate::support::harness::wait_until("five words were sent", || mock.frames_sent() >= 6).await;
    let out = interrupt(child).await;
    assert_eq!(out.status.code(), Some(130));
    assert_eq!(text(&out.stderr), "orchestrate: cancelled\n");
    let stdout = text(&out.stdout);
    let partial = stdout.trim_end_matches('\n');
    assert!(
        partial.starts_with("w0 w1 ") && "w0 w1 w2 w3 w4 ".starts_with(partial),
        "{stdout:?}"
    );
    assert!(mock.wait_for_disconnects(1, DEADLINE).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_is_offered_and_edits_show_as_diff_events() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[(
            "w1",
            "Write",
            serde_json::json!({"file_path": "notes/todo.txt", "content": "buy milk\n"}),
        )]),
        Reply::text("noted"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let args = ["--json", "--permission-mode", "acceptEdits", "note it"];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes/todo.txt")).unwrap(),
        "buy milk\n"
    );
    let offered: Vec<String> = mock.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        offered,
        [
            "Read",
            "Write",
            "Edit",
            "MultiEdit",
            "TodoWrite",
            "WebFetch",
            "Ls",
            "Glob",
            "Grep",
            "Bash",
            "Task",
            "TaskOutput",
            "TaskStop"
        ]
    );
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let change = events
        .iter()
        .find(|e| e["type"] == "file_changed")
        .expect("no file_changed event");
    assert_eq!(change["path"], "notes/todo.txt");
    assert_eq!(change["call_id"], "w1");
    assert_eq!(
        change["diff"],
        "--- a/notes/todo.txt\n+++ b/notes/todo.txt\n@@ -0,0 +1 @@\n+buy milk\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_bash_command_changed_shows_as_diff_events() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[(
            "b1",
            "Bash",
            serde_json::json!({"command": "printf 'one\\ntwo\\n' > kept.txt && rm gone.txt && mkdir -p out && echo made > out/new.txt"}),
        )]),
        Reply::tool_calls(&[("b2", "Bash", serde_json::json!({"command": "ls"}))]),
        Reply::text("done"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let git = crate::isolation::git;
    git(root, &["init", "-q"]);
    std::fs::write(root.join("kept.txt"), "one\n").unwrap();
    std::fs::write(root.join("gone.txt"), "bye\n").unwrap();
    git(root, &["add", "."]);
    git(root, &["commit", "-q", "-m", "first"]);
    let index = std::fs::read(root.join(".git/index")).unwrap();
    let args = [
        "--json",
        "--permission-mode",
        "bypassPermissions",
        "change things",
    ];
    let out = run_on(&mock, root, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let changed: Vec<(&str, &str, &str, bool)> = events
        .iter()
        .filter(|e| e["type"] == "file_changed")
        .map(|e| {
            let field = |k: &str| e[k].as_str().unwrap();
            (
                field("call_id"),
                field("path"),
                field("diff"),
                e["created"] == true,
            )
        })
        .collect();
    assert_eq!(
        changed,
        [
            (
                "b1",
                "gone.txt",
                "--- a/gone.txt\n+++ b/gone.txt\n@@ -1 +0,0 @@\n-bye\n",
                false
            ),
            (
                "b1",
                "kept.txt",
                "--- a/kept.txt\n+++ b/kept.txt\n@@ -1 +1,2 @@\n one\n+two\n",
                false
            ),
            (
                "b1",
                "out/new.txt",
                "--- a/out/new.txt\n+++ b/out/new.txt\n@@ -0,0 +1 @@\n+made\n",
                true
            ),
        ],
        "the second command changed nothing"
    );
    assert_eq!(
        std::fs::read(root.join(".git/index")).unwrap(),
        index,
        "the person's index is untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_terminal_a_command_is_refused_and_the_run_goes_on() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[(
            "b1",
            "Bash",
            serde_json::json!({"command": "touch made-by-bash"}),
        )]),
        Reply::text("could not run it"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let args = ["--permission-mode", "acceptEdits", "run it"];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "could not run it\n");
    assert!(!dir.path().join("made-by-bash").exists());
    let result = &mock.requests()[1].body["messages"][3];
    assert_eq!(
        result["content"],
        "Error: permission denied: Bash needs approval under permission mode acceptEdits, and there is no terminal to ask; run with --permission-mode bypassPermissions to allow it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_list_show_and_check() {
    let dir = tempfile::tempdir().unwrap();
    let out = orchestrate(
        dir.path(),
        &["agents", "list"],
        &[("HOME", dir.path().to_str().unwrap())],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_owned())
        .collect();
    assert_eq!(
        listed,
        ["coder", "explorer", "orchestrator", "reviewer", "tester"]
    );

    let out = orchestrate(
        dir.path(),
        &["agents", "show", "explorer"],
        &[("HOME", dir.path().to_str().unwrap())],
    )
    .await;
    let card = text(&out.stdout);
    assert!(card.starts_with("name:           explorer\n"), "{card}");
    assert!(
        card.contains("tools:          Read, Grep, Glob, Ls\n")
            && card.contains("permissionMode: plan\n"),
        "{card}"
    );
    assert!(card.contains("You are a code explorer."), "{card}");

    let out = orchestrate(
        dir.path(),
        &["agents", "check"],
        &[("HOME", dir.path().to_str().unwrap())],
    )
    .await;
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("5 roles, no problems\n", Some(0))
    );

    std::fs::create_dir_all(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("agents/coder.md"),
        "---\nname: coder\ndescription: mine\npermissionMode: yolo\n---\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("agents/bad.md"), "no frontmatter\n").unwrap();
    let out = orchestrate(
        dir.path(),
        &["agents", "check"],
        &[("HOME", dir.path().to_str().unwrap())],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let ws = dir.path().canonicalize().unwrap();
    assert_eq!(
        text(&out.stdout),
        format!(
            "{}:1: no YAML frontmatter: a role file starts with a line `---`\n{}:4: unknown permissionMode \"yolo\"\n2 problems in the role files\n",
            ws.join("agents/bad.md").display(),
            ws.join("agents/coder.md").display()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_task_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = orchestrate(dir.path(), &[], &[("OPENAI_API_KEY", TEST_KEY)]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "orchestrate: no task given: run `orchestrate \"what to do\"` (or `orchestrate --help`)\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_runs_one_role_directly_and_an_unknown_one_is_a_usage_error() {
    let mock = MockLlm::start(vec![Reply::text("found it")]).await;
    let (_dir, out) = run_cli(&mock, &["--agent", "explorer", "where is main?"]).await;
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("found it\n", Some(0))
    );
    let request = &mock.requests()[0];
    let tools: Vec<&str> = request.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["Read", "Ls", "Glob", "Grep"]);
    assert!(
        request.body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with("You are a code explorer.")
    );

    let (_dir, out) = run_cli(&mock, &["--agent", "wizard", "hi"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "orchestrate: no role named \"wizard\" (roles: coder, explorer, orchestrator, reviewer, tester); see `orchestrate agents list`\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lead_fans_out_to_sub_agents_through_the_real_binary() {
    let mock = MockLlm::start_with(|request, _| {
        let system = request.body["messages"][0]["content"].as_str().unwrap_or("");
        if system.starts_with("You are a code explorer.") {
            return Reply::text("src/main.rs:1");
        }
        let answered = request.body["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool");
        if answered {
            return Reply::text("main is in src/main.rs");
        }
        let task = |id: &str| (id.to_owned(), serde_json::json!({"description": "find main", "prompt": "Find main.", "subagent_type": "explorer"}));
        let calls = [task("t1"), task("t2")];
        let calls: Vec<(&str, &str, Value)> = calls.iter().map(|(id, a)| (id.as_str(), "Task", a.clone())).collect();
        Reply::tool_calls(&calls)
    })
    .await;
    let (_dir, out) = run_cli(&mock, &["--json", "where is main?"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let lead = events[0]["session"].as_str().unwrap().to_owned();
    let children: std::collections::BTreeSet<String> = events
        .iter()
        .filter(|e| e["agent"] == "explorer" && e["type"] == "session_started")
        .map(|e| {
            assert_eq!(e["parent"], lead.as_str());
            e["session"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(children.len(), 2);
    let last = events.last().unwrap();
    assert_eq!(
        (last["agent"].as_str(), last["text"].as_str()),
        (Some("orchestrator"), Some("main is in src/main.rs"))
    );
    assert_eq!(mock.request_count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_terminal_progress_is_one_plain_line_per_lifecycle_event() {
    let mock = MockLlm::start_with(|request, _| {
        let system = request.body["messages"][0]["content"].as_str().unwrap_or("");
        if system.starts_with("You are a code explorer.") {
            return Reply::text("found");
        }
        if request.body["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool") {
            return Reply::text("all found");
        }
        let args = serde_json::json!({"description": "find main", "prompt": "Find main.", "subagent_type": "explorer"});
        Reply::tool_calls(&[("t1", "Task", args)])
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let out = run_on(&mock, dir.path(), &["find main"], &[]).await;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "all found\n");
    // Times vary; everything else is fixed.
    let lines: Vec<String> = text(&out.stderr)
        .lines()
        .map(|l| {
            if l.starts_with('[') {
                l.get(8..).unwrap_or(l)
            } else {
                l
            }
            .trim_end()
            .to_owned()
        })
        .collect();
    let (events, table) = lines.split_at(lines.iter().position(String::is_empty).unwrap());
    assert_eq!(
        events,
        [
            "orchestrator: started",
            "orchestrator: Task find main",
            "explorer#1: started",
            // The mock's model has no price: its cost is unknown, never $0.00.
            "explorer#1: completed · 1 turn · 0 tools · 15 tok · –",
            "orchestrator: completed · 2 turns · 1 tool · 45 tok · –",
        ]
    );
    let table: Vec<Vec<&str>> = table[1..]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        table[1..]
            .iter()
            .map(|r| r[..5].to_vec())
            .collect::<Vec<_>>(),
        [
            vec!["orchestrator", "completed", "2", "1", "45"],
            vec!["explorer#1", "completed", "1", "0", "15"],
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_during_a_fan_out_cancels_the_sub_agents_and_exits_130() {
    let mock = MockLlm::start_with(|request, _| {
        let system = request.body["messages"][0]["content"].as_str().unwrap_or("");
        if system.starts_with("You are a code explorer.") {
            // The sub-agent's answer stops after four lines until the client goes away.
            let mut chunks = vec![crate::support::mock_llm::ev_role()];
            chunks.extend((0..100).map(|i| ev_text(format!("line{i} "))));
            return Reply::stream(chunks).with_end(End::HoldAfter(5, Gate::new()));
        }
        let args = serde_json::json!({"description": "search", "prompt": "Search everything.", "subagent_type": "explorer"});
        Reply::tool_calls(&[("t1", "Task", args)])
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let child = command_on(&mock, dir.path(), &["--json", "search"], &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    crate::support::harness::wait_until("the sub-agent is streaming", || {
        mock.request_count() == 2 && mock.frames_sent() >= 5
    })
    .await;
    let pid = child.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(130));
    assert_eq!(text(&out.stderr), "orchestrate: cancelled\n");
    assert!(
        mock.wait_for_disconnects(1, DEADLINE).await,
        "the sub-agent's request was not dropped"
    );
    assert_eq!(mock.request_count(), 2, "nothing ran after the cancel");
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let child_end = events
        .iter()
        .find(|e| e["agent"] == "explorer" && e["type"] == "terminal");
    assert_eq!(
        child_end.map(|e| e["outcome"].clone()),
        Some(serde_json::json!("cancelled")),
        "the sub-agent's end was shown"
    );
}

/// [`run_on`] in a fresh workspace (also its HOME).
async fn run_cli(mock: &MockLlm, args: &[&str]) -> (tempfile::TempDir, Output) {
    let dir = tempfile::tempdir().unwrap();
    let out = run_on(mock, dir.path(), args, &[]).await;
    (dir, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_agents_dir_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = orchestrate(
        dir.path(),
        &["--agents-dir", "/nonexistent/roles", "agents", "list"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "orchestrate: --agents-dir /nonexistent/roles: not a directory\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_file_that_breaks_mid_run_is_reported_on_stderr() {
    // The lead's first turn waits (in Bash) for the test to say go, so the role file
    // is broken while the run is live; the second turn answers.
    let wait = serde_json::json!({"command": "until [ -f go ]; do sleep 0.05; done; echo ok"});
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("b1", "Bash", wait)]),
        Reply::text("all done"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let roles = dir.path().join("roles");
    std::fs::create_dir(&roles).unwrap();
    std::fs::write(
        roles.join("lead.md"),
        "---\nname: lead\ndescription: Leads.\n---\nYou lead.\n",
    )
    .unwrap();
    let worker = roles.join("worker.md");
    std::fs::write(
        &worker,
        "---\nname: worker\ndescription: Works.\n---\nYou work.\n",
    )
    .unwrap();
    let roles_arg = roles.to_str().unwrap().to_owned();
    let args = [
        "--agents-dir",
        &roles_arg,
        "--agent",
        "lead",
        "--permission-mode",
        "bypassPermissions",
        "work",
    ];
    let mut child = command_on(&mock, dir.path(), &args, &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    crate::support::harness::wait_until("the lead's first turn", || mock.request_count() == 1)
        .await;
    std::fs::write(&worker, "---\nname: worker\n---\nYou work.\n").unwrap();
    let expected = format!(
        "orchestrate: warning: {}:1: description is required",
        worker.display()
    );
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let found = tokio::time::timeout(DEADLINE, async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            if line == expected {
                return true;
            }
            seen.push(line);
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "not reported; stderr so far: {seen:?}");
    std::fs::write(dir.path().join("go"), "").unwrap();
    let status = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journals_stay_private_in_the_state_folder_and_a_symlinked_one_is_refused() {
    use std::os::unix::fs::PermissionsExt;

    let mock = MockLlm::start(vec![Reply::text("hi")]).await;
    let dir = tempfile::tempdir().unwrap();
    let out = run_on(&mock, dir.path(), &["hello"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let state = crate::support::harness::state(dir.path());
    for folder in [state.root(), state.dir(), &state.sessions(), &state.runs()] {
        let mode = std::fs::metadata(folder).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o777,
            0o700,
            "{} is the owner's alone",
            folder.display()
        );
    }
    for journal in std::fs::read_dir(state.sessions()).unwrap() {
        let mode = journal.unwrap().metadata().unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "journals are the owner's alone");
    }
    assert!(!dir.path().join(".orchestrate").exists());

    // A state folder that leads elsewhere gets nothing written there.
    let elsewhere = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join(".local/state/orchestrate");
    std::fs::create_dir_all(root.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), &root).unwrap();
    let out = run_on(
        &mock,
        dir.path(),
        &["hello"],
        &[("HOME", home.path().to_str().unwrap())],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        format!(
            "orchestrate: {}: is a symbolic link; orchestrate keeps its state only in a real folder\n",
            root.display()
        )
    );
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    assert_eq!(mock.request_count(), 1, "nothing was asked of the model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_progress_ends_with_the_files_the_run_changed() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[(
            "w1",
            "Write",
            serde_json::json!({"file_path": "notes.txt", "content": "one\ntwo\n"}),
        )]),
        Reply::text("written"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let out = run_on(
        &mock,
        dir.path(),
        &["--permission-mode", "acceptEdits", "write it"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.ends_with("\nfiles changed:\n  notes.txt  +2 −0\n"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soft_limit_on_open_files_is_raised_to_the_hard_one() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[(
            "b1",
            "Bash",
            serde_json::json!({"command": "ulimit -Sn; ulimit -Hn"}),
        )]),
        Reply::text("done"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let args = ["--permission-mode", "bypassPermissions", "go"];
    let direct = command_on(&mock, dir.path(), &args, &[]);
    // Started with a soft limit of 256, as a shell's `ulimit -Sn` leaves it (a hard
    // limit below 256 fails the `ulimit`, and the run with it).
    let shell = ["-c", "ulimit -Sn 256 && exec \"$@\"", "bash"];
    let mut cmd = wrapped(&direct, "bash", &shell);
    let out = tokio::time::timeout(DEADLINE, cmd.output())
        .await
        .expect("orchestrate did not exit in time")
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let result = tool_results(&mock.requests()[1])[0].1.clone();
    let limits: Vec<u64> = (result.split_whitespace().take(2))
        .map(|n| n.parse().unwrap_or(u64::MAX))
        .collect();
    let [soft, hard] = limits[..] else {
        panic!("{result}")
    };
    let ceiling = orchestrate::cli::OPEN_FILES_CEILING;
    assert_eq!(soft, hard.min(ceiling), "{result}");
}

/// A model that titles a task and answers once `gate` opens.
async fn titling_mock(gate: &Gate) -> MockLlm {
    let gate = gate.clone();
    MockLlm::start_with(move |request, _| {
        if request.system().starts_with("Write a title") {
            return Reply::text("\"Fix the parser bug\"");
        }
        Reply::text("done").with_end(End::HoldAfter(0, gate.clone()))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_gets_a_title_only_when_the_persons_file_asks_and_sessions_lists_it() {
    let gate = Gate::new();
    let mock = titling_mock(&gate).await;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    // Off by default: no request the run did not need.
    gate.open();
    let out = run_on(&mock, ws, &["fix the parser"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(mock.request_count(), 1);
    // Asked for in the person's own file.
    let gate = Gate::new();
    let mock = titling_mock(&gate).await;
    std::fs::create_dir_all(ws.join(".config/orchestrate")).unwrap();
    std::fs::write(
        ws.join(".config/orchestrate/config.toml"),
        "titles = true\n",
    )
    .unwrap();
    let child = command_on(
        &mock,
        ws,
        &["--json", "the parser drops the last token"],
        &[],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    // The answer waits until the title is kept, so that the run's end does
    // not drop it.
    let state = crate::support::harness::state(ws);
    crate::support::harness::wait_until("the title is journaled", || {
        std::fs::read_dir(state.sessions())
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains("\"type\":\"titled\""))
            })
    })
    .await;
    gate.open();
    let out = tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let titled: Vec<Value> = text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "titled")
        .collect();
    assert_eq!(titled.len(), 1, "{}", text(&out.stdout));
    assert_eq!(titled[0]["title"], "Fix the parser bug");
    assert_eq!(titled[0]["usage"]["input_tokens"], 10);
    let asked = mock.requests();
    let title_request = asked
        .iter()
        .find(|r| r.system().starts_with("Write a title"))
        .unwrap();
    assert_eq!(
        title_request.body["messages"][1]["content"],
        "the parser drops the last token"
    );
    let list = run_on(&mock, ws, &["sessions"], &[]).await;
    let listed = text(&list.stdout);
    assert!(listed.contains("Fix the parser bug"), "{listed}");
    assert!(
        !listed.contains("the parser drops"),
        "the title stands for the task: {listed}"
    );
}
