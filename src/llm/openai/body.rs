//! The body of a Chat Completions request, serialized straight from the request
//! it is made from: no JSON tree copied from the transcript and the tool schemas
//! at every turn. Keys come out in the order a JSON tree gives them (sorted), so
//! the bytes are the same as the tree's.

use serde::Serialize;
use serde_json::Value;

use crate::conversation::{Message, ToolCall};
use crate::llm::{ChatRequest, ToolSpec};

/// The request body (`stream` with `stream_options`, the tools only when there
/// are some).
#[derive(Serialize)]
pub(crate) struct Body<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(serialize_with = "messages")]
    messages: &'a [Message],
    model: &'a str,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "<[_]>::is_empty", serialize_with = "tools")]
    tools: &'a [ToolSpec],
}

impl<'a> Body<'a> {
    pub(crate) fn of(request: &'a ChatRequest, stream: bool) -> Self {
        Self {
            max_tokens: request.max_tokens,
            messages: &request.messages,
            model: &request.model,
            stream,
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
            tools: &request.tools,
        }
    }
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// Each of `items`, as `wire` puts it.
fn each<'a, T, W: Serialize, S: serde::Serializer>(
    items: &'a [T],
    wire: impl Fn(&'a T) -> W,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(items.iter().map(wire))
}

fn messages<S: serde::Serializer>(messages: &&[Message], s: S) -> Result<S::Ok, S::Error> {
    each(messages, Wire::of, s)
}

fn tools<S: serde::Serializer>(tools: &&[ToolSpec], s: S) -> Result<S::Ok, S::Error> {
    each(tools, Typed::tool, s)
}

fn calls<S: serde::Serializer>(calls: &&[ToolCall], s: S) -> Result<S::Ok, S::Error> {
    each(calls, Typed::call, s)
}

/// One message as the API takes it.
#[derive(Serialize)]
struct Wire<'a> {
    /// Null for an assistant turn of tool calls alone.
    content: Option<&'a str>,
    role: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty", serialize_with = "calls")]
    tool_calls: &'a [ToolCall],
}

impl<'a> Wire<'a> {
    fn of(message: &'a Message) -> Self {
        let plain = |role, content: &'a str| Wire {
            content: Some(content),
            role,
            tool_call_id: None,
            tool_calls: &[],
        };
        match message {
            Message::System { content } => plain("system", content),
            Message::User { content } => plain("user", content),
            Message::Assistant(a) => Wire {
                content: (a.tool_calls.is_empty() || !a.text.is_empty()).then_some(a.text.as_str()),
                role: "assistant",
                tool_call_id: None,
                tool_calls: &a.tool_calls,
            },
            Message::Tool(r) => Wire {
                tool_call_id: Some(&r.tool_call_id),
                ..plain("tool", &r.content)
            },
        }
    }
}

/// A tool offered, or a call of one, as the API wraps both:
/// `{"function": …, "id": …, "type": "function"}`, a tool without the id.
#[derive(Serialize)]
struct Typed<'a, F> {
    function: F,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type")]
    kind: &'static str,
}

impl<'a> Typed<'a, ToolFunction<'a>> {
    fn tool(t: &'a ToolSpec) -> Self {
        let function = ToolFunction {
            description: &t.description,
            name: &t.name,
            parameters: &t.parameters,
        };
        Self {
            function,
            id: None,
            kind: "function",
        }
    }
}

impl<'a> Typed<'a, CallFunction<'a>> {
    fn call(c: &'a ToolCall) -> Self {
        let function = CallFunction {
            arguments: &c.arguments,
            name: &c.name,
        };
        Self {
            function,
            id: Some(&c.id),
            kind: "function",
        }
    }
}

#[derive(Serialize)]
struct ToolFunction<'a> {
    description: &'a str,
    name: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
struct CallFunction<'a> {
    arguments: &'a str,
    name: &'a str,
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::conversation::{AssistantMessage, ToolResult};

    /// The body as a JSON tree, as it was built before [`Body`]: the reference its bytes
    /// must equal.
    fn tree(request: &ChatRequest, stream: bool) -> Value {
        let messages: Vec<Value> = request.messages.iter().map(message_json).collect();
        let mut body = json!({
            "model": request.model,
            "messages": messages,
            "stream": stream,
        });
        if stream {
            body["stream_options"] = json!({ "include_usage": true });
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({
                        "type": "function",
                        "function": { "name": t.name, "description": t.description, "parameters": t.parameters },
                    })
                })
                .collect();
        }
        if let Some(max) = request.max_tokens {
            body["max_tokens"] = json!(max);
        }
        body
    }

    fn message_json(message: &Message) -> Value {
        match message {
            Message::System { content } => json!({ "role": "system", "content": content }),
            Message::User { content } => json!({ "role": "user", "content": content }),
            Message::Assistant(a) => {
                let mut m = json!({ "role": "assistant" });
                m["content"] = if a.text.is_empty() && !a.tool_calls.is_empty() {
                    Value::Null
                } else {
                    json!(a.text)
                };
                if !a.tool_calls.is_empty() {
                    m["tool_calls"] = a
                        .tool_calls
                        .iter()
                        .map(|c| {
                            json!({
                                "id": c.id,
                                "type": "function",
                                "function": { "name": c.name, "arguments": c.arguments },
                            })
                        })
                        .collect();
                }
                m
            }
            Message::Tool(r) => {
                json!({ "role": "tool", "tool_call_id": r.tool_call_id, "content": r.content })
            }
        }
    }

    fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    fn request(max_tokens: Option<u32>, tools: Vec<ToolSpec>) -> ChatRequest {
        let assistant = |text: &str, tool_calls: Vec<ToolCall>| {
            Message::Assistant(AssistantMessage {
                text: text.into(),
                tool_calls,
                ..AssistantMessage::default()
            })
        };
        ChatRequest {
            model: "gpt-4o".into(),
            messages: vec![
                Message::system("You are \"careful\".\nBe brief."),
                Message::user("fix the bug in src/lib.rs ✓"),
                assistant(
                    "",
                    vec![call("c1", "Read", r#"{"file_path":"src/lib.rs"}"#)],
                ),
                Message::Tool(ToolResult {
                    tool_call_id: "c1".into(),
                    content: "fn main() {}\n\ttab\u{1}".into(),
                    is_error: false,
                }),
                assistant(
                    "Two more.",
                    vec![call("c2", "Grep", "{\"pattern\":"), call("c3", "Bash", "")],
                ),
                Message::Tool(ToolResult {
                    tool_call_id: "c2".into(),
                    content: "Error: bad JSON".into(),
                    is_error: true,
                }),
                assistant("done", vec![]),
                assistant("", vec![]),
            ],
            tools: tools.into(),
            max_tokens,
            place: "lead/turn 3".into(),
        }
    }

    #[test]
    fn the_bytes_are_the_json_trees() {
        let tools = vec![ToolSpec {
            name: "Read".into(),
            description: "Reads a file.".into(),
            parameters: json!({"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}),
        }];
        for request in [request(None, vec![]), request(Some(512), tools)] {
            for stream in [true, false] {
                let bytes = serde_json::to_string(&Body::of(&request, stream)).unwrap();
                let tree = serde_json::to_string(&tree(&request, stream)).unwrap();
                assert_eq!(bytes, tree, "stream: {stream}");
            }
        }
    }
}
