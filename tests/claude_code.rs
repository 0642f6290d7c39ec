//! Role files as people write them for Claude Code and Kode, through the real
//! binary: tools orchestrate does not provide are warnings and the role loads;
//! `agents check` lists every problem of every file at once and fails only for
//! files that cannot load; a lead that only delegates (`tools: Task`) has workers
//! with their own roles' tools; `Bash(echo:*)` lets a role run matching commands
//! and nothing else, whatever the permission mode.

use serde_json::json;

use crate::cli::{orchestrate, run_on, text};
use crate::support::harness;
use crate::support::mock_llm::{MockLlm, Recorded, Reply};

const WORKER: &str = "You are a worker.";

fn write_role(dir: &std::path::Path, file: &str, front: &str, body: &str) {
    std::fs::create_dir_all(dir.join("agents")).unwrap();
    std::fs::write(
        dir.join("agents").join(file),
        format!("---\n{front}\n---\n{body}\n"),
    )
    .unwrap();
}

fn is_worker(request: &Recorded) -> bool {
    request.body["messages"][0]["content"]
        .as_str()
        .is_some_and(|s| s.starts_with(WORKER))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_role_loads_with_warnings_and_check_fails_only_for_what_cannot_load() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_str().unwrap();
    write_role(
        dir.path(),
        "reviewer2.md",
        "name: reviewer2\ndescription: Reviews.\ntools: Read, Grep, WebFetch, TodoWrite, NotebookEdit, Bash(git diff:*)",
        "You review.",
    );
    let out = orchestrate(dir.path(), &["agents", "check"], &[("HOME", home)]).await;
    let ws = dir.path().canonicalize().unwrap();
    let path = ws.join("agents/reviewer2.md");
    let path = path.display();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert_eq!(
        text(&out.stdout),
        format!(
            "warning: {path}:4: tool \"NotebookEdit\" is not available here; the role runs without it\n\
             6 roles, no problems\n"
        )
    );
    let list = orchestrate(dir.path(), &["agents", "list"], &[("HOME", home)]).await;
    assert!(
        text(&list.stdout).contains("reviewer2"),
        "{}",
        text(&list.stdout)
    );
    let show = orchestrate(
        dir.path(),
        &["agents", "show", "reviewer2"],
        &[("HOME", home)],
    )
    .await;
    assert!(
        text(&show.stdout).contains("tools:          Read, Grep, WebFetch, TodoWrite, Bash"),
        "{}",
        text(&show.stdout)
    );

    // A file that cannot load is an error; every problem of every file is listed.
    write_role(dir.path(), "broken.md", "name: broken", "");
    write_role(
        dir.path(),
        "other.md",
        "name: other\ndescription: d\ntools: Read, NotebookRead",
        "",
    );
    let out = orchestrate(dir.path(), &["agents", "check"], &[("HOME", home)]).await;
    assert_eq!(out.status.code(), Some(1));
    let shown = text(&out.stdout);
    assert!(
        shown.contains("tool \"NotebookRead\" is not available here"),
        "{shown}"
    );
    assert!(
        shown.contains("tool \"NotebookEdit\" is not available here"),
        "{shown}"
    );
    assert!(
        shown.contains("broken.md:1: description is required"),
        "{shown}"
    );
    assert!(shown.ends_with("1 problem in the role files\n"), "{shown}");
    // `agents show` of the file that did not load says where and why.
    let show = orchestrate(dir.path(), &["agents", "show", "broken"], &[("HOME", home)]).await;
    assert_eq!(show.status.code(), Some(1));
    assert_eq!(
        text(&show.stderr),
        format!(
            "orchestrate: role \"broken\" did not load: {}:1: description is required\n",
            ws.join("agents/broken.md").display()
        )
    );
}

