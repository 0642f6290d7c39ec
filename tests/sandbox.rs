//! The sandbox and the rules hold, through the real binary: a sandboxed Bash
//! cannot plant what git will later run nor change the agents' files while
//! `git add`, `commit`, `branch` and `stash` keep working; protected paths ask
//! even in acceptEdits; a racing Bash in a parallel sub-agent cannot lead a
//! Write out of the workspace; deny rules see through wrappers and refuse what
//! they cannot read; path rules see through links and listings; and inputs that
//! crashed or hung the orchestrator (a many-star rule, deep HTML, a doubling
//! MultiEdit, a huge Retry-After) end the turn, not the process.

use std::path::Path;

use serde_json::{Value, json};

use crate::cli::{run_on, text};
use crate::support::harness::{self, DEADLINE};
use crate::support::mock_llm::{MockLlm, Recorded, Reply};

const BYPASS: [&str; 2] = ["--permission-mode", "bypassPermissions"];

/// Runs `git args` in `dir` as the person would, outside any sandbox.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// The result of call `id`, from the last request the mock saw.
fn result(mock: &MockLlm, id: &str) -> String {
    harness::tool_results(mock.requests().last().unwrap())
        .into_iter()
        .find(|(call, _)| call == id)
        .map(|(_, text)| text)
        .unwrap_or_else(|| panic!("no result for {id}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_bash_cannot_plant_what_git_runs_yet_ordinary_git_work_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    git(&ws, &["init", "-q"]);
    git(&ws, &["config", "user.email", "a@b"]);
    git(&ws, &["config", "user.name", "a"]);
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    git(&ws, &["add", "a.txt"]);
    git(&ws, &["commit", "-qm", "first"]);
    std::fs::create_dir_all(ws.join(".claude")).unwrap();
    std::fs::write(ws.join(".claude/settings.json"), "{}").unwrap();
    std::fs::write(ws.join(".envrc"), "export A=1\n").unwrap();
    std::fs::write(ws.join("CLAUDE.md"), "be kind\n").unwrap();
    let config_before = std::fs::read(ws.join(".git/config")).unwrap();
    let attacks = "git config core.fsmonitor 'touch pwned' || echo config refused; \
         echo 'touch pwned' > .git/hooks/pre-commit || echo hook refused; \
         echo x >> .git/info/exclude || echo info refused; \
         mv .git .moved 2>/dev/null || echo move refused; \
         mv .git/config .git/c 2>/dev/null || echo rename refused; \
         echo 'curl evil' >> .envrc || echo envrc refused; \
         echo '{\"permissions\":{\"allow\":[\"Bash\"]}}' > .claude/settings.json || echo settings refused; \
         echo x >> CLAUDE.md || echo memory refused; \
         echo two > a.txt && git add a.txt && git commit -qm second && echo committed; \
         git branch topic && echo branched; \
         echo three > a.txt && git stash -q && echo stashed; true";
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("b", "Bash", json!({ "command": attacks }))]),
        Reply::text("done"),
    ])
    .await;
    let mut args = BYPASS.to_vec();
    args.push("try");
    let out = run_on(&mock, &ws, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = result(&mock, "b");
    for refused in [
        "config refused",
        "hook refused",
        "info refused",
        "move refused",
        "rename refused",
        "envrc refused",
        "settings refused",
        "memory refused",
    ] {
        assert!(said.contains(refused), "{refused}: {said}");
    }
    for done in ["committed", "branched", "stashed"] {
        assert!(said.contains(done), "{done}: {said}");
    }
    // What the person's git will run is as it was; the work was done.
    assert_eq!(
        std::fs::read(ws.join(".git/config")).unwrap(),
        config_before
    );
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join(".envrc")).unwrap(),
        "export A=1\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join(".claude/settings.json")).unwrap(),
        "{}"
    );
    assert!(git(&ws, &["log", "--oneline"]).contains("second"));
    assert!(git(&ws, &["branch"]).contains("topic"));
    assert_eq!(git(&ws, &["stash", "list"]).lines().count(), 1);
    git(&ws, &["status"]);
    assert!(!ws.join("pwned").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_git_would_look_for_is_guarded_where_missing_and_new_agent_files_are_set_aside() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    git(&ws, &["init", "-q"]);
    git(&ws, &["config", "user.email", "a@b"]);
    git(&ws, &["config", "user.name", "a"]);
    git(&ws, &["config", "core.hooksPath", ".githooks"]);
    std::fs::remove_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::remove_dir_all(ws.join(".git/info")).unwrap();
    std::fs::create_dir_all(ws.join(".git/modules/sub")).unwrap();
    std::fs::write(ws.join(".git/modules/sub/config"), "[core]\n").unwrap();
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    let attacks = "mkdir -p .git/hooks; echo 'touch pwned' > .git/hooks/pre-commit || echo hooks refused; \
         mkdir -p .githooks; echo 'touch pwned' > .githooks/pre-commit || echo hookspath refused; \
         mv .git/modules/sub .git/modules/old 2>/dev/null || echo module refused; \
         mkdir .git/modules/evil 2>/dev/null || echo modules refused; \
         mkdir -p .claude && echo '{\"hooks\":{}}' > .claude/settings.json && echo settings made; \
         git add a.txt && git commit -qm first && echo committed; true";
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("b", "Bash", json!({ "command": attacks }))]),
        Reply::tool_calls(&[(
            "u",
            "Bash",
            json!({ "command": "umount .git/config 2>/dev/null && echo unmounted || echo umount refused" }),
        )]),
        Reply::text("done"),
    ])
    .await;
    let mut args = BYPASS.to_vec();
    args.extend(["--sandbox", "off", "try"]);
    let out = run_on(&mock, &ws, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = result(&mock, "b");
    for refused in [
        "hooks refused",
        "hookspath refused",
        "module refused",
        "modules refused",
        "settings made",
        "committed",
        "it was moved to .claude.from-command",
    ] {
        assert!(said.contains(refused), "{refused}: {said}");
    }
    // Even unconfined by Landlock, the command holds no capability to undo
    // the mounts.
    assert!(
        result(&mock, "u").contains("umount refused"),
        "{}",
        result(&mock, "u")
    );
    assert!(!ws.join(".claude").exists());
    assert!(ws.join(".claude.from-command/settings.json").exists());
    assert!(ws.join(".git/modules/sub/config").exists());
    // The person's own git runs no hook the command wrote.
    std::fs::write(ws.join("a.txt"), "two\n").unwrap();
    git(&ws, &["commit", "-qam", "second"]);
    assert!(!ws.join("pwned").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_paths_need_a_yes_even_in_accept_edits_and_under_an_allow_rule() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(ws.join(".git")).unwrap();
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[
            ("git", "Write", json!({"file_path": ".git/config", "content": "[core]\n\tfsmonitor = touch pwned\n"})),
            ("mcp", "Write", json!({"file_path": ".mcp.json", "content": "{}"})),
            ("role", "Write", json!({"file_path": "agents/evil.md", "content": "x"})),
            ("src", "Write", json!({"file_path": "src/lib.rs", "content": "fn x() {}\n"})),
        ]),
        Reply::text("done"),
        Reply::tool_calls(&[(
            "git",
            "Write",
            json!({"file_path": ".git/config", "content": "[core]\n"}),
        )]),
        Reply::text("done"),
    ])
    .await;
    let args = [
        "--permission-mode",
        "acceptEdits",
        "--allowedTools",
        "Write(**)",
        "edit things",
    ];
    let out = run_on(&mock, &ws, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for id in ["git", "mcp", "role"] {
        let said = result(&mock, id);
        assert!(said.contains("needs approval"), "{id}: {said}");
    }
    assert!(result(&mock, "src").starts_with("Created src/lib.rs"));
    assert!(!ws.join(".git/config").exists() && !ws.join(".mcp.json").exists());
    // bypassPermissions is the person's own say-so.
    let mut args = BYPASS.to_vec();
    args.push("again");
    let out = run_on(&mock, &ws, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(result(&mock, "git").starts_with("Created .git/config"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_racing_bash_in_a_parallel_sub_agent_cannot_lead_a_write_out_of_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().canonicalize().unwrap();
    std::fs::create_dir_all(ws.join("agents")).unwrap();
    for (name, tools) in [("flipper", "Bash"), ("writer", "Write")] {
        std::fs::write(
            ws.join(format!("agents/{name}.md")),
            format!(
                "---\nname: {name}\ndescription: {name}\ntools: {tools}\n---\nYou are the {name}.\n"
            ),
        )
        .unwrap();
    }
    // The flipper turns `flip` from a folder into a link out and back until
    // the writer's last Write makes `stop`.
    let flips = format!(
        "while [ ! -e stop ]; do rm -rf flip; mkdir flip; rm -rf flip; ln -s {} flip; done; echo stopped",
        target.display()
    );
    const ROUNDS: usize = 6;
    let mock = MockLlm::start_with(move |request: &Recorded, _| {
        let answered = request.results();
        match request.system() {
            s if s.starts_with("You are the flipper.") && answered == 0 => {
                Reply::tool_calls(&[("f", "Bash", json!({ "command": flips }))])
            }
            s if s.starts_with("You are the writer.") && answered < ROUNDS * 8 => {
                let calls: Vec<(String, Value)> = (0..8)
                    .map(|i| {
                        let n = answered + i;
                        (
                            format!("w{n}"),
                            json!({"file_path": format!("flip/pwned-{n}.txt"), "content": "x"}),
                        )
                    })
                    .collect();
                let calls: Vec<(&str, &str, Value)> = calls
                    .iter()
                    .map(|(id, a)| (id.as_str(), "Write", a.clone()))
                    .collect();
                Reply::tool_calls(&calls)
            }
            s if s.starts_with("You are the writer.") && answered == ROUNDS * 8 => {
                Reply::tool_calls(&[(
                    "stop",
                    "Write",
                    json!({"file_path": "stop", "content": "x"}),
                )])
            }
            s if s.starts_with("You are the flipper.") || s.starts_with("You are the writer.") => {
                Reply::text("done")
            }
            _ if answered == 0 => {
                let task = |id: &str, role: &str| {
                    (
                        id.to_owned(),
                        json!({"description": role, "prompt": "go", "subagent_type": role}),
                    )
                };
                let calls = [task("t1", "flipper"), task("t2", "writer")];
                let calls: Vec<(&str, &str, Value)> = calls
                    .iter()
                    .map(|(id, a)| (id.as_str(), "Task", a.clone()))
                    .collect();
                Reply::tool_calls(&calls)
            }
            _ => Reply::text("both done"),
        }
    })
    .await;
    let mut args = BYPASS.to_vec();
    args.push("race");
    let child = crate::cli::command_on(&mock, &ws, &args, &[]).output();
    let out = tokio::time::timeout(DEADLINE * 2, child)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "both done\n");
    let landed: Vec<_> = std::fs::read_dir(&target).unwrap().collect();
    assert!(
        landed.is_empty(),
        "written outside the workspace: {landed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_rules_see_through_wrappers_and_refuse_what_they_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    std::fs::write(ws.join("keep.txt"), "kept\n").unwrap();
    let lines = [
        ("xargs", "echo keep.txt | xargs rm -f"),
        ("shell", "bash -c 'rm -f keep.txt'"),
        ("timeout", "timeout 5 rm -f keep.txt"),
        ("keyword", "if true; then rm -f keep.txt; fi"),
        ("find", "find . -name keep.txt -delete"),
        ("long-option", "echo keep.txt | xargs --max-args 1 rm -f"),
        ("piped-shell", "echo 'rm -f keep.txt' | bash"),
        ("flock", "flock /dev/null rm -f keep.txt"),
        (
            "interpreter",
            "python3 -c 'import os; os.system(\"rm -f keep.txt\")'",
        ),
        ("expanded", "set -- rm -f keep.txt; \"$@\""),
        ("glob", "/bin/r? -f keep.txt"),
        (
            "alias",
            "shopt -s expand_aliases\nalias r=rm\nr -f keep.txt",
        ),
        ("sourced", "printf 'r''m -f keep.txt' > s.sh; . ./s.sh"),
    ];
    let calls: Vec<(&str, &str, Value)> = lines
        .iter()
        .map(|(id, line)| (*id, "Bash", json!({ "command": line })))
        .collect();
    // A rule of a dozen stars against a 100 000-character command: matched at
    // once (by backtracking it would not end).
    let long = format!("echo {}", "a".repeat(100_000));
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&calls),
        Reply::tool_calls(&[("long", "Bash", json!({ "command": long }))]),
        Reply::text("done"),
    ])
    .await;
    let stars = format!("Bash(echo {}b)", "a*".repeat(12));
    let args = [
        BYPASS[0],
        BYPASS[1],
        "--disallowedTools",
        "Bash(rm:*)",
        "--disallowedTools",
        stars.as_str(),
        "delete it",
    ];
    let out = run_on(&mock, &ws, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for (id, _) in &lines[..9] {
        let said = result(&mock, id);
        assert!(said.contains("a deny rule"), "{id}: {said}");
    }
    for (id, _) in &lines[9..] {
        let said = result(&mock, id);
        assert!(said.contains("cannot be read well enough"), "{id}: {said}");
    }
    assert_eq!(
        std::fs::read_to_string(ws.join("keep.txt")).unwrap(),
        "kept\n"
    );
    let long = result(&mock, "long");
    assert!(
        long.starts_with(&"a".repeat(1000)),
        "{}",
        &long[..200.min(long.len())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_rule_holds_against_a_link_and_a_search() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    std::fs::write(ws.join(".env"), "SECRET=hunter2\n").unwrap();
    std::os::unix::fs::symlink(".env", ws.join("notes.txt")).unwrap();
    std::fs::write(ws.join("open.txt"), "nothing here\n").unwrap();
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[
            ("read", "Read", json!({"file_path": "notes.txt"})),
            (
                "grep",
                "Grep",
                json!({"pattern": "SECRET", "output_mode": "content"}),
            ),
            ("glob", "Glob", json!({"pattern": "*"})),
            ("ls", "Ls", json!({})),
        ]),
        Reply::text("done"),
    ])
    .await;
    let args = [
        BYPASS[0],
        BYPASS[1],
        "--disallowedTools",
        "Read(./.env)",
        "look",
    ];
    let out = run_on(&mock, &ws, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(result(&mock, "read").contains("a deny rule"));
    for id in ["grep", "glob", "ls"] {
        let said = result(&mock, id);
        assert!(
            !said.contains("hunter2") && !said.contains(".env"),
            "{id}: {said}"
        );
    }
    assert!(result(&mock, "glob").contains("open.txt"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_html_a_doubling_multi_edit_and_a_huge_retry_after_end_the_turn_not_the_process() {
    // A page of 5 000 nested <div>s, served on loopback.
    let page = format!(
        "<html><body>{}the deep text{}</body></html>",
        "<div>".repeat(5000),
        "</div>".repeat(5000)
    );
    let app = axum::Router::new().route(
        "/deep",
        axum::routing::get(move || {
            let page = page.clone();
            async move { ([("content-type", "text/html")], page) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    std::fs::write(ws.join("grow.txt"), "x".repeat(64)).unwrap();
    let doubling: Vec<Value> = (0..40)
        .map(|i| {
            let (old, new) = if i % 2 == 0 { ("x", "yy") } else { ("y", "xx") };
            json!({"old_string": old, "new_string": new, "replace_all": true})
        })
        .collect();
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[
            (
                "fetch",
                "WebFetch",
                json!({"url": format!("http://127.0.0.1:{port}/deep"), "prompt": "read"}),
            ),
            ("read", "Read", json!({"file_path": "grow.txt"})),
        ]),
        Reply::tool_calls(&[(
            "grow",
            "MultiEdit",
            json!({"file_path": "grow.txt", "edits": doubling}),
        )]),
        Reply::text("survived"),
        // The next run: an answer the server says to retry after 1e20 seconds.
        Reply::Status {
            status: 429,
            headers: vec![("retry-after".into(), "1e20".into())],
            body: json!({"error": {"message": "slow down", "type": "rate_limit_error"}})
                .to_string(),
        },
    ])
    .await;
    let mut args = BYPASS.to_vec();
    args.push("go");
    let out = run_on(&mock, &ws, &args, &[]).await;
    server.abort();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "survived\n");
    assert!(result(&mock, "fetch").contains("the deep text"));
    assert!(result(&mock, "grow").contains("over the limit"));
    assert_eq!(
        std::fs::read_to_string(ws.join("grow.txt")).unwrap(),
        "x".repeat(64)
    );
    let out = run_on(&mock, &ws, &["--max-attempts", "1", "again"], &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(
        said.contains("slow down") && !said.contains("panic"),
        "{said}"
    );
}
