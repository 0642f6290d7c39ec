//! Conformance with real captured streams (tests/fixtures/sse, see its INDEX.md):
//! every OpenAI-family stream assembles to exactly its expected JSON, both through
//! the decoder alone and through the real client over HTTP; the in-band error
//! streams yield classified errors.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use orchestrate::llm::StreamDelta;
use orchestrate::llm::openai::decoder::decode_sse_body;
use orchestrate::{
    ChatRequest, ErrorClass, FinishReason, LlmError, Message, Provider, ProviderError, Usage,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::harness;
use crate::support::mock_llm::{MockLlm, Reply};

const FAMILIES: [&str; 5] = ["openai-", "deepseek-", "xai-", "groq-", "mistral-"];

/// The captures whose names start with one of `prefixes`, by name.
pub(crate) fn captures(prefixes: &[&str]) -> Vec<(String, PathBuf)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sse");
    let mut found: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sse"))
        .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), p))
        .filter(|(name, _)| prefixes.iter().any(|f| name.starts_with(f)))
        .collect();
    found.sort();
    found
}

fn fixtures() -> Vec<(String, PathBuf)> {
    let found = captures(&FAMILIES);
    assert_eq!(found.len(), 15, "the OpenAI-family fixtures went missing");
    found
}

/// A capture's expected assembled result.
pub(crate) fn expected(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/sse/expected/{name}.expected.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The expected JSON without the byte-level `sse` section, the protocol's name and
/// the (always empty) undecodable list: what a decoder's report is compared with.
pub(crate) fn decoded_part(mut expected: Value) -> Value {
    let obj = expected.as_object_mut().unwrap();
    for key in ["sse", "undecodable_events", "protocol"] {
        obj.remove(key);
    }
    expected
}

/// [`decoded_part`] without the derived fields of tool calls.
fn comparable(expected: Value) -> Value {
    let mut expected = decoded_part(expected);
    for choice in expected["choices"].as_array_mut().unwrap() {
        for call in choice["tool_calls"].as_array_mut().unwrap() {
            let call = call.as_object_mut().unwrap();
            call.remove("arguments_valid_json");
            call.remove("arguments_parsed");
        }
    }
    expected
}

#[tokio::test]
async fn every_openai_family_stream_decodes_to_its_expected_json() {
    for (name, path) in fixtures() {
        let body = std::fs::read(&path).unwrap();
        let decoder = decode_sse_body(body.into(), 8 << 20).await.unwrap();
        assert_eq!(decoder.report(), comparable(expected(&name)), "{name}");
    }
}

fn expected_usage(expected: &Value) -> Option<Usage> {
    let usage = match &expected["usage"] {
        Value::Null => &expected["x_groq_usage"],
        u => u,
    };
    if usage.is_null() {
        return None;
    }
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    Some(Usage {
        input_tokens: n(&usage["prompt_tokens"]),
        output_tokens: n(&usage["completion_tokens"]),
        cached_tokens: n(&usage["prompt_tokens_details"]["cached_tokens"]),
        cache_write_tokens: 0,
        reasoning_tokens: n(&usage["completion_tokens_details"]["reasoning_tokens"]),
    })
}

fn request() -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages: vec![Message::user("hi")],
        tools: Default::default(),
        max_tokens: None,
        place: String::new(),
    }
}

/// A mock that answers once with the capture at `path`, as a server would.
pub(crate) async fn serve_capture(path: &Path) -> MockLlm {
    MockLlm::start(vec![Reply::Status {
        status: 200,
        headers: vec![("content-type".into(), "text/event-stream".into())],
        body: std::fs::read_to_string(path).unwrap(),
    }])
    .await
}

/// Streams one turn through `client`: the result and the text deltas it reported.
pub(crate) async fn stream_through(
    client: &dyn Provider,
    request: &ChatRequest,
) -> (Result<orchestrate::AssistantTurn, LlmError>, String) {
    let deltas = Mutex::new(String::new());
    let sink = |d: StreamDelta| {
        if let StreamDelta::Text(t) = d {
            deltas.lock().unwrap().push_str(&t);
        }
    };
    let result = client
        .stream_turn(request, &sink, &CancellationToken::new())
        .await;
    (result, deltas.into_inner().unwrap())
}