/// A lead that hands one piece to a `worker`, then answers once it has the result.
async fn delegating() -> MockLlm {
    MockLlm::start_with(|request, _| {
        if is_worker(request) {
            return Reply::text("worker done");
        }
        let answered = request.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "tool");
        if answered {
            return Reply::text("lead done");
        }
        let args = json!({"description": "d", "prompt": "look", "subagent_type": "worker"});
        Reply::tool_calls(&[("t1", "Task", args)])
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lead_that_only_delegates_has_workers_with_their_own_tools() {
    let mock = delegating().await;
    let dir = tempfile::tempdir().unwrap();
    write_role(
        dir.path(),
        "orchestrator.md",
        "name: orchestrator\ndescription: Only delegates.\ntools: Task",
        "You delegate.",
    );
    write_role(
        dir.path(),
        "worker.md",
        "name: worker\ndescription: Works.\ntools: Read, Grep, NotebookEdit",
        WORKER,
    );
    let out = run_on(&mock, dir.path(), &["go"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let requests = mock.requests();
    let lead = requests.iter().find(|r| !is_worker(r)).unwrap();
    assert_eq!(
        harness::tool_names(lead),
        ["Task", "TaskOutput", "TaskStop"]
    );
    let worker = requests.iter().find(|r| is_worker(r)).unwrap();
    assert_eq!(harness::tool_names(worker), ["Read", "Grep"]);
}

/// Runs `go` as role `agent` in bypassPermissions mode, which must succeed: only
/// the role's own rules can refuse a call.
async fn run_bypassing(mock: &MockLlm, dir: &std::path::Path, agent: &str) -> std::process::Output {
    let args = [
        "--agent",
        agent,
        "--permission-mode",
        "bypassPermissions",
        "go",
    ];
    let out = run_on(mock, dir, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bash_rule_lets_a_role_run_matching_commands_and_nothing_else() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("b1", "Bash", json!({"command": "echo allowed"}))]),
        Reply::tool_calls(&[(
            "b2",
            "Bash",
            json!({"command": "echo sneaky && touch pwned"}),
        )]),
        Reply::tool_calls(&[("b3", "Bash", json!({"command": "touch pwned"}))]),
        Reply::text("done"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_role(
        dir.path(),
        "echoer.md",
        "name: echoer\ndescription: Echoes.\ntools: Bash(echo:*)",
        "You echo.",
    );
    run_bypassing(&mock, dir.path(), "echoer").await;
    assert!(!dir.path().join("pwned").exists(), "a refused command ran");
    let requests = mock.requests();
    let results: Vec<(String, String)> = harness::tool_results(&requests[3]);
    assert_eq!(results[0].1.trim(), "allowed");
    for (id, content) in &results[1..] {
        assert!(
            content.contains("the echoer role may run only Bash(echo:*)"),
            "{id}: {content}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disallowed_rule_with_a_pattern_refuses_its_calls_and_leaves_the_tool() {
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("b1", "Bash", json!({"command": "echo allowed"}))]),
        Reply::tool_calls(&[("b2", "Bash", json!({"command": "echo x && rm victim"}))]),
        Reply::tool_calls(&[(
            "w1",
            "Write",
            json!({"file_path": ".env", "content": "SECRET=1"}),
        )]),
        // A line the scanner cannot split into its commands: refused too.
        Reply::tool_calls(&[("b3", "Bash", json!({"command": "X=rm; \"$X\" victim"}))]),
        Reply::text("done"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("victim"), "keep me").unwrap();
    write_role(
        dir.path(),
        "cautious.md",
        "name: cautious\ndescription: Careful.\ndisallowedTools: Bash(rm:*), Edit(.env)",
        "You are careful.",
    );
    let out = run_bypassing(&mock, dir.path(), "cautious").await;
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("warning"), "{stderr}");
    assert!(dir.path().join("victim").exists(), "a refused command ran");
    assert!(!dir.path().join(".env").exists(), "a refused write ran");
    let requests = mock.requests();
    let tools = harness::tool_names(&requests[0]);
    assert!(tools.iter().any(|t| t == "Bash"), "{tools:?}");
    assert!(tools.iter().any(|t| t == "Write"), "{tools:?}");
    let results: Vec<(String, String)> = harness::tool_results(&requests[4]);
    assert_eq!(results[0].1.trim(), "allowed");
    for (id, content) in &results[1..3] {
        assert!(
            content.contains(
                "the cautious role's disallowedTools (Bash(rm:*), Edit(.env)) forbid this"
            ),
            "{id}: {content}"
        );
    }
    assert!(
        results[3]
            .1
            .contains("this line cannot be split into its commands"),
        "{:?}",
        results[3]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_files_reach_the_lead_and_its_workers_and_are_named() {
    let mock = delegating().await;
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".claude")).unwrap();
    std::fs::write(
        home.path().join(".claude/CLAUDE.md"),
        "USER: prefer short answers",
    )
    .unwrap();
    let repo = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(repo.path().join(".git")).unwrap();
    std::fs::write(
        repo.path().join("AGENTS.md"),
        "REPO: run cargo test before you finish",
    )
    .unwrap();
    let ws = repo.path().join("app");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("CLAUDE.md"), "APP: never touch migrations/").unwrap();
    write_role(
        &ws,
        "worker.md",
        "name: worker\ndescription: Works.\ntools: Read",
        WORKER,
    );
    let home_dir = home.path().to_str().unwrap();

    let out = run_on(&mock, &ws, &["--json", "go"], &[("HOME", home_dir)]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let requests = mock.requests();
    let lead = requests.iter().find(|r| !is_worker(r)).unwrap();
    let system = lead.body["messages"][0]["content"].as_str().unwrap();
    let (user, repo_at, app) = (
        system
            .find("USER: prefer short answers")
            .expect("the user's file"),
        system
            .find("REPO: run cargo test")
            .expect("the repository's"),
        system.find("APP: never touch").expect("the workspace's"),
    );
    assert!(user < repo_at && repo_at < app, "user first, nearest last");
    // The worker's system prompt starts with its role's and carries the memory.
    let worker = requests
        .iter()
        .find(|r| {
            r.body["messages"][0]["content"]
                .as_str()
                .is_some_and(|s| s.starts_with(WORKER))
        })
        .expect("the worker asked");
    assert!(
        worker.body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("APP: never touch")
    );
    // Each session_started event names the files.
    let started: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["type"] == "session_started")
        .collect();
    assert_eq!(started.len(), 2);
    let ws = ws.canonicalize().unwrap();
    for event in &started {
        let memory: Vec<&str> = event["memory"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap())
            .collect();
        assert_eq!(memory.len(), 3, "{event}");
        assert!(
            memory[2] == ws.join("CLAUDE.md").to_str().unwrap(),
            "{memory:?}"
        );
    }
    let show = orchestrate(&ws, &["agents", "show", "worker"], &[("HOME", home_dir)]).await;
    let card = text(&show.stdout);
    assert!(
        card.contains("memory:         ") && card.contains("AGENTS.md"),
        "{card}"
    );
}

/// A run of one lead turn per call in `commands` (Bash), then an answer, in
/// `dir` with `args`; returns the stderr and the results the model got back.
async fn bash_run(
    dir: &std::path::Path,
    commands: &[&str],
    args: &[&str],
) -> (std::process::Output, Vec<(String, String)>) {
    let mut script: Vec<Reply> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| Reply::tool_calls(&[(&format!("b{i}"), "Bash", json!({ "command": c }))]))
        .collect();
    script.push(Reply::text("done"));
    let mock = MockLlm::start(script).await;
    let mut all = args.to_vec();
    all.push("go");
    let out = run_on(&mock, dir, &all, &[]).await;
    let requests = mock.requests();
    let results = harness::tool_results(requests.last().unwrap());
    (out, results)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_allow_rules_run_matching_commands_without_asking_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    // $HOME is the workspace in these tests: this is the user's own file.
    std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        r#"{"permissions": {"allow": ["Bash(echo:*)"]}}"#,
    )
    .unwrap();
    let (out, results) = bash_run(dir.path(), &["echo ok", "echo ok && touch pwned"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(results[0].1.trim(), "ok");
    assert!(results[1].1.contains("permission denied"), "{results:?}");
    assert!(!dir.path().join("pwned").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_and_ask_rules_hold_even_when_the_mode_bypasses_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--permission-mode",
        "bypassPermissions",
        "--disallowedTools",
        "Bash(rm:*),Write",
    ];
    let (out, results) = bash_run(dir.path(), &["touch a && rm a", "touch b"], &args).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(results[0].1.contains("a deny rule"), "{results:?}");
    assert!(
        !dir.path().join("a").exists(),
        "nothing of a denied line runs"
    );
    assert!(dir.path().join("b").exists());

    // An ask rule asks even in bypass mode; with no terminal the answer is no.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        r#"{"permissions": {"ask": ["Bash(touch:*)"]}}"#,
    )
    .unwrap();
    let (_, results) = bash_run(
        dir.path(),
        &["touch c"],
        &["--permission-mode", "bypassPermissions"],
    )
    .await;
    assert!(results[0].1.contains("permission denied"), "{results:?}");
    assert!(!dir.path().join("c").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repositorys_allow_rules_count_only_in_a_trusted_workspace() {
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        r#"{"permissions": {"allow": ["Bash(touch:*)"]}}"#,
    )
    .unwrap();
    let mock = MockLlm::start(vec![
        Reply::tool_calls(&[("b1", "Bash", json!({ "command": "touch made" }))]),
        Reply::text("done"),
        Reply::tool_calls(&[("b2", "Bash", json!({ "command": "touch made" }))]),
        Reply::text("done"),
    ])
    .await;
    let home_env = [("HOME", home.path().to_str().unwrap())];
    let out = run_on(&mock, dir.path(), &["go"], &home_env).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("its allow rules Bash(touch:*) are ignored"),
        "{}",
        text(&out.stderr)
    );
    assert!(!dir.path().join("made").exists());
    let out = run_on(&mock, dir.path(), &["--trust-workspace", "go"], &home_env).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(dir.path().join("made").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_rule_on_the_command_line_or_a_broken_settings_file_stops_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = orchestrate(dir.path(), &["--allowedTools", "Bash(npm", "go"], &[]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("\"Bash(npm\" is not a permission rule"),
        "{}",
        text(&out.stderr)
    );
    std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
    std::fs::write(dir.path().join(".claude/settings.local.json"), "{oops").unwrap();
    let out = orchestrate(dir.path(), &["go"], &[]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("settings.local.json: not JSON"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_fetch_reads_a_page_as_markdown_where_a_domain_rule_allows_it() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/guide", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = [0; 2048];
            let _ = socket.read(&mut buf).await;
            let body = "<h2>Setup</h2><p>Run <b>make</b>.</p>";
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(reply.as_bytes()).await;
        }
    });
    let script = |url: &str| {
        vec![
            Reply::tool_calls(&[("f1", "WebFetch", json!({"url": url, "prompt": "setup"}))]),
            Reply::text("read"),
        ]
    };
    let dir = tempfile::tempdir().unwrap();
    // Not allowed: with no terminal to ask, it is refused.
    let mock = MockLlm::start(script(&url)).await;
    run_on(&mock, dir.path(), &["go"], &[]).await;
    let refused = harness::tool_results(&mock.requests()[1]);
    assert!(refused[0].1.contains("permission denied"), "{refused:?}");
    // A domain rule allows it.
    let mock = MockLlm::start(script(&url)).await;
    let out = run_on(
        &mock,
        dir.path(),
        &["--allowedTools", "WebFetch(domain:127.0.0.1)", "go"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let fetched = harness::tool_results(&mock.requests()[1]);
    assert!(
        fetched[0].1.contains("## Setup") && fetched[0].1.contains("Run **make**."),
        "{fetched:?}"
    );
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_not_acted_on_are_each_named_once_as_not_supported_yet() {
    let dir = tempfile::tempdir().unwrap();
    // The binary's HOME is the workspace (see `cli::command`): the file is both
    // the person's and the workspace's, and is told of once.
    std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        r#"{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "exit 2"}]}]},
            "permissions": {"allow": [], "defaultMode": "plan"}}"#,
    )
    .unwrap();
    write_role(
        dir.path(),
        "isolated.md",
        "name: isolated\ndescription: d\nisolation: worktree\nbackground: true",
        "x",
    );
    let mock = MockLlm::start(vec![Reply::text("hi")]).await;
    let out = run_on(&mock, dir.path(), &["hello"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    let settings = dir
        .path()
        .canonicalize()
        .unwrap()
        .join(".claude/settings.json");
    assert!(!stderr.contains("hooks is not supported"), "{stderr}");
    for said in [
        format!(
            "{}: permissions.defaultMode is not supported yet and is ignored",
            settings.display()
        ),
        "isolated.md:5: background is not supported yet and is ignored".to_owned(),
    ] {
        assert_eq!(stderr.matches(&said).count(), 1, "{said}\n{stderr}");
    }
    assert!(!stderr.contains("isolation is"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_and_opencode_agent_files_are_roles_and_check_names_a_misspelt_field() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    for (folder, file, text) in [
        (
            ".gemini/agents",
            "scout.md",
            "---\nname: scout\ndescription: Finds things.\ntools: [read_file, grep_search]\nmax_turns: 5\n---\nYou find things.\n",
        ),
        (
            ".opencode/agent",
            "critic.md",
            "---\ndescription: Criticises.\nmode: subagent\ntools:\n  write: false\n---\nYou criticise.\n",
        ),
        (
            ".claude/agents",
            "typo.md",
            "---\nname: typo\ndescription: Misspelt.\nmaxturns: 3\n---\nYou err.\n",
        ),
    ] {
        std::fs::create_dir_all(ws.join(folder)).unwrap();
        std::fs::write(ws.join(folder).join(file), text).unwrap();
    }
    let out = orchestrate(ws, &["agents", "list"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed = text(&out.stdout);
    let line = |name: &str| {
        listed
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in:\n{listed}"))
            .to_owned()
    };
    assert!(
        line("scout").ends_with(".gemini/agents/scout.md]"),
        "{listed}"
    );
    assert!(
        line("critic").ends_with(".opencode/agent/critic.md]"),
        "{listed}"
    );
    let shown = text(
        &orchestrate(ws, &["agents", "show", "critic"], &[])
            .await
            .stdout,
    );
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("disallowed:") && l.contains("Write")),
        "the disallowed tool is named: {shown}"
    );
    let checked = orchestrate(ws, &["agents", "check"], &[]).await;
    let said = text(&checked.stdout);
    assert!(
        said.contains(
            "typo.md:4: maxturns is not a role field and is ignored (did you mean maxTurns?)"
        ),
        "{said}"
    );
}
