//! The MCP client against the real servers from npm (`@modelcontextprotocol/
//! server-everything` and `server-filesystem`, pinned in
//! `tests/support/mcp-servers.sh`, which these tests run to install them once):
//! the tools listed and offered as `mcp__server__tool`, calls with arguments, an
//! `isError` result, permission gating of tools that are not read-only, the
//! workspace's trust, a server killed mid-call and restarted, servers that do
//! not start, a streamable-HTTP server, a role's own servers and its `mcp__`
//! entries, and `orchestrate mcp list`.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

use crate::cli::{command_on, orchestrate, run_on, text};
use crate::support::harness::{DEADLINE, tool_names, tool_results};
use crate::support::mock_llm::{MockLlm, Recorded, Reply};

/// Where the npm servers are installed (once per test binary, by the script).
fn servers() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-servers");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/mcp-servers.sh");
        let status = std::process::Command::new(script)
            .arg(&dir)
            .status()
            .expect("tests/support/mcp-servers.sh could not run");
        assert!(
            status.success(),
            "installing the MCP servers from npm failed"
        );
        dir
    })
}

fn bin(name: &str) -> String {
    servers()
        .join("node_modules/.bin")
        .join(name)
        .display()
        .to_string()
}

fn write(dir: &Path, file: &str, text: &str) {
    let path = dir.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A workspace whose `.mcp.json` defines `servers`.
fn workspace(servers: &Value) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        ".mcp.json",
        &serde_json::to_string_pretty(&json!({ "mcpServers": servers })).unwrap(),
    );
    dir
}

/// The results the model got so far, by call id.
fn results(request: &Recorded) -> std::collections::HashMap<String, String> {
    tool_results(request).into_iter().collect()
}

fn answered(request: &Recorded, id: &str) -> bool {
    results(request).contains_key(id)
}

