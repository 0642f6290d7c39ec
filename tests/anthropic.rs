//! Anthropic Messages: every anthropic-* capture in tests/fixtures/sse assembles to
//! exactly its expected JSON (through the decoder, and through the real client over
//! HTTP), and the client behaves against the mock: headers, overload retries, an
//! error event mid-stream, 401, thinking signatures sent back unchanged, a paused
//! turn (`pause_turn`) continued, and the errors that are never retried (billing,
//! size, permission, and a type the client does not know).

use std::path::Path;
use std::time::Duration;

use orchestrate::llm::anthropic::decoder::decode_sse_body;
use orchestrate::{
    ChatRequest, EventKind, FinishReason, Message, Outcome, Provider, ToolRegistry, Usage,
};
use serde_json::{Value, json};

use crate::fixtures::{
    captures, decoded_part, expected, is_expected_in_band_error, serve_capture, stream_through,
};
use crate::support::harness::{self, Lookup, TEST_KEY};
use crate::support::mock_llm::{MockLlm, Reply, anthropic_stream, ev_anthropic};

fn fixtures() -> Vec<(String, std::path::PathBuf)> {
    let found = captures(&["anthropic-"]);
    assert_eq!(found.len(), 10, "the Anthropic fixtures went missing");
    found
}

#[tokio::test]
async fn every_anthropic_stream_decodes_to_its_expected_json() {
    for (name, path) in fixtures() {
        let body = std::fs::read(&path).unwrap();
        let decoder = decode_sse_body(body.into(), 8 << 20).await.unwrap();
        assert_eq!(decoder.report(), decoded_part(expected(&name)), "{name}");
    }
}

fn request() -> ChatRequest {
    ChatRequest {
        model: "claude-test".into(),
        messages: vec![Message::system("Be brief."), Message::user("hi")],
        tools: Default::default(),
        max_tokens: None,
        place: String::new(),
    }
}

/// What the last generation of an expected report amounts to as a turn.
fn expected_turn(expected: &Value) -> Value {
    let message = expected["messages"].as_array().unwrap().last().unwrap();
    let blocks = message["blocks"].as_array().unwrap();
    let join = |kind: &str, key: &str| -> String {
        blocks
            .iter()
            .filter(|b| b["type"] == kind)
            .map(|b| b[key].as_str().unwrap())
            .collect()
    };
    let calls: Vec<Value> = blocks
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .map(|b| {
            let arguments = match &b["input"] {
                Value::Null => b["partial_json"].clone(),
                input => json!(input.to_string()),
            };
            json!({"id": b["id"], "name": b["name"], "arguments": arguments})
        })
        .collect();
    let usage = &message["usage"];
    let n = |key: &str| usage[key].as_u64().unwrap_or(0);
    json!({
        "text": join("text", "text"),
        "reasoning": join("thinking", "thinking"),
        "thinking_blocks": blocks.iter().filter(|b| b["type"] == "thinking").count(),
        "calls": calls,
        "finish": message["stop_reason"].as_str().and_then(FinishReason::from_wire).map(|f| format!("{f:?}")),
        "usage": {
            "input": n("input_tokens") + n("cache_creation_input_tokens") + n("cache_read_input_tokens"),
            "output": n("output_tokens"),
            "cached": n("cache_read_input_tokens"),
        },
    })
}

