//! Protocol enforcement before every request: a missing tool result becomes an
//! `interrupted` placeholder and a stray tool result is dropped.

use orchestrate::{AssistantMessage, Message, ToolCall, ToolRegistry, ToolResult};
use serde_json::{Value, json};

use crate::support::harness;
use crate::support::mock_llm::{MockLlm, Reply};

async fn first_request(history: Vec<Message>) -> Vec<Value> {
    let mock = MockLlm::start(vec![Reply::text("ok")]).await;
    let dir = tempfile::tempdir().unwrap();
    let runtime = harness::runtime(&mock, dir.path()).await;
    let mut spec = harness::spec(ToolRegistry::new());
    spec.history = history;
    let session = runtime.start_session(spec).await.unwrap();
    let (outcome, _) = harness::run(&runtime, session, "continue").await;
    assert_eq!(harness::finished_text(&outcome), "ok");
    runtime.shutdown().await;
    mock.requests()[0].body["messages"]
        .as_array()
        .unwrap()
        .clone()
}

fn calls(ids: &[&str]) -> Message {
    Message::Assistant(AssistantMessage {
        tool_calls: ids
            .iter()
            .map(|id| ToolCall {
                id: (*id).into(),
                name: "lookup".into(),
                arguments: "{}".into(),
            })
            .collect(),
        ..AssistantMessage::default()
    })
}

fn result(id: &str) -> Message {
    Message::Tool(ToolResult {
        tool_call_id: id.into(),
        content: format!("result {id}"),
        is_error: false,
    })
}

fn wire_call(id: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": "lookup", "arguments": "{}"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_tool_result_is_sent_as_an_interrupted_placeholder() {
    let sent = first_request(vec![
        Message::user("look both up"),
        calls(&["a", "b"]),
        result("a"),
    ])
    .await;
    assert_eq!(
        sent,
        vec![
            json!({"role": "system", "content": "You are a test agent."}),
            json!({"role": "user", "content": "look both up"}),
            json!({"role": "assistant", "content": null, "tool_calls": [wire_call("a"), wire_call("b")]}),
            json!({"role": "tool", "tool_call_id": "a", "content": "result a"}),
            json!({"role": "tool", "tool_call_id": "b", "content": "interrupted: this tool call did not complete and its result was lost"}),
            json!({"role": "user", "content": "continue"}),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_tool_result_is_dropped() {
    let history = vec![
        result("orphan"),
        Message::user("hi"),
        Message::Assistant(AssistantMessage {
            text: "hello".into(),
            ..AssistantMessage::default()
        }),
        result("also-orphan"),
    ];
    let sent = first_request(history).await;
    assert_eq!(
        sent,
        vec![
            json!({"role": "system", "content": "You are a test agent."}),
            json!({"role": "user", "content": "hi"}),
            json!({"role": "assistant", "content": "hello"}),
            json!({"role": "user", "content": "continue"}),
        ]
    );
}
