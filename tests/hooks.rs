//! Claude Code's hooks through the real binary, with real scripts: a
//! PreToolUse hook that blocks (by exit code and by JSON), a PostToolUse log,
//! Stop and SubagentStop (once per sub-agent, never the lead's), a Stop hook
//! that keeps the lead going once, hooks that time out (blocking only with
//! `onFailure: "block"`), UserPromptSubmit context and refusal, Notification,
//! a workspace's hooks run only once it is trusted; and a slash command with
//! arguments, its model and tools.

use std::path::Path;

use serde_json::{Value, json};

use crate::cli::{run_on, text};
use crate::support::harness::tool_results;
use crate::support::mock_llm::{MockLlm, Recorded, Reply};

const BYPASS: [&str; 2] = ["--permission-mode", "bypassPermissions"];

/// Writes `settings` as the person's `~/.claude/settings.json` (the tests'
/// home is the workspace) and each script, executable, in `.claude/hooks/`.
fn settings(home: &Path, settings: &Value, scripts: &[(&str, &str)]) {
    use std::os::unix::fs::PermissionsExt;
    let dir = home.join(".claude/hooks");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(home.join(".claude/settings.json"), settings.to_string()).unwrap();
    for (name, body) in scripts {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// A command hook running script `name` of `.claude/hooks/`.
fn script(name: &str) -> Value {
    json!({ "type": "command", "command": format!("\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/{name}") })
}

/// The lines of `file`, each a JSON object (each hook writes its line in one
/// write: hooks of one event run at once).
fn logged(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A workspace (`repo`) whose `.claude/commands/` holds `file` with `text`,
/// beside a home of its own (`home`, empty): the folder holding both, the
/// workspace, the home.
fn with_command(
    file: &str,
    text: &str,
) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (ws, home) = (dir.path().join("repo"), dir.path().join("home"));
    std::fs::create_dir_all(ws.join(".claude/commands")).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(ws.join(".claude/commands").join(file), text).unwrap();
    (dir, ws, home)
}

/// Opens `gate` once a hook has written a whole line to `file` (a hook
/// that runs beside what it concerns, whose side effect the run must not
/// outpace).
fn open_once_logged(
    gate: &crate::support::mock_llm::Gate,
    file: &Path,
) -> tokio::task::JoinHandle<()> {
    let (gate, file) = (gate.clone(), file.to_owned());
    tokio::spawn(async move {
        crate::support::harness::wait_until("the hook wrote its line", || {
            std::fs::read_to_string(&file).is_ok_and(|t| t.ends_with('\n'))
        })
        .await;
        gate.open();
    })
}

/// The results of the last request, by call id.
fn results(mock: &MockLlm) -> std::collections::HashMap<String, String> {
    tool_results(&mock.requests().pop().unwrap())
        .into_iter()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_tool_use_hooks_block_by_exit_code_or_json_and_post_tool_use_hooks_log_what_ran() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::create_dir(ws.join("data")).unwrap();
    settings(
        ws,
        &json!({ "hooks": {
            "PreToolUse": [
                { "matcher": "Bash", "hooks": [script("no-rm.sh")] },
                { "matcher": "Write|Edit", "hooks": [script("frozen.sh")] },
            ],
            "PostToolUse": [{ "hooks": [script("log.sh")] }],
        } }),
        &[
            (
                "no-rm.sh",
                r#"input=$(cat); case "$input" in *'"rm '*) echo "no rm here" >&2; exit 2;; esac; exit 0"#,
            ),
            (
                "frozen.sh",
                r#"cat >/dev/null; echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "writes are frozen"}}'"#,
            ),
            (
                "log.sh",
                r#"line=$(cat); printf '%s\n' "$line" >> "$CLAUDE_PROJECT_DIR/post.log""#,
            ),
        ],
    );
    let mock = MockLlm::start_with(|request, _| match request.results() {
        0 => Reply::tool_calls(&[
            ("rm", "Bash", json!({ "command": "rm -rf data" })),
            ("echo", "Bash", json!({ "command": "echo hi > out.txt" })),
            (
                "write",
                "Write",
                json!({ "file_path": "new.txt", "content": "x" }),
            ),
        ]),
        _ => Reply::text("done"),
    })
    .await;
    let mut args = BYPASS.to_vec();
    args.push("tidy up");
    let out = run_on(&mock, ws, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let results = results(&mock);
    assert_eq!(
        results["rm"],
        "Error: blocked by a PreToolUse hook: no rm here"
    );
    assert_eq!(
        results["write"],
        "Error: blocked by a PreToolUse hook: writes are frozen"
    );
    assert!(ws.join("data").is_dir(), "the blocked command never ran");
    assert!(!ws.join("new.txt").exists(), "the blocked write never ran");
    assert_eq!(std::fs::read_to_string(ws.join("out.txt")).unwrap(), "hi\n");
    // Only the call that ran reached PostToolUse, with the event's fields.
    let log = logged(&ws.join("post.log"));
    assert_eq!(log.len(), 1, "{log:?}");
    let event = &log[0];
    assert_eq!(event["hook_event_name"], "PostToolUse");
    assert_eq!(event["tool_name"], "Bash");
    assert_eq!(event["tool_input"]["command"], "echo hi > out.txt");
    assert_eq!(event["tool_use_id"], "echo");
    assert_eq!(
        event["cwd"],
        ws.canonicalize().unwrap().display().to_string()
    );
    let transcript = event["transcript_path"].as_str().unwrap();
    assert!(Path::new(transcript).is_file(), "{transcript}");
    assert!(event["session_id"].as_str().is_some_and(|s| !s.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_stop_runs_once_per_sub_agent_and_stop_once_for_the_lead() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let log = r#"line=$(cat); printf '%s\n' "$line" >> "$CLAUDE_PROJECT_DIR/stops.log""#;
    settings(
        ws,
        &json!({ "hooks": {
            "Stop": [{ "hooks": [script("log.sh")] }],
            "SubagentStop": [{ "hooks": [script("log.sh")] }],
        } }),
        &[("log.sh", log)],
    );
    let worker = "You are a worker.";
    std::fs::create_dir(ws.join("agents")).unwrap();
    std::fs::write(
        ws.join("agents/worker.md"),
        format!("---\nname: worker\ndescription: Works.\ntools: Read\n---\n{worker}\n"),
    )
    .unwrap();
    let mock = MockLlm::start_with(move |request: &Recorded, _| {
        if request.system().starts_with(worker) {
            return Reply::text("piece done");
        }
        match request.results() {
            0 => {
                let task = |id: &str| {
                    (
                        id.to_owned(),
                        json!({ "description": id, "prompt": id, "subagent_type": "worker" }),
                    )
                };
                let calls = [task("a"), task("b")];
                let calls: Vec<(&str, &str, Value)> = calls
                    .iter()
                    .map(|(id, v)| (id.as_str(), "Task", v.clone()))
                    .collect();
                Reply::tool_calls(&calls)
            }
            _ => Reply::text("all done"),
        }
    })
    .await;
    let out = run_on(&mock, ws, &["split it"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let log = logged(&ws.join("stops.log"));
    let of = |name: &str| {
        log.iter()
            .filter(|e| e["hook_event_name"] == name)
            .collect::<Vec<_>>()
    };
    let (stops, sub) = (of("Stop"), of("SubagentStop"));
    assert_eq!(stops.len(), 1, "{log:?}");
    assert_eq!(sub.len(), 2, "{log:?}");
    assert_ne!(sub[0]["session_id"], sub[1]["session_id"]);
    assert!(
        sub.iter()
            .all(|e| e["session_id"] != stops[0]["session_id"])
    );
    assert!(log.iter().all(|e| e["stop_hook_active"] == false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_hook_that_blocks_keeps_the_lead_going_and_hears_it_is_active_the_next_time() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    settings(
        ws,
        &json!({ "hooks": { "Stop": [{ "hooks": [script("tests-first.sh")] }] } }),
        &[(
            "tests-first.sh",
            r#"input=$(cat); case "$input" in *'"stop_hook_active":false'*) echo "run the tests first" >&2; exit 2;; esac; exit 0"#,
        )],
    );
    let mock = MockLlm::start_with(|request, index| match index {
        0 => Reply::text("done, I think"),
        _ => {
            let last = request.body["messages"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()
                .clone();
            Reply::text(format!(
                "heard: {}",
                last["content"].as_str().unwrap_or_default()
            ))
        }
    })
    .await;
    let out = run_on(&mock, ws, &["--quiet", "fix it"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        mock.request_count(),
        2,
        "one more turn, then the hook lets it end"
    );
    assert!(text(&out.stdout).starts_with("heard: "));
    assert!(
        text(&out.stdout).contains("run the tests first"),
        "{}",
        text(&out.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_that_times_out_blocks_only_when_it_says_on_failure_block() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let slow = |on_failure: Option<&str>| {
        let mut hook = json!({ "type": "command", "command": "sleep 30", "timeout": 1 });
        if let Some(v) = on_failure {
            hook["onFailure"] = json!(v);
        }
        hook
    };
    settings(
        ws,
        &json!({ "hooks": { "PreToolUse": [
            { "matcher": "Bash", "hooks": [slow(None)] },
            { "matcher": "Write", "hooks": [slow(Some("block"))] },
        ] } }),
        &[],
    );
    let mock = MockLlm::start_with(|request, _| match request.results() {
        0 => Reply::tool_calls(&[
            ("echo", "Bash", json!({ "command": "echo ran > ran.txt" })),
            (
                "write",
                "Write",
                json!({ "file_path": "w.txt", "content": "x" }),
            ),
        ]),
        _ => Reply::text("done"),
    })
    .await;
    let mut args = BYPASS.to_vec();
    args.push("go");
    let out = run_on(&mock, ws, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        ws.join("ran.txt").exists(),
        "a failed hook without onFailure lets the call run"
    );
    assert!(!ws.join("w.txt").exists(), "onFailure: block blocks it");
    let results = results(&mock);
    assert!(
        results["write"].contains("PreToolUse hook `sleep 30` failed: it timed out after 1s"),
        "{}",
        results["write"]
    );
    // The person hears of the failure that let the call go on.
    assert!(
        text(&out.stderr).contains("PreToolUse hook sleep 30 error"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_prompt_submit_hooks_add_context_or_refuse_the_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    settings(
        ws,
        &json!({ "hooks": { "UserPromptSubmit": [{ "hooks": [script("context.sh")] }] } }),
        &[(
            "context.sh",
            r#"input=$(cat); case "$input" in *secret*) echo "no secrets in prompts" >&2; exit 2;; esac; echo "The build uses make.""#,
        )],
    );
    let mock = MockLlm::start(vec![Reply::text("ok")]).await;
    let out = run_on(&mock, ws, &["--quiet", "build it"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let prompt = mock.requests()[0].body["messages"][1]["content"].clone();
    assert_eq!(prompt, "build it\n\nThe build uses make.");
    let out = run_on(&mock, ws, &["--quiet", "print the secret"], &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "orchestrate: a UserPromptSubmit hook refused the prompt: no secrets in prompts\n"
    );
    assert_eq!(
        mock.request_count(),
        1,
        "the refused prompt reached no model"
    );
    // And it left no run behind (`-c` goes on with the one before).
    let journals = std::fs::read_dir(crate::support::harness::state(ws).sessions())
        .unwrap()
        .count();
    assert_eq!(journals, 1, "one run, the first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_s_hooks_run_only_once_it_is_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("repo");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    settings(
        &ws,
        &json!({ "hooks": { "PreToolUse": [{ "hooks": [script("mark.sh")] }] } }),
        &[(
            "mark.sh",
            r#"cat >/dev/null; touch "$CLAUDE_PROJECT_DIR/marker""#,
        )],
    );
    let mock = MockLlm::start_with(|request, _| match request.results() {
        0 => Reply::tool_calls(&[("ls", "Ls", json!({ "path": "." }))]),
        _ => Reply::text("done"),
    })
    .await;
    let home_env = [("HOME", home.to_str().unwrap())];
    let out = run_on(&mock, &ws, &["--quiet", "look"], &home_env).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !ws.join("marker").exists(),
        "an untrusted workspace's hook ran"
    );
    let err = text(&out.stderr);
    assert!(
        err.contains(".claude/settings.json: its hooks are not run (PreToolUse:"),
        "{err}"
    );
    let out = run_on(
        &mock,
        &ws,
        &["--quiet", "--trust-workspace", "look"],
        &home_env,
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        ws.join("marker").exists(),
        "a trusted workspace's hook did not run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_hook_hears_of_each_permission_question() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    settings(
        ws,
        &json!({ "hooks": { "Notification": [{ "hooks": [script("log.sh")] }] } }),
        &[(
            "log.sh",
            r#"line=$(cat); printf '%s\n' "$line" >> "$CLAUDE_PROJECT_DIR/asked.log""#,
        )],
    );
    // The hook runs beside the question: the run ends once it has written.
    let heard = crate::support::mock_llm::Gate::new();
    let mock = MockLlm::start_with({
        let heard = heard.clone();
        move |request, _| match request.results() {
            0 => Reply::tool_calls(&[(
                "w",
                "Write",
                json!({ "file_path": "a.txt", "content": "x" }),
            )]),
            _ => Reply::text("done")
                .with_end(crate::support::mock_llm::End::HoldAfter(0, heard.clone())),
        }
    })
    .await;
    let log_file = ws.join("asked.log");
    let opener = open_once_logged(&heard, &log_file);
    // No terminal: the question is refused, and the hook hears of it.
    let out = run_on(&mock, ws, &["--quiet", "write it"], &[]).await;
    opener.await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let log = logged(&ws.join("asked.log"));
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["hook_event_name"], "Notification");
    assert_eq!(
        log[0]["message"],
        "the orchestrator agent needs your permission to use Write"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slash_command_runs_its_body_with_its_arguments_model_and_tools() {
    let (_dir, ws, home) = with_command(
        "review.md",
        "---\ndescription: Reviews a file\nallowed-tools: Read, Grep, Bash(git diff:*)\nmodel: m-review\n---\nReview $1 for $2 bugs. Status: !`echo clean`\n",
    );
    let mock = MockLlm::start_with(|_, _| Reply::text("reviewed")).await;
    let home_env = [("HOME", home.to_str().unwrap())];
    let out = run_on(
        &mock,
        &ws,
        &["--quiet", "/review src/a.rs off-by-one"],
        &home_env,
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let first = &mock.requests()[0];
    assert_eq!(first.body["model"], "m-review");
    assert_eq!(
        first.body["messages"][1]["content"],
        "Review src/a.rs for off-by-one bugs. Status: !`echo clean`"
    );
    // A Read rule covers the tools that read (Ls, Glob, Grep), as in Claude
    // Code; `Bash(git diff:*)` offers Bash.
    assert_eq!(
        crate::support::harness::tool_names(first),
        ["Read", "Ls", "Glob", "Grep", "Bash"]
    );
    assert!(
        text(&out.stderr).contains("are left as text"),
        "{}",
        text(&out.stderr)
    );
    // Trusted, its shell runs.
    let args = [
        "--quiet",
        "--trust-workspace",
        "/review src/a.rs off-by-one",
    ];
    let out = run_on(&mock, &ws, &args, &home_env).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let second = mock.requests().pop().unwrap();
    assert_eq!(
        second.body["messages"][1]["content"],
        "Review src/a.rs for off-by-one bugs. Status: clean"
    );
    // A name no command has is a plain task.
    let out = run_on(&mock, &ws, &["--quiet", "/nosuch thing"], &home_env).await;
    assert_eq!(out.status.code(), Some(0));
    let third = mock.requests().pop().unwrap();
    assert_eq!(third.body["messages"][1]["content"], "/nosuch thing");
    // A follow-up names a command as a task does.
    let args = ["--quiet", "resume", "/review src/b.rs typo"];
    let out = run_on(&mock, &ws, &args, &home_env).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let fourth = mock.requests().pop().unwrap();
    let messages = fourth.body["messages"].as_array().unwrap();
    assert_eq!(
        messages.last().unwrap()["content"],
        "Review src/b.rs for typo bugs. Status: !`echo clean`"
    );
    assert_eq!(fourth.body["model"], "m-review");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_is_listed_loaded_and_its_files_read_and_a_role_selects_its_skills() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("repo");
    let home = dir
        .path()
        .join("home")
        .canonicalize()
        .unwrap_or(dir.path().join("home"));
    std::fs::create_dir_all(&ws).unwrap();
    let skill = |root: &Path, name: &str, description: &str| {
        let folder = root.join(".claude/skills").join(name);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(
            folder.join("SKILL.md"),
            format!("---\nname: {name}\ndescription: {description}\n---\nFollow reference.md.\n"),
        )
        .unwrap();
        std::fs::write(folder.join("reference.md"), format!("{name} details\n")).unwrap();
    };
    skill(&home, "pdf", "Fills PDF forms.");
    skill(&ws, "charts", "Draws charts.");
    std::fs::write(home.join("secret.txt"), "not for agents").unwrap();
    let home = home.canonicalize().unwrap();
    std::fs::create_dir_all(ws.join("agents")).unwrap();
    std::fs::write(
        ws.join("agents/plotter.md"),
        "---\nname: plotter\ndescription: Plots.\ntools: Read, Skill\nskills: [charts]\n---\nYou plot.\n",
    )
    .unwrap();
    let reference = home.join(".claude/skills/pdf/reference.md");
    let secret = home.join("secret.txt");
    let mock = MockLlm::start_with({
        let (reference, secret) = (reference.clone(), secret.clone());
        move |request, _| {
            if request.system().starts_with("You plot.") {
                return Reply::text("plotted");
            }
            match request.results() {
                0 => Reply::tool_calls(&[
                    ("load", "Skill", json!({ "skill": "pdf" })),
                    ("ref", "Read", json!({ "file_path": reference.display().to_string() })),
                    ("secret", "Read", json!({ "file_path": secret.display().to_string() })),
                    ("plot", "Task", json!({ "description": "plot", "prompt": "Plot.", "subagent_type": "plotter" })),
                ]),
                _ => Reply::text("done"),
            }
        }
    })
    .await;
    let home_env = [("HOME", home.to_str().unwrap())];
    let out = run_on(&mock, &ws, &["--quiet", "fill the form"], &home_env).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let first = &mock.requests()[0];
    let skill_tool = first.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "Skill")
        .expect("the Skill tool is offered");
    let listed = skill_tool["function"]["description"].as_str().unwrap();
    assert!(
        listed.contains("- pdf: Fills PDF forms.") && listed.contains("- charts: Draws charts.")
    );
    let results = results(&mock);
    assert!(
        results["load"].contains("Follow reference.md."),
        "{}",
        results["load"]
    );
    assert!(results["load"].contains(&home.join(".claude/skills/pdf").display().to_string()));
    assert!(results["ref"].contains("pdf details"), "{}", results["ref"]);
    assert!(
        results["secret"].starts_with("Error:"),
        "{}",
        results["secret"]
    );
    // The plotter sees only the skill its role names.
    let plotter = mock
        .requests()
        .into_iter()
        .find(|r| r.system().starts_with("You plot."))
        .unwrap();
    let seen = plotter.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "Skill")
        .map(|t| {
            t["function"]["description"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .unwrap();
    assert!(
        seen.contains("- charts:") && !seen.contains("- pdf:"),
        "{seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_hook_is_told_to_the_person_even_with_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    settings(
        ws,
        &json!({ "hooks": { "PreToolUse": [{ "hooks": [{ "type": "command", "command": "echo broken >&2; exit 1" }] }] } }),
        &[],
    );
    let mock = MockLlm::start_with(|request, _| match request.results() {
        0 => Reply::tool_calls(&[("ls", "Ls", json!({ "path": "." }))]),
        _ => Reply::text("done"),
    })
    .await;
    let out = run_on(&mock, ws, &["--quiet", "look"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "orchestrate: warning: the PreToolUse hook `echo broken >&2; exit 1` exited 1: broken"
        ),
        "{err}"
    );
    // The call went on.
    assert!(!results(&mock)["ls"].starts_with("Error:"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_compact_hook_hears_of_a_compaction_by_its_trigger() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    settings(
        ws,
        &json!({ "hooks": { "PreCompact": [
            { "matcher": "auto", "hooks": [script("log.sh")] },
            { "matcher": "manual", "hooks": [{ "type": "command", "command": "touch \"$CLAUDE_PROJECT_DIR/manual\"" }] },
        ] } }),
        &[(
            "log.sh",
            r#"line=$(cat); printf '%s\n' "$line" >> "$CLAUDE_PROJECT_DIR/compact.log""#,
        )],
    );
    std::fs::write(
        ws.join("orchestrate.toml"),
        "[model_info.\"m\"]\ncontext_window = 4000\nmax_output = 500\n",
    )
    .unwrap();
    for i in 0..4 {
        let line = format!("file {i}: {}\n", "data ".repeat(20));
        std::fs::write(
            ws.join(format!("f{i}.txt")),
            line.repeat(6_000 / line.len()),
        )
        .unwrap();
    }
    // The run ends once the hook has written (it runs beside the compaction).
    let heard = crate::support::mock_llm::Gate::new();
    let reads = std::sync::atomic::AtomicUsize::new(0);
    let mock = MockLlm::start_with({
        let heard = heard.clone();
        move |request, _| {
            if request.system().starts_with("You compress the history") {
                return Reply::text("SUMMARY: four files of data.");
            }
            // Counted here: the requests after a compaction hold fewer results.
            match reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                n if n < 4 => Reply::tool_calls(&[(
                    &format!("r{n}"),
                    "Read",
                    json!({ "file_path": format!("f{n}.txt") }),
                )]),
                _ => Reply::text("read them all")
                    .with_end(crate::support::mock_llm::End::HoldAfter(0, heard.clone())),
            }
        }
    })
    .await;
    let log_file = ws.join("compact.log");
    let opener = open_once_logged(&heard, &log_file);
    let out = run_on(&mock, ws, &["--quiet", "read every file"], &[]).await;
    opener.await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let log = logged(&log_file);
    assert!(!log.is_empty());
    assert_eq!(log[0]["hook_event_name"], "PreCompact");
    assert_eq!(log[0]["trigger"], "auto");
    assert!(
        !ws.join("manual").exists(),
        "a manual matcher does not run for an automatic compaction"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_start_adds_context_by_its_source_and_session_end_runs_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let log = r#"line=$(cat); printf '%s\n' "$line" >> "$CLAUDE_PROJECT_DIR/session.log""#;
    settings(
        ws,
        &json!({ "hooks": {
            "SessionStart": [
                { "matcher": "startup", "hooks": [script("log.sh"), { "type": "command", "command": "cat >/dev/null; echo 'Indent with tabs.'" }] },
                { "matcher": "resume", "hooks": [script("log.sh")] },
            ],
            "SessionEnd": [{ "hooks": [script("log.sh")] }],
        } }),
        &[("log.sh", log)],
    );
    let mock = MockLlm::start_with(|_, _| Reply::text("ok")).await;
    let out = run_on(&mock, ws, &["--json", "format it"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let prompt = mock.requests()[0].body["messages"][1]["content"].clone();
    assert_eq!(prompt, "format it\n\nIndent with tabs.");
    // Every hook's run is told, SessionEnd's after the answer too, and kept
    // in the lead's journal.
    let told: Vec<Value> = text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "hook_ran")
        .collect();
    let events: Vec<&str> = told.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(
        events,
        ["SessionStart", "SessionStart", "SessionEnd"],
        "{told:?}"
    );
    let lead = told[0]["session"].as_str().unwrap();
    let journal = crate::support::harness::state(ws).journal(lead.parse().unwrap());
    let kept: Vec<Value> = std::fs::read_to_string(&journal)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["record"] == "event" && r["event"]["type"] == "hook_ran")
        .map(|r| r["event"]["event"].clone())
        .collect();
    assert_eq!(
        kept,
        ["SessionStart", "SessionStart", "SessionEnd"],
        "{journal:?}"
    );
    let out = run_on(&mock, ws, &["--quiet", "resume", "and again"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let last = mock.requests().pop().unwrap();
    let messages = last.body["messages"].as_array().unwrap();
    assert_eq!(
        messages.last().unwrap()["content"],
        "and again",
        "no startup context on resume"
    );
    let log = logged(&ws.join("session.log"));
    let seen: Vec<(String, String)> = log
        .iter()
        .map(|e| {
            let what = e["source"]
                .as_str()
                .or(e["reason"].as_str())
                .unwrap_or_default();
            (
                e["hook_event_name"].as_str().unwrap_or_default().to_owned(),
                what.to_owned(),
            )
        })
        .collect();
    let expected = [
        ("SessionStart", "startup"),
        ("SessionEnd", "other"),
        ("SessionStart", "resume"),
        ("SessionEnd", "other"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
    assert_eq!(seen, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slash_command_s_and_a_loaded_skill_s_allowed_tools_narrow_what_calls_may_do() {
    let (_dir, ws, home) = with_command(
        "probe.md",
        "---\nallowed-tools: Read, Bash(echo:*)\n---\nProbe $ARGUMENTS.\n",
    );
    std::fs::write(ws.join("seen.txt"), "").unwrap();
    let folder = ws.join(".claude/skills/tidy");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(
        folder.join("SKILL.md"),
        "---\nname: tidy\ndescription: Tidies.\nallowed-tools: Read, Bash(ls:*)\n---\nOnly look.\n",
    )
    .unwrap();
    let mock = MockLlm::start_with(|request, _| {
        let probing = request.body["messages"][1]["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("Probe"));
        let last = request.body["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        if last["content"] == "touch again" {
            return Reply::tool_calls(&[(
                "again",
                "Bash",
                json!({ "command": "touch again.txt" }),
            )]);
        }
        match (probing, request.results()) {
            (true, 0) => Reply::tool_calls(&[
                ("echo", "Bash", json!({ "command": "echo ok" })),
                ("touch", "Bash", json!({ "command": "touch made.txt" })),
            ]),
            (false, 0) => Reply::tool_calls(&[("load", "Skill", json!({ "skill": "tidy" }))]),
            (false, 1) => Reply::tool_calls(&[
                (
                    "write",
                    "Write",
                    json!({ "file_path": "w.txt", "content": "x" }),
                ),
                ("ls", "Bash", json!({ "command": "ls" })),
                ("rm", "Bash", json!({ "command": "rm -f nothing" })),
            ]),
            _ => Reply::text("done"),
        }
    })
    .await;
    let home_env = [("HOME", home.to_str().unwrap())];
    let mut args = BYPASS.to_vec();
    args.extend(["--quiet", "/probe the tree"]);
    let out = run_on(&mock, &ws, &args, &home_env).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let probed = results(&mock);
    assert_eq!(probed["echo"].trim(), "ok");
    let refused = &probed["touch"];
    assert!(
        refused.contains("allows only Read, Bash(echo:*)") && refused.contains("probe.md"),
        "{refused}"
    );
    assert!(
        !ws.join("made.txt").exists(),
        "the refused command never ran"
    );
    // The run carried on by `resume` is narrowed as it was.
    let mut args = BYPASS.to_vec();
    args.extend(["--quiet", "resume", "touch again"]);
    let out = run_on(&mock, &ws, &args, &home_env).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let again = results(&mock);
    assert!(
        again["again"].contains("allows only Read, Bash(echo:*)"),
        "{}",
        again["again"]
    );
    assert!(!ws.join("again.txt").exists());
    // A skill narrows the session once it is loaded.
    let mut args = BYPASS.to_vec();
    args.extend(["--quiet", "tidy up"]);
    let out = run_on(&mock, &ws, &args, &home_env).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let loaded = tool_results(&mock.requests()[mock.requests().len() - 2])
        .into_iter()
        .find(|(id, _)| id == "load")
        .unwrap()
        .1;
    assert!(loaded.contains("may use only these tools"), "{loaded}");
    let results = results(&mock);
    assert!(
        results["write"].contains("the skill \"tidy\" allows only Read, Bash(ls:*)"),
        "{}",
        results["write"]
    );
    assert!(
        !ws.join("w.txt").exists(),
        "the refused write never happened"
    );
    assert_eq!(results["ls"].trim(), "seen.txt", "{}", results["ls"]);
    assert!(results["rm"].contains("allows only"), "{}", results["rm"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_false_from_a_tool_hook_ends_the_agent_with_the_hook_s_reason() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    settings(
        ws,
        &json!({ "hooks": {
            "PreToolUse": [{ "matcher": "Write", "hooks": [script("halt.sh")] }],
            "PostToolUse": [{ "matcher": "Bash", "hooks": [script("halt.sh")] }],
        } }),
        &[(
            "halt.sh",
            r#"cat >/dev/null; echo '{"continue": false, "stopReason": "the build is red"}'"#,
        )],
    );
    /// Runs `task` whose one call is `tool` with `input`: the hook ends the
    /// agent, and the model is not asked again.
    async fn ended_by_the_hook(ws: &Path, tool: &'static str, input: Value, task: &str) {
        let mock = MockLlm::start_with(move |request, _| match request.results() {
            0 => Reply::tool_calls(&[("call", tool, input.clone())]),
            _ => Reply::text("carried on"),
        })
        .await;
        let mut args = BYPASS.to_vec();
        args.extend(["--json", task]);
        let out = run_on(&mock, ws, &args, &[]).await;
        let stdout = text(&out.stdout);
        assert!(
            stdout.contains(r#""reason":"hook: the build is red""#),
            "{stdout}"
        );
        assert_eq!(mock.requests().len(), 1, "the model is not asked again");
    }
    // Before the call: refused, and the agent ends.
    let write = json!({ "file_path": "w.txt", "content": "x" });
    ended_by_the_hook(ws, "Write", write, "write it").await;
    assert!(!ws.join("w.txt").exists());
    // After the call: it ran, and the agent ends.
    let echo = json!({ "command": "echo hi > b.txt" });
    ended_by_the_hook(ws, "Bash", echo, "echo it").await;
    assert_eq!(std::fs::read_to_string(ws.join("b.txt")).unwrap(), "hi\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_from_another_terminal_goes_through_the_prompt_hooks() {
    use crate::support::mock_llm::{End, Gate};
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    settings(
        ws,
        &json!({ "hooks": { "UserPromptSubmit": [{ "hooks": [script("guard.sh")] }] } }),
        &[(
            "guard.sh",
            r#"input=$(cat); case "$input" in *forbidden*) echo "not that" >&2; exit 2;; esac; echo "steer noted""#,
        )],
    );
    std::fs::write(ws.join("notes.txt"), "notes\n").unwrap();
    let go = Gate::new();
    let mock = MockLlm::start_with({
        let go = go.clone();
        move |request, _| match request.results() {
            0 => Reply::tool_calls(&[("r1", "Read", json!({ "file_path": "notes.txt" }))])
                .with_end(End::HoldAfter(1, go.clone())),
            _ => {
                let messages = request.body["messages"].as_array().unwrap();
                let heard = messages.last().unwrap()["content"].as_str().unwrap_or("");
                Reply::text(format!("heard: {heard}"))
            }
        }
    })
    .await;
    let mut command = crate::cli::command_on(&mock, ws, &["--json", "read the notes"], &[]);
    let (mut child, mut lines) = crate::support::harness::spawn_json(&mut command);
    let state = crate::support::harness::state(ws);
    let steer = |message: &'static str| {
        let state = state.clone();
        async move {
            let op = orchestrate::control::Op::Steer {
                agent: "orchestrator".into(),
                message: message.into(),
            };
            crate::support::harness::control(&state, &op).await
        }
    };
    let (mut refused, mut queued, mut answer) = (false, false, None);
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let event: Value = serde_json::from_str(&line).unwrap();
            match event["type"].as_str().unwrap_or_default() {
                "turn_started" if event["turn"] == 1 => {
                    let first = steer("do the forbidden thing").await;
                    assert!(
                        first.ok && first.text.contains("UserPromptSubmit"),
                        "{first:?}"
                    );
                    assert!(steer("mind the README").await.ok);
                }
                "hook_ran" if event["decision"] == "block" => refused = true,
                "prompt_queued" => queued = true,
                "terminal" => answer = event["text"].as_str().map(str::to_owned),
                _ => {}
            }
            // Both messages are through their hooks: the stream may end.
            if refused && queued {
                go.open();
            }
        }
    };
    tokio::time::timeout(crate::support::harness::DEADLINE, read)
        .await
        .expect("the run did not end in time");
    assert_eq!(child.wait().await.unwrap().code(), Some(0));
    assert_eq!(
        answer.as_deref(),
        Some("heard: mind the README\n\nsteer noted")
    );
    let asked = mock.requests();
    let forbidden = asked
        .iter()
        .any(|r| r.body["messages"].to_string().contains("forbidden"));
    assert!(!forbidden, "the refused message never reached the model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_is_narrowed_as_its_caller_was() {
    let (_dir, ws, home) = with_command(
        "survey.md",
        "---\nallowed-tools: Task, Read\n---\nSurvey $ARGUMENTS.\n",
    );
    std::fs::create_dir_all(ws.join("agents")).unwrap();
    std::fs::write(
        ws.join("agents/writer.md"),
        "---\nname: writer\ndescription: Writes.\ntools: Read, Write, Bash\n---\nYou write.\n",
    )
    .unwrap();
    let mock = MockLlm::start_with(|request, _| {
        let writer = request.system().starts_with("You write.");
        match (writer, request.results()) {
            (false, 0) => Reply::tool_calls(&[(
                "t1",
                "Task",
                json!({ "description": "w", "prompt": "Write it.", "subagent_type": "writer" }),
            )]),
            (true, 0) => Reply::tool_calls(&[(
                "w1",
                "Write",
                json!({ "file_path": "w.txt", "content": "x" }),
            )]),
            (true, _) => Reply::text("could not write"),
            (false, _) => Reply::text("surveyed"),
        }
    })
    .await;
    let home_env = [("HOME", home.to_str().unwrap())];
    let mut args = BYPASS.to_vec();
    args.extend(["--quiet", "/survey the tree"]);
    let out = run_on(&mock, &ws, &args, &home_env).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let writer: Vec<Recorded> = mock
        .requests()
        .into_iter()
        .filter(|r| r.system().starts_with("You write."))
        .collect();
    assert_eq!(crate::support::harness::tool_names(&writer[0]), ["Read"]);
    let refused = tool_results(&writer[1]).pop().unwrap().1;
    assert_eq!(refused, "Error: unknown tool \"Write\"");
    assert!(!ws.join("w.txt").exists());
}