fn actual_turn(turn: &orchestrate::AssistantTurn) -> Value {
    let usage = turn.usage.unwrap_or_default();
    json!({
        "text": turn.message.text,
        "reasoning": turn.message.reasoning,
        "thinking_blocks": turn.message.thinking.len(),
        "calls": turn.message.tool_calls.iter().map(|c| json!({"id": c.id, "name": c.name, "arguments": c.arguments})).collect::<Vec<_>>(),
        "finish": turn.finish.as_ref().map(|f| format!("{f:?}")),
        "usage": {"input": usage.input_tokens, "output": usage.output_tokens, "cached": usage.cached_tokens},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_anthropic_stream_assembles_through_the_client_over_http() {
    for (name, path) in fixtures() {
        let mock = serve_capture(&path).await;
        let client = harness::anthropic_client(&mock, Duration::from_secs(5));
        let (result, deltas) = stream_through(client.as_ref(), &request()).await;
        let expected = expected(&name);
        if is_expected_in_band_error(&name, &expected, &result) {
            continue;
        }
        let turn = result.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(actual_turn(&turn), expected_turn(&expected), "{name}");
        let recorded = &mock.requests()[0];
        assert_eq!(recorded.path, "/v1/messages");
        assert_eq!(recorded.api_key.as_deref(), Some(TEST_KEY));
        assert_eq!(recorded.anthropic_version.as_deref(), Some("2023-06-01"));
        assert_eq!(
            recorded.authorization, None,
            "the key goes in x-api-key only"
        );
        let spliced = name == "anthropic-spliced-message-start";
        if !spliced {
            assert_eq!(deltas, turn.message.text, "{name}: deltas");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_without_arguments_gets_an_empty_object() {
    let body = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sse/anthropic-tool-no-args.sse"),
    )
    .unwrap();
    let turn = decode_sse_body(body.into(), 8 << 20)
        .await
        .unwrap()
        .into_turn()
        .unwrap();
    assert_eq!(turn.message.tool_calls[0].arguments, "{}");
    assert_eq!(turn.finish, Some(FinishReason::ToolCalls));
}

/// An error response with Anthropic's body shape.
fn raw_status(status: u16, body: &str) -> Reply {
    Reply::Status {
        status,
        headers: Vec::new(),
        body: body.to_owned(),
    }
}

/// One run of a session offering `tools`, on the mock through the Anthropic client:
/// its outcome and events.
async fn anthropic_run(
    mock: &MockLlm,
    tools: ToolRegistry,
    prompt: &str,
) -> (Outcome, Vec<orchestrate::Event>) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = orchestrate::RuntimeConfig::new(
        dir.path(),
        harness::anthropic_client(mock, harness::DEADLINE),
    );
    config.state = Some(harness::state(dir.path()));
    config.retry.base_delay = Duration::from_millis(10);
    let runtime = orchestrate::Runtime::start(config).await.unwrap();
    let session = runtime.start_session(harness::spec(tools)).await.unwrap();
    let (outcome, events) = harness::run(&runtime, session, prompt).await;
    runtime.shutdown().await;
    (outcome, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_529_is_retried_then_the_answer_arrives() {
    let overloaded =
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let mock = MockLlm::start(vec![
        raw_status(529, overloaded),
        anthropic_stream(
            &[json!({"type": "text", "text": "Hello there!"})],
            "end_turn",
        ),
    ])
    .await;
    let (outcome, events) = anthropic_run(&mock, ToolRegistry::new(), "hello").await;
    assert_eq!(harness::finished_text(&outcome), "Hello there!");
    let retries: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Retrying { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert!(
        retries[0].contains("529") && retries[0].contains("Overloaded"),
        "{retries:?}"
    );
    assert_eq!(mock.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_event_mid_stream_is_classified_by_its_type() {
    let start = ev_anthropic(
        &json!({"type": "message_start", "message": {"id": "m", "model": "mock-model", "content": [], "usage": {"input_tokens": 1, "output_tokens": 1}}}),
    );
    let error = |kind: &str| {
        ev_anthropic(
            &json!({"type": "error", "error": {"type": kind, "message": format!("{kind} happened")}}),
        )
    };
    let stream = |chunks: Vec<String>| {
        Reply::Stream(crate::support::mock_llm::StreamReply {
            chunks,
            ttft: Duration::ZERO,
            delay: Duration::ZERO,
            end: crate::support::mock_llm::End::Close,
        })
    };
    let mock = MockLlm::start(vec![
        stream(vec![start.clone(), error("overloaded_error")]),
        stream(vec![start, error("invalid_request_error")]),
    ])
    .await;
    let (outcome, events) = anthropic_run(&mock, ToolRegistry::new(), "hello").await;
    // The overload is retried; the invalid request is final.
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::Retrying { reason, .. } if reason.contains("overloaded_error happened")))
    );
    let Outcome::Failed { class, message, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(class, "bad_request");
    assert!(
        message.contains("invalid_request_error happened"),
        "{message}"
    );
    assert_eq!(mock.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthorized_is_permanent_and_never_shows_the_key() {
    let body = format!(
        r#"{{"type":"error","error":{{"type":"authentication_error","message":"invalid x-api-key {TEST_KEY}"}}}}"#
    );
    let mock = MockLlm::start(vec![raw_status(401, &body)]).await;
    let (outcome, _) = anthropic_run(&mock, ToolRegistry::new(), "hello").await;
    let Outcome::Failed { class, message, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(class, "auth");
    assert!(message.contains("401"), "{message}");
    assert!(!message.contains(TEST_KEY), "{message}");
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thinking_signature_goes_back_unchanged_with_the_tool_result() {
    let signature = "EqQBCkYIBxgCKkB/sig+with/slashes==";
    let mock = MockLlm::start(vec![
        anthropic_stream(
            &[
                json!({"type": "thinking", "thinking": "I should look it up.", "signature": signature}),
                json!({"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Oslo"}}),
            ],
            "tool_use",
        ),
        anthropic_stream(&[json!({"type": "text", "text": "Oslo is at 12°C."})], "end_turn"),
    ])
    .await;
    let (outcome, _) = anthropic_run(
        &mock,
        ToolRegistry::new().with(Lookup::new(true)),
        "Weather in Oslo?",
    )
    .await;
    assert_eq!(harness::finished_text(&outcome), "Oslo is at 12°C.");
    let second = &mock.requests()[1].body;
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I should look it up.", "signature": signature},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Oslo"}},
        ]})
    );
    assert_eq!(
        messages[2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Oslo: 12°C",
             "cache_control": {"type": "ephemeral"}},
        ]})
    );
    // The system prompt is top-level, a cache breakpoint (with the tools before
    // it), as is the conversation's tail.
    let ephemeral = json!({"type": "ephemeral"});
    assert_eq!(second["system"][0]["cache_control"], ephemeral);
    let tail = second["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(
        tail["content"].as_array().unwrap().last().unwrap()["cache_control"],
        ephemeral
    );
    assert_eq!(second["tools"][0]["name"], "lookup");
    assert!(second["tools"][0]["input_schema"].is_object());
    let Outcome::Completed { stats, .. } = &outcome else {
        unreachable!()
    };
    assert_eq!(
        stats.usage,
        Usage {
            input_tokens: 20,
            output_tokens: 10,
            cached_tokens: 0,
            cache_write_tokens: 0,
            reasoning_tokens: 0
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_streaming_answer_decodes_the_same_blocks() {
    let mock = MockLlm::start(vec![Reply::Json(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [
            {"type": "thinking", "thinking": "Look it up.", "signature": "c2ln"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_9", "name": "lookup", "input": {"city": "Oslo"}},
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 12, "cache_read_input_tokens": 30, "output_tokens": 7},
    }))])
    .await;
    let client = harness::anthropic_client(&mock, Duration::from_secs(5));
    let turn = client.complete(&request()).await.unwrap();
    assert_eq!(turn.message.text, "Checking.");
    assert_eq!(
        turn.message.thinking,
        [orchestrate::ThinkingBlock::Thinking {
            thinking: "Look it up.".into(),
            signature: "c2ln".into()
        }]
    );
    assert_eq!(turn.message.tool_calls[0].arguments, r#"{"city":"Oslo"}"#);
    assert_eq!(turn.finish, Some(FinishReason::ToolCalls));
    assert_eq!(
        turn.usage,
        Some(Usage {
            input_tokens: 42,
            output_tokens: 7,
            cached_tokens: 30,
            cache_write_tokens: 0,
            reasoning_tokens: 0
        })
    );
    let body = &mock.requests()[0].body;
    assert_eq!(
        body["stream"],
        Value::Null,
        "no stream flag on a plain request"
    );
    assert_eq!(body["max_tokens"], 32_000);
    assert_eq!(body["system"][0]["text"], "Be brief.");
}

#[test]
fn a_client_never_shows_its_key_when_debug_printed() {
    let openai = orchestrate::OpenAiClient::new(orchestrate::OpenAiConfig::new(
        "http://127.0.0.1:9/v1",
        Some(TEST_KEY.to_owned()),
    ))
    .unwrap();
    let anthropic = orchestrate::AnthropicClient::new(orchestrate::AnthropicConfig::new(
        "http://127.0.0.1:9",
        Some(TEST_KEY.to_owned()),
    ))
    .unwrap();
    for shown in [format!("{openai:?}"), format!("{anthropic:?}")] {
        assert!(!shown.contains(TEST_KEY), "{shown}");
        assert!(shown.contains("127.0.0.1:9"), "{shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_turn_is_continued_with_the_turn_so_far_not_retried() {
    let mock = MockLlm::start(vec![
        anthropic_stream(
            &[json!({"type": "text", "text": "Searching the docs. "})],
            "pause_turn",
        ),
        anthropic_stream(&[json!({"type": "text", "text": "Found it."})], "end_turn"),
    ])
    .await;
    let (outcome, events) = anthropic_run(&mock, ToolRegistry::new(), "look it up").await;
    assert_eq!(
        harness::finished_text(&outcome),
        "Searching the docs. Found it."
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.kind, EventKind::Retrying { .. })),
        "a pause is no failure"
    );
    // As Anthropic documents it: the same request again, with the assistant's
    // content so far appended, for the model to carry on from.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let (first, second) = (&requests[0].body["messages"], &requests[1].body["messages"]);
    let mut expected = first.as_array().unwrap().clone();
    expected.push(
        json!({"role": "assistant", "content": [{"type": "text", "text": "Searching the docs. "}]}),
    );
    assert_eq!(second, &Value::Array(expected));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn billing_size_permission_and_unknown_errors_are_never_retried() {
    let start = ev_anthropic(
        &json!({"type": "message_start", "message": {"id": "m", "model": "mock-model", "content": [], "usage": {"input_tokens": 1, "output_tokens": 1}}}),
    );
    let in_band = |kind: &str| {
        Reply::Stream(crate::support::mock_llm::StreamReply {
            chunks: vec![
                start.clone(),
                ev_anthropic(
                    &json!({"type": "error", "error": {"type": kind, "message": format!("{kind} happened")}}),
                ),
            ],
            ttft: Duration::ZERO,
            delay: Duration::ZERO,
            end: crate::support::mock_llm::End::Close,
        })
    };
    let status = |code: u16, kind: &str| {
        raw_status(
            code,
            &json!({"type": "error", "error": {"type": kind, "message": format!("{kind} happened")}})
                .to_string(),
        )
    };
    let cases = [
        ("billing_error", in_band("billing_error"), "quota"),
        (
            "request_too_large",
            in_band("request_too_large"),
            "too_large",
        ),
        ("permission_error", in_band("permission_error"), "auth"),
        ("brand_new_error", in_band("brand_new_error"), "provider"),
        ("billing_error", status(402, "billing_error"), "quota"),
        (
            "request_too_large",
            status(413, "request_too_large"),
            "too_large",
        ),
    ];
    for (kind, reply, word) in cases {
        let mock = MockLlm::start(vec![reply, anthropic_stream(&[], "end_turn")]).await;
        let (outcome, _) = anthropic_run(&mock, ToolRegistry::new(), "hello").await;
        let Outcome::Failed { class, message, .. } = &outcome else {
            panic!("{kind}: {outcome:?}")
        };
        assert_eq!(class, word, "{kind}");
        assert!(message.contains(&format!("{kind} happened")), "{message}");
        assert_eq!(mock.request_count(), 1, "{kind} was retried");
    }
}
