//! A sub-agent's life as its caller and the person see it, through the real
//! binary: falling back to another model when its own does not exist or stays
//! overloaded (and never when a key or a request is refused), with the error a
//! parent receives naming what failed.

use serde_json::{Value, json};

use crate::cli::{run_on, text};
use crate::support::harness::tool_results;
use crate::support::mock_llm::{MockLlm, Recorded, Reply};

/// The model a request asked for.
fn model(request: &Recorded) -> &str {
    request.body["model"].as_str().unwrap_or_default()
}

/// A 404 as OpenAI sends it for a model that does not exist.
fn no_such_model() -> Reply {
    Reply::Status {
        status: 404,
        headers: vec![("x-request-id".into(), "req_missing".into())],
        body: json!({ "error": {
            "message": "The model `m` does not exist or you do not have access to it.",
            "type": "invalid_request_error",
            "code": "model_not_found",
        } })
        .to_string(),
    }
}

/// The `--json` events of a run's output.
fn events(stdout: &[u8]) -> Vec<Value> {
    text(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_does_not_exist_falls_back_once_in_the_same_conversation() {
    let mock = MockLlm::start_with(|request, _| match model(request) {
        "m" => no_such_model(),
        _ => Reply::text("answered by the fallback"),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let args = ["--json", "--fallback-model", "m2", "say hi"];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let models: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| model(r).to_owned())
        .collect();
    assert_eq!(models, ["m", "m2"], "no retry of a missing model, one hop");
    let second = &mock.requests()[1];
    let prompt = &second.body["messages"].as_array().unwrap().last().unwrap()["content"];
    assert_eq!(prompt, "say hi", "the same conversation goes on");
    let events = events(&out.stdout);
    let fallback: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "model_fallback")
        .collect();
    assert_eq!(fallback.len(), 1);
    assert_eq!(fallback[0]["from"], "m");
    assert_eq!(fallback[0]["to"], "m2");
    assert_eq!(fallback[0]["reason"], "model_not_found");
    let terminal = events.iter().find(|e| e["type"] == "terminal").unwrap();
    assert_eq!(terminal["outcome"], "completed");

    // Plain lines say so on the agent's line.
    let out = run_on(&mock, dir.path(), &["--fallback-model", "m2", "again"], &[]).await;
    assert_eq!(out.status.code(), Some(0));
    let err = text(&out.stderr);
    assert!(
        err.contains("model m failed (model_not_found): carrying on with m2"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_stays_overloaded_falls_back_after_its_retries() {
    let mock = MockLlm::start_with(|request, _| match model(request) {
        "m" => Reply::status(529, "Overloaded"),
        _ => Reply::text("the fallback answers"),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--json",
        "--max-attempts",
        "3",
        "--retry-base-ms",
        "10",
        "--fallback-model",
        "m2",
        "go",
    ];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let models: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| model(r).to_owned())
        .collect();
    assert_eq!(models, ["m", "m", "m", "m2"]);
    let events = events(&out.stdout);
    let fallback = events
        .iter()
        .find(|e| e["type"] == "model_fallback")
        .unwrap();
    assert_eq!(fallback["reason"], "overloaded");

    // Without a fallback the run fails, naming the model.
    let args = [
        "--quiet",
        "--max-attempts",
        "2",
        "--retry-base-ms",
        "10",
        "go",
    ];
    let out = run_on(&mock, dir.path(), &args, &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "orchestrate: gave up after 2 attempts: HTTP 529: Overloaded\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_never_falls_back_and_the_parent_hears_what_failed() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents");
    std::fs::create_dir(&agents).unwrap();
    std::fs::write(
        agents.join("scout.md"),
        "---\nname: scout\ndescription: Looks around.\nmodel: sub-1\nfallbackModel: m2\n---\nYou look around.\n",
    )
    .unwrap();
    let mock = MockLlm::start_with(|request, _| match (model(request), request.results()) {
        ("sub-1", _) => Reply::Status {
            status: 401,
            headers: vec![("request-id".into(), "req_011CKey".into())],
            body: json!({ "error": { "message": "invalid x-api-key", "type": "authentication_error" } })
                .to_string(),
        },
        ("m", 0) => Reply::tool_calls(&[(
            "call_scout",
            "Task",
            json!({ "description": "look", "prompt": "Look around.", "subagent_type": "scout" }),
        )]),
        ("m", _) => Reply::text("the scout could not run"),
        _ => Reply::text("a fallback was asked"),
    })
    .await;
    let out = run_on(&mock, dir.path(), &["--quiet", "look around"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let requests = mock.requests();
    assert!(
        requests.iter().all(|r| model(r) != "m2"),
        "a 401 never falls back"
    );
    let last = requests.last().unwrap();
    let (_, result) = &tool_results(last)[0];
    let first = result.lines().next().unwrap();
    assert_eq!(first, "failed (auth)", "{result}");
    for part in [
        "HTTP 401",
        "invalid x-api-key",
        "request id req_011CKey",
        "model sub-1",
    ] {
        assert!(result.contains(part), "{part} missing from: {result}");
    }
}