/// For a capture whose expected report holds an in-band error: checks `result` is
/// that error, classified by its type (the transient types retry; a type the client
/// does not know, such as the bare `error` of one capture, is permanent), and says
/// so. False for any other capture.
pub(crate) fn is_expected_in_band_error(
    name: &str,
    expected: &Value,
    result: &Result<orchestrate::AssistantTurn, LlmError>,
) -> bool {
    let Some(error) = expected["errors"].as_array().unwrap().first() else {
        return false;
    };
    let Err(e @ LlmError::Provider(ProviderError::InBand { kind, message, .. })) = result else {
        panic!("{name}: expected an in-band error, got {result:?}");
    };
    assert_eq!(kind.as_deref(), error["error"]["type"].as_str(), "{name}");
    assert_eq!(
        Some(message.as_str()),
        error["error"]["message"].as_str(),
        "{name}"
    );
    let class = match kind.as_deref() {
        Some("server_error" | "overloaded_error") => ErrorClass::Retryable { after: None },
        _ => ErrorClass::Permanent,
    };
    assert_eq!(e.class(), class, "{name}: {kind:?}");
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_openai_family_stream_assembles_through_the_client_over_http() {
    for (name, path) in fixtures() {
        let mock = serve_capture(&path).await;
        let client = harness::client(&mock, std::time::Duration::from_secs(5));
        let (result, deltas) = stream_through(client.as_ref(), &request()).await;
        let expected = expected(&name);
        if is_expected_in_band_error(&name, &expected, &result) {
            continue;
        }
        let turn = result.unwrap_or_else(|e| panic!("{name}: {e}"));
        let choice = &expected["choices"][0];
        let reasoning = choice["reasoning_content"]
            .as_str()
            .or(choice["reasoning"].as_str())
            .unwrap_or("");
        assert_eq!(
            turn.message.text,
            choice["content"].as_str().unwrap(),
            "{name}"
        );
        assert_eq!(deltas, turn.message.text, "{name}: deltas");
        assert_eq!(turn.message.reasoning, reasoning, "{name}");
        assert_eq!(
            turn.message.refusal.as_deref(),
            choice["refusal"].as_str(),
            "{name}"
        );
        let calls: Vec<Value> = turn
            .message
            .tool_calls
            .iter()
            .map(
                |c| json!({"id": c.id, "name": c.name, "arguments": c.parsed_arguments().unwrap()}),
            )
            .collect();
        let want: Vec<Value> = choice["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| json!({"id": c["id"], "name": c["name"], "arguments": c["arguments_parsed"]}))
            .collect();
        assert_eq!(calls, want, "{name}");
        assert_eq!(
            turn.finish,
            choice["finish_reason"]
                .as_str()
                .and_then(FinishReason::from_wire),
            "{name}"
        );
        assert_eq!(turn.usage, expected_usage(&expected), "{name}");
    }
}

#[tokio::test]
async fn the_in_band_error_streams_are_recorded_where_they_happened() {
    for (name, event_index, after_output) in [
        ("openai-error-first-chunk", 0, false),
        ("openai-error-after-output", 1, true),
    ] {
        let body = std::fs::read(format!(
            "{}/tests/fixtures/sse/{name}.sse",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let report = decode_sse_body(body.into(), 8 << 20)
            .await
            .unwrap()
            .report();
        assert_eq!(report["errors"][0]["event_index"], event_index, "{name}");
        assert_eq!(report["errors"][0]["after_output"], after_output, "{name}");
    }
}

#[tokio::test]
async fn a_stream_over_the_size_cap_is_a_permanent_error() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sse/openai-text-obfuscation-usage.sse");
    let body = std::fs::read(path).unwrap();
    let err = decode_sse_body(body.into(), 100).await.unwrap_err();
    assert_eq!(err.to_string(), "answer exceeded the 100-byte cap");
    assert_eq!(err.class(), ErrorClass::Permanent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_non_streaming_path_reads_a_whole_completion() {
    let completion = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-x",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"city\":\"Rome\"}"}}],
        }}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    });
    let mock = MockLlm::start(vec![Reply::Json(completion)]).await;
    let client = harness::client(&mock, std::time::Duration::from_secs(5));
    let turn = client.complete(&request()).await.unwrap();
    assert_eq!(turn.finish, Some(FinishReason::ToolCalls));
    assert_eq!(turn.message.tool_calls[0].arguments, "{\"city\":\"Rome\"}");
    assert_eq!(
        turn.usage,
        Some(Usage {
            input_tokens: 7,
            output_tokens: 3,
            ..Usage::default()
        })
    );
    assert_eq!(mock.requests()[0].body["stream"], false);
}
