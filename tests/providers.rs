//! Provider selection through the real binary: Anthropic chosen by its key, a role
//! whose alias leads to another provider, an undeclared alias, and record then
//! replay of a fan-out (the same lifecycle, the same files, no network), with the
//! message a divergent replay gives.

use std::path::Path;

use serde_json::{Value, json};

use crate::cli::{orchestrate, run_on, text};
use crate::support::harness::TEST_KEY;
use crate::support::mock_llm::{MockLlm, Recorded, Reply, anthropic_stream};

fn mock_root(mock: &MockLlm) -> String {
    mock.base_url().trim_end_matches("/v1").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_key_picks_anthropic_and_the_request_goes_to_messages() {
    let mock = MockLlm::start(vec![anthropic_stream(
        &[json!({"type": "text", "text": "Hello from Claude."})],
        "end_turn",
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let root = mock_root(&mock);
    let out = orchestrate(
        dir.path(),
        &[
            "--agent",
            "explorer",
            "--model",
            "claude-test",
            "-q",
            "say hello",
        ],
        &[
            ("ANTHROPIC_API_KEY", TEST_KEY),
            ("ANTHROPIC_BASE_URL", &root),
        ],
    )
    .await;
    assert_eq!(text(&out.stderr), "");
    assert_eq!(text(&out.stdout), "Hello from Claude.\n");
    assert_eq!(out.status.code(), Some(0));
    let request = &mock.requests()[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.api_key.as_deref(), Some(TEST_KEY));
    assert_eq!(request.body["model"], "claude-test");
    assert!(
        request.body["system"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("You are a code explorer.")
    );
}

fn write_role(dir: &Path, name: &str, front: &str, body: &str) {
    std::fs::write(
        dir.join(format!("{name}.md")),
        format!("---\nname: {name}\ndescription: The {name}.\n{front}---\n{body}\n"),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_naming_an_undeclared_alias_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let roles = dir.path().join("roles");
    std::fs::create_dir(&roles).unwrap();
    write_role(&roles, "coder", "model: fastest\n", "You code.");
    let roles_arg = roles.to_str().unwrap();
    let out = orchestrate(
        dir.path(),
        &[
            "--agents-dir",
            roles_arg,
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "task",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        format!(
            "orchestrate: {}: model \"fastest\" is not a known alias (known: haiku, opus, sonnet); name a model id, or declare the alias under [models] in orchestrate.toml\n",
            roles.join("coder.md").display()
        )
    );
}

/// Role files for a `lead` and a `worker` whose frontmatter adds `worker_front`.
fn lead_and_worker(dir: &Path, worker_front: &str) -> std::path::PathBuf {
    let roles = dir.join("roles");
    std::fs::create_dir(&roles).unwrap();
    write_role(&roles, "lead", "", "You lead.");
    write_role(&roles, "worker", worker_front, "You work.");
    roles
}

/// Runs the `lead` role of `roles` on the mock (OpenAI-compatible, model `m`),
/// printing only its answer.
async fn run_lead(mock: &MockLlm, workspace: &Path, roles: &Path) -> std::process::Output {
    let roles = roles.to_str().unwrap();
    let args = ["--agents-dir", roles, "--agent", "lead", "-q", "go"];
    run_on(mock, workspace, &args, &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_alias_can_lead_to_another_provider() {
    let mock = MockLlm::start_with(|request: &Recorded, _| {
        if request.path == "/v1/messages" {
            return anthropic_stream(
                &[json!({"type": "text", "text": "done by claude"})],
                "end_turn",
            );
        }
        let answered = request.body["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        if answered {
            return Reply::text("the worker said: done by claude");
        }
        let args = json!({"description": "work", "prompt": "Do it.", "subagent_type": "worker"});
        Reply::tool_calls(&[("t1", "Task", args)])
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let roles = lead_and_worker(dir.path(), "model: fast\n");
    std::fs::write(
        dir.path().join("orchestrate.toml"),
        format!(
            "[providers.claude]\nkind = \"anthropic\"\nbase_url = \"{}\"\n\n[models]\nfast = {{ provider = \"claude\", model = \"claude-fast\" }}\n",
            mock_root(&mock)
        ),
    )
    .unwrap();
    // The workspace's file sends requests to a server of its own: it must be trusted.
    let roles = roles.to_str().unwrap();
    let args = [
        "--agents-dir",
        roles,
        "--agent",
        "lead",
        "-q",
        "--trust-workspace",
        "go",
    ];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(text(&out.stderr), "");
    assert_eq!(text(&out.stdout), "the worker said: done by claude\n");
    let paths: Vec<(String, Value)> = mock
        .requests()
        .iter()
        .map(|r| (r.path.clone(), r.body["model"].clone()))
        .collect();
    assert_eq!(
        paths,
        [
            ("/v1/chat/completions".to_owned(), json!("m")),
            ("/v1/messages".to_owned(), json!("claude-fast")),
            ("/v1/chat/completions".to_owned(), json!("m")),
        ]
    );
}

/// A lead that hands three files to three workers, each of which writes its file
/// and reports.
async fn fan_out_mock() -> MockLlm {
    MockLlm::start_with(|request: &Recorded, _| {
        let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
        let system = messages[0]["content"].as_str().unwrap_or_default();
        let answered = messages.iter().any(|m| m["role"] == "tool");
        if system.starts_with("You write") {
            if answered {
                return Reply::text("written");
            }
            let file = messages[1]["content"].as_str().unwrap().to_owned();
            let args = json!({"file_path": file, "content": format!("{file} by a worker\n")});
            return Reply::tool_calls(&[("w1", "Write", args)]);
        }
        if answered {
            return Reply::text("all three written");
        }
        let calls: Vec<(String, Value)> = ["a.txt", "b.txt", "c.txt"]
            .iter()
            .enumerate()
            .map(|(i, f)| {
                (
                    format!("task_{i}"),
                    json!({"description": format!("write {f}"), "prompt": f, "subagent_type": "writer"}),
                )
            })
            .collect();
        let calls: Vec<(&str, &str, Value)> = calls
            .iter()
            .map(|(id, args)| (id.as_str(), "Task", args.clone()))
            .collect();
        Reply::tool_calls(&calls)
    })
    .await
}

fn team(dir: &Path) -> String {
    let roles = dir.join("roles");
    std::fs::create_dir(&roles).unwrap();
    write_role(&roles, "lead", "", "You lead.");
    write_role(
        &roles,
        "writer",
        "tools: Write\n",
        "You write the file you are given.",
    );
    roles.to_str().unwrap().to_owned()
}

/// What a run did, comparable across runs: each agent's lifecycle events (no ids,
/// no times, no progress), sorted, and the files it left.
fn lifecycle(stdout: &str) -> Vec<String> {
    let mut seen: Vec<String> = stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| !matches!(e["type"].as_str(), Some("text_delta" | "reasoning_delta")))
        .map(|e| {
            let detail = e["name"].as_str().or(e["outcome"].as_str()).unwrap_or("");
            format!(
                "{} {} {detail}",
                e["agent"].as_str().unwrap(),
                e["type"].as_str().unwrap()
            )
        })
        .collect();
    seen.sort();
    seen
}

fn files(dir: &Path) -> Vec<(String, String)> {
    ["a.txt", "b.txt", "c.txt"]
        .iter()
        .map(|f| {
            let content = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
            ((*f).to_owned(), content)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_fan_out_replays_with_the_same_lifecycle_and_files_and_no_network() {
    let mock = fan_out_mock().await;
    let recorded_dir = tempfile::tempdir().unwrap();
    let cassette = recorded_dir.path().join("run.cassette.jsonl");
    let cassette_arg = cassette.to_str().unwrap().to_owned();
    let roles = team(recorded_dir.path());
    let common = [
        "--agent",
        "lead",
        "--permission-mode",
        "bypassPermissions",
        "--json",
    ];
    let mut args = vec!["--agents-dir", &roles];
    args.extend(common);
    args.extend(["--record", &cassette_arg, "write the files"]);
    let recorded = run_on(
        &mock,
        recorded_dir.path(),
        &args,
        &[("OPENAI_API_KEY", TEST_KEY)],
    )
    .await;
    assert_eq!(
        recorded.status.code(),
        Some(0),
        "{}",
        text(&recorded.stderr)
    );
    assert_eq!(mock.request_count(), 8);
    let lines = std::fs::read_to_string(&cassette).unwrap();
    assert_eq!(lines.lines().count(), 8);
    assert!(!lines.contains(TEST_KEY), "a key reached the cassette");
    let mut places: Vec<String> = lines
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["place"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    places.sort();
    assert_eq!(
        places,
        [
            "lead/turn 1",
            "lead/turn 2",
            "lead/writer#task_0/turn 1",
            "lead/writer#task_0/turn 2",
            "lead/writer#task_1/turn 1",
            "lead/writer#task_1/turn 2",
            "lead/writer#task_2/turn 1",
            "lead/writer#task_2/turn 2",
        ]
    );
    drop(mock);

    let replay_dir = tempfile::tempdir().unwrap();
    let roles = team(replay_dir.path());
    let mut args = vec!["--agents-dir", roles.as_str()];
    args.extend(common);
    args.extend(["--replay", &cassette_arg, "write the files"]);
    let replayed = orchestrate(replay_dir.path(), &args, &[]).await;
    assert_eq!(
        replayed.status.code(),
        Some(0),
        "{}",
        text(&replayed.stderr)
    );
    assert_eq!(
        lifecycle(&text(&replayed.stdout)),
        lifecycle(&text(&recorded.stdout))
    );
    assert_eq!(files(replay_dir.path()), files(recorded_dir.path()));
    assert_eq!(files(replay_dir.path())[0].1, "a.txt by a worker\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_cassette_does_not_hold_fails_naming_what_was_expected() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("short.jsonl");
    // The recording ends after the lead's first turn asked for a tool.
    let first = json!({
        "place": "lead/turn 1",
        "protocol": "openai",
        "request": {},
        "status": 200,
        "response": "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"Glob\",\"arguments\":\"{\\\"pattern\\\":\\\"*.md\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n",
    });
    std::fs::write(&cassette, format!("{first}\n")).unwrap();
    let roles = team(dir.path());
    let out = orchestrate(
        dir.path(),
        &[
            "--agents-dir",
            &roles,
            "--agent",
            "lead",
            "-q",
            "--replay",
            cassette.to_str().unwrap(),
            "go",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "orchestrate: replay: the cassette holds no request at \"lead/turn 2\"; sent 4 messages, the last tool result \"No files found\"; the cassette expected: nothing more (every recorded request was played)\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_run_records_and_replays() {
    let mock = MockLlm::start(vec![
        Reply::Status {
            status: 529,
            headers: Vec::new(),
            body: r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
                .into(),
        },
        anthropic_stream(
            &[json!({"type": "text", "text": "Recorded answer."})],
            "end_turn",
        ),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("claude.jsonl");
    let cassette_arg = cassette.to_str().unwrap();
    let root = mock_root(&mock);
    let args = [
        "--agent",
        "explorer",
        "--model",
        "claude-test",
        "-q",
        "--max-attempts",
        "2",
        "--record",
        cassette_arg,
        "say it",
    ];
    let env = [
        ("ANTHROPIC_API_KEY", TEST_KEY),
        ("ANTHROPIC_BASE_URL", root.as_str()),
    ];
    let recorded = orchestrate(dir.path(), &args, &env).await;
    assert_eq!(
        text(&recorded.stdout),
        "Recorded answer.\n",
        "{}",
        text(&recorded.stderr)
    );
    drop(mock);
    let lines: Vec<Value> = std::fs::read_to_string(&cassette)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary: Vec<(Value, Value, Value)> = lines
        .iter()
        .map(|l| {
            (
                l["place"].clone(),
                l["protocol"].clone(),
                l["status"].clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (json!("explorer/turn 1"), json!("anthropic"), json!(529)),
            (json!("explorer/turn 1"), json!("anthropic"), json!(200)),
        ]
    );
    // The replay retries the recorded overload just as the live run did.
    let replayed = orchestrate(
        dir.path(),
        &[
            "--agent",
            "explorer",
            "-q",
            "--replay",
            cassette_arg,
            "say it",
        ],
        &[],
    )
    .await;
    assert_eq!(text(&replayed.stderr), "");
    assert_eq!(text(&replayed.stdout), "Recorded answer.\n");
    assert_eq!(replayed.status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_a_server_echoes_never_reaches_the_cassette() {
    let body =
        format!(r#"{{"error":{{"message":"bad key {TEST_KEY}","type":"invalid_request_error"}}}}"#);
    let mock = MockLlm::start(vec![Reply::Status {
        status: 401,
        headers: Vec::new(),
        body,
    }])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("c.jsonl");
    let args = [
        "--agent",
        "explorer",
        "--record",
        cassette.to_str().unwrap(),
        "go",
    ];
    let out = run_on(&mock, dir.path(), &args, &[("OPENAI_API_KEY", TEST_KEY)]).await;
    assert_eq!(out.status.code(), Some(1));
    let recorded = std::fs::read_to_string(&cassette).unwrap();
    assert!(!recorded.contains(TEST_KEY), "{recorded}");
    assert!(recorded.contains("bad key [redacted]"), "{recorded}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_code_alias_inherits_when_anthropic_is_not_configured() {
    let mock = MockLlm::start_with(|request: &Recorded, _| {
        let messages = request.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let system = messages[0]["content"].as_str().unwrap_or_default();
        if system.starts_with("You work") {
            return Reply::text("worked");
        }
        if messages.iter().any(|m| m["role"] == "tool") {
            return Reply::text("done");
        }
        let args = json!({"description": "work", "prompt": "Do it.", "subagent_type": "worker"});
        Reply::tool_calls(&[("t1", "Task", args)])
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let roles = lead_and_worker(dir.path(), "model: sonnet\n");
    let out = run_lead(&mock, dir.path(), &roles).await;
    assert_eq!(
        text(&out.stderr),
        format!(
            "orchestrate: warning: {}: model \"sonnet\" is an Anthropic model and Anthropic is not configured (no ANTHROPIC_API_KEY); the role inherits its caller's model\n",
            roles.join("worker.md").display()
        )
    );
    assert_eq!(text(&out.stdout), "done\n");
    let models: Vec<(String, Value)> = mock
        .requests()
        .iter()
        .map(|r| (r.path.clone(), r.body["model"].clone()))
        .collect();
    assert!(
        models
            .iter()
            .all(|(path, model)| path == "/v1/chat/completions" && model == "m"),
        "{models:?}"
    );
}