/// A model that makes each turn's calls in order (a turn is made once none of
/// its calls has a result yet), then answers `answer`.
async fn scripted(
    turns: Vec<Vec<(&'static str, &'static str, Value)>>,
    answer: &'static str,
) -> MockLlm {
    MockLlm::start_with(move |request, _| {
        for calls in &turns {
            if !answered(request, calls[0].0) {
                return Reply::tool_calls(calls);
            }
        }
        Reply::text(answer)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_offered_called_with_arguments_and_errors_come_back_as_errors() {
    let mock = scripted(
        vec![
            vec![
                ("sum", "mcp__everything__get-sum", json!({"a": 2, "b": 3})),
                (
                    "echo",
                    "mcp__everything__echo",
                    json!({"message": "hi there"}),
                ),
            ],
            vec![(
                "bad",
                "mcp__everything__get-sum",
                json!({"a": "two", "b": 3}),
            )],
            vec![(
                "gated",
                "mcp__everything__toggle-simulated-logging",
                json!({}),
            )],
        ],
        "done",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    // The server leaves a process of its own behind, as `npx` leaves `node`.
    let left = dir.path().join("left");
    write(
        dir.path(),
        ".mcp.json",
        &json!({"mcpServers": {"everything": {
            "command": "sh",
            "args": ["-c", format!(
                "sleep 600 & echo $! > {}; echo $$ >> {}; exec {}",
                left.display(),
                pids.display(),
                bin("mcp-server-everything")
            )],
        }}})
        .to_string(),
    );
    // A server's word that a tool changes nothing is not a permission: the
    // calls that run unasked are those an allow rule names.
    let allowed = "mcp__everything__echo,mcp__everything__get-sum";
    let args = ["--trust-workspace", "--allowedTools", allowed, "add"];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "done\n");
    let requests = mock.requests();
    let first = &requests[0];
    let names = tool_names(first);
    for tool in [
        "Read",
        "mcp__everything__echo",
        "mcp__everything__get-sum",
        "mcp__everything__toggle-simulated-logging",
    ] {
        assert!(names.iter().any(|n| n == tool), "{tool} not in {names:?}");
    }
    let echo = first.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "mcp__everything__echo")
        .unwrap();
    assert_eq!(
        echo["function"]["parameters"]["properties"]["message"]["type"],
        "string"
    );
    assert!(echo["function"]["parameters"].get("$schema").is_none());
    let last = results(requests.last().unwrap());
    assert_eq!(last["sum"], "The sum of 2 and 3 is 5.");
    assert_eq!(last["echo"], "Echo: hi there");
    // The server's own validation error, as an error result the model can read.
    // (an `isError` result: a JSON-RPC error would read "answered with an error").
    assert!(
        last["bad"].starts_with(
            "Error: MCP error -32602: Input validation error: Invalid arguments for tool get-sum"
        ),
        "{}",
        last["bad"]
    );
    // Not read-only: gated like any tool with effects (nobody to ask here).
    assert!(
        last["gated"].contains("permission denied"),
        "{}",
        last["gated"]
    );
    // The server's program is gone with the run.
    // (Dead, or a zombie waiting for init to reap it: killed either way.)
    for file in [&pids, &left] {
        let pid: u32 = std::fs::read_to_string(file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let running = state
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'));
        assert!(!running, "pid {pid} outlived the run: {state}");
    }
}

/// The everything server, started so that it appends its pid to `pids` (exec
/// keeps the pid).
fn recording_pid(pids: &Path) -> Value {
    json!({
        "command": "sh",
        "args": ["-c", format!("echo $$ >> {}; exec {}", pids.display(), bin("mcp-server-everything"))],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repositorys_servers_need_the_workspaces_trust_which_is_remembered() {
    let mock = MockLlm::start_with(|_, _| Reply::text("ok")).await;
    let dir = workspace(&json!({"everything": {"command": bin("mcp-server-everything")}}));
    // Nobody to ask, no flag: refused before anything starts.
    let out = run_on(&mock, dir.path(), &["task"], &[]).await;
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("this workspace starts MCP servers it is not trusted to start: everything")
            && err.contains("--trust-workspace"),
        "{err}"
    );
    assert_eq!(mock.request_count(), 0);
    // The flag trusts it, and the user's file remembers exactly what was trusted.
    let out = run_on(&mock, dir.path(), &["--trust-workspace", "task"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let config =
        std::fs::read_to_string(dir.path().join(".config/orchestrate/config.toml")).unwrap();
    assert!(
        config.contains(&format!("everything: {}", bin("mcp-server-everything"))),
        "{config}"
    );
    let out = run_on(&mock, dir.path(), &["task"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        tool_names(mock.requests().last().unwrap()).contains(&"mcp__everything__echo".to_owned())
    );
    // A changed command is a new server: asked about again.
    write(
        dir.path(),
        ".mcp.json",
        &json!({"mcpServers": {"everything": {"command": bin("mcp-server-everything"), "args": ["stdio"]}}})
            .to_string(),
    );
    let out = run_on(&mock, dir.path(), &["task"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    // The user's own servers need no trust.
    std::fs::remove_file(dir.path().join(".mcp.json")).unwrap();
    write(
        dir.path(),
        ".config/orchestrate/mcp.json",
        &json!({"mcpServers": {"mine": {"command": bin("mcp-server-everything")}}}).to_string(),
    );
    let out = run_on(&mock, dir.path(), &["task"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(tool_names(mock.requests().last().unwrap()).contains(&"mcp__mine__echo".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_do_not_start_are_warnings_and_the_run_goes_on() {
    let mock = MockLlm::start_with(|_, _| Reply::text("fine")).await;
    let dir = workspace(&json!({
        "missing": {"command": "/nonexistent/mcp-server"},
        "nodir": {"command": bin("mcp-server-filesystem"), "args": ["/nonexistent/dir"]},
        "files": {"command": bin("mcp-server-filesystem"), "args": ["."]},
    }));
    let out = run_on(&mock, dir.path(), &["--trust-workspace", "task"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "fine\n");
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "orchestrate: warning: MCP server \"missing\" did not start: cannot run \"/nonexistent/mcp-server\": no such program; the run goes on without it\n"
        ),
        "{err}"
    );
    assert!(
        err.contains(
            "orchestrate: warning: MCP server \"nodir\" did not start: exited with status 1 before it answered: Error: None of the specified directories are accessible; the run goes on without it\n"
        ),
        "{err}"
    );
    let names = tool_names(&mock.requests()[0]);
    assert!(
        names.contains(&"mcp__files__read_text_file".to_owned()),
        "{names:?}"
    );
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("mcp__missing") || n.starts_with("mcp__nodir"))
    );
}

/// Runs the binary with `--json` and returns the child and its event lines.
fn spawn_json(
    mock: &MockLlm,
    dir: &Path,
    args: &[&str],
) -> (
    tokio::process::Child,
    tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) {
    let mut all = vec!["--json", "--trust-workspace"];
    all.extend_from_slice(args);
    let mut cmd = command_on(mock, dir, &all, &[]);
    cmd.stdout(std::process::Stdio::piped());
    cmd.stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_call_fails_that_call_and_is_restarted() {
    let mock = scripted(
        vec![
            vec![(
                "long",
                "mcp__everything__trigger-long-running-operation",
                json!({"duration": 600, "steps": 600}),
            )],
            vec![("after", "mcp__everything__echo", json!({"message": "back"}))],
        ],
        "survived",
    )
    .await;
    // The server writes its pid where the test can find it (exec keeps the pid).
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    write(
        dir.path(),
        ".mcp.json",
        &json!({"mcpServers": {"everything": recording_pid(&pids)}}).to_string(),
    );
    let (mut child, mut lines) = spawn_json(
        &mock,
        dir.path(),
        &["--allowedTools", "mcp__everything", "go"],
    );
    let run = async {
        // The long call is running: kill the server under it.
        while let Some(line) = lines.next_line().await.unwrap() {
            let event: Value = serde_json::from_str(&line).unwrap();
            if event["type"] == "tool_started" {
                break;
            }
        }
        let first = std::fs::read_to_string(&pids).unwrap();
        let pid: i32 = first.trim().parse().unwrap();
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
        while lines.next_line().await.unwrap().is_some() {}
        child.wait().await.unwrap()
    };
    let status = tokio::time::timeout(DEADLINE, run)
        .await
        .expect("the run did not end");
    assert_eq!(status.code(), Some(0));
    let last = results(mock.requests().last().unwrap());
    assert!(
        last["long"].ends_with(
            "MCP server \"everything\" crashed during this call (was killed by signal 9); it is being restarted, and the call was not completed"
        ),
        "{}",
        last["long"]
    );
    // The next call went to the restarted server.
    assert_eq!(last["after"], "Echo: back");
    let started = std::fs::read_to_string(&pids).unwrap();
    assert_eq!(started.lines().count(), 2, "{started}");
    // Its stderr went to its log (twice started), never to the terminal.
    let log = std::fs::read_to_string(
        crate::support::harness::state(dir.path())
            .mcp_logs()
            .join("everything.log"),
    )
    .unwrap();
    assert_eq!(
        log.matches("Starting default (STDIO) server").count(),
        2,
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_server_is_reached_at_its_url() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = std::process::Command::new(bin("mcp-server-everything"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Ready once it says it listens.
    let mut stderr = std::io::BufReader::new(server.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening on port") {
        line.clear();
        assert_ne!(stderr.read_line(&mut line).unwrap(), 0, "the server exited");
    }
    let mock = scripted(
        vec![vec![(
            "e",
            "mcp__remote__echo",
            json!({"message": "over http"}),
        )]],
        "done",
    )
    .await;
    let dir = workspace(&json!({"remote": {
        "type": "http",
        "url": format!("http://127.0.0.1:{port}/mcp"),
        "headers": {"X-Trace": "${TRACE_ID:-none}"},
    }}));
    let args = ["--trust-workspace", "--allowedTools", "mcp__remote", "go"];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let last = results(mock.requests().last().unwrap());
    assert_eq!(last["e"], "Echo: over http");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roles_own_servers_and_its_mcp_entries_decide_what_it_is_offered() {
    let mock = MockLlm::start_with(|_, _| Reply::text("ok")).await;
    let dir = workspace(&json!({"shared": {"command": bin("mcp-server-everything")}}));
    // The lead names one tool of the shared server and defines a server of its own.
    write(
        dir.path(),
        "agents/orchestrator.md",
        &format!(
            "---\nname: orchestrator\ndescription: Leads.\ntools: Read, mcp__shared__echo\n\
             mcpServers:\n  - shared\n  - own:\n      command: {}\n      args: [\".\"]\n---\nLead.\n",
            bin("mcp-server-filesystem")
        ),
    );
    let out = run_on(&mock, dir.path(), &["--trust-workspace", "go"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("Secure MCP Filesystem"),
        "{}",
        text(&out.stderr)
    );
    let show = orchestrate(dir.path(), &["agents", "show", "orchestrator"], &[]).await;
    assert!(
        text(&show.stdout).contains("mcpServers:     shared, own (its own)\n"),
        "{}",
        text(&show.stdout)
    );
    let names = tool_names(&mock.requests()[0]);
    assert!(names.contains(&"mcp__shared__echo".to_owned()), "{names:?}");
    assert!(
        !names.contains(&"mcp__shared__get-sum".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"mcp__own__list_directory".to_owned()),
        "{names:?}"
    );
    assert!(!names.contains(&"Bash".to_owned()), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_list_shows_each_server_whether_it_starts_and_its_tools() {
    let dir = workspace(&json!({
        "everything": {"command": bin("mcp-server-everything")},
        "missing": {"command": "/nonexistent/mcp-server"},
    }));
    // Not trusted and nobody to ask: listed, not started.
    let out = orchestrate(dir.path(), &["mcp", "list"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.contains("  not started: this workspace is not trusted to start it"),
        "{shown}"
    );
    let out = orchestrate(dir.path(), &["--trust-workspace", "mcp", "list"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    let ws = dir.path().canonicalize().unwrap();
    assert!(
        shown.starts_with(&format!(
            "everything  ({}/.mcp.json)\n  {}\n  started: 13 tools\n    mcp__everything__echo  (says it is read-only; gated all the same)  Echoes back the input string\n",
            ws.display(),
            bin("mcp-server-everything")
        )),
        "{shown}"
    );
    assert!(
        shown.contains("missing  (")
            && shown.contains(
                "  did not start: cannot run \"/nonexistent/mcp-server\": no such program\n"
            ),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_progress_notifications_are_told_as_the_calls_output() {
    let mock = MockLlm::start_with(|request, _| match request.results() {
        0 => Reply::tool_calls(&[(
            "long",
            "mcp__everything__trigger-long-running-operation",
            json!({ "duration": 0.9, "steps": 3 }),
        )]),
        _ => Reply::text("done"),
    })
    .await;
    let dir = workspace(&json!({ "everything": { "command": bin("mcp-server-everything") } }));
    let args = [
        "--trust-workspace",
        "--permission-mode",
        "bypassPermissions",
        "--json",
        "go",
    ];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let finished = events
        .iter()
        .position(|e| e["type"] == "tool_finished" && e["call_id"] == "long")
        .expect("the call finished");
    let told: Vec<(usize, &str)> = (events.iter().enumerate())
        .filter(|(_, e)| e["type"] == "tool_output" && e["call_id"] == "long")
        .map(|(i, e)| (i, e["text"].as_str().unwrap()))
        .collect();
    let texts: Vec<&str> = told.iter().map(|(_, t)| *t).collect();
    // The last notification and the result leave the server together: which
    // is handled first is the client's scheduling, so only the earlier ones
    // (300 ms apart) are sure to be told while the call runs.
    assert!(texts.starts_with(&["[1/3]\n", "[2/3]\n"]), "{told:?}");
    assert!(texts.len() <= 3, "{told:?}");
    assert!(
        told.iter().all(|(i, _)| *i < finished),
        "told before the call ended"
    );
    let result = tool_results(&mock.requests()[1]).pop().unwrap().1;
    assert!(
        result.contains("Long running operation completed"),
        "{result}"
    );
}
