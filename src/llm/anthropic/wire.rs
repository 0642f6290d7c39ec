//! Anthropic Messages wire format: the request body built from the provider-neutral
//! transcript, usage, and error objects.

use serde_json::{Map, Value, json};

use crate::conversation::{Message, ThinkingBlock, Usage};
use crate::error::{ProviderError, excerpt};
use crate::llm::ChatRequest;

/// Normalizes a usage object. Anthropic counts cached prompt tokens apart from
/// `input_tokens`; here they are part of the input, as OpenAI counts them.
pub(crate) fn usage_from(usage: &Map<String, Value>) -> Usage {
    let n = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    let cache_read = n("cache_read_input_tokens");
    let cache_write = n("cache_creation_input_tokens");
    Usage {
        input_tokens: n("input_tokens") + cache_write + cache_read,
        output_tokens: n("output_tokens"),
        cached_tokens: cache_read,
        cache_write_tokens: cache_write,
        reasoning_tokens: 0,
    }
}

/// An `error` object (`{"type": "overloaded_error", "message": …}`) as an in-band
/// provider error; its type decides the class.
pub(crate) fn in_band_error(error: &Value) -> ProviderError {
    ProviderError::InBand {
        kind: error["type"].as_str().map(str::to_owned),
        code: None,
        message: excerpt(error["message"].as_str().unwrap_or_default()),
    }
}

/// `(code, message)` of an error response body: `{"type": "error", "error":
/// {"type": "rate_limit_error", "message": …}}`; the error's type is the code.
pub(crate) fn error_body(json: &Value) -> (Option<String>, String) {
    let error = json.get("error").unwrap_or(json);
    (
        error["type"].as_str().map(str::to_owned),
        excerpt(error["message"].as_str().unwrap_or_default()),
    )
}

/// What a request carries beyond the transcript.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Options {
    /// Used when the request sets no `max_tokens` (the API requires one).
    pub(crate) max_tokens: u32,
    /// A budget for extended thinking, when it is on.
    pub(crate) thinking_budget: Option<u32>,
}

/// Builds the JSON body of a request. System messages become the top-level
/// `system`; tool results and prompts that follow one another share one user turn
/// (tool results first, as the API requires).
pub(crate) fn request_body(request: &ChatRequest, options: Options, stream: bool) -> Value {
    let system: Vec<&str> = request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::System { content } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    let mut messages: Vec<Value> = Vec::new();
    for message in &request.messages {
        let (role, blocks) = match message {
            Message::System { .. } => continue,
            // The API refuses empty text blocks: an empty prompt adds nothing.
            Message::User { content } if content.trim().is_empty() => continue,
            Message::User { content } => ("user", vec![json!({"type": "text", "text": content})]),
            Message::Tool(result) => {
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": result.tool_call_id,
                    "content": result.content,
                });
                if result.is_error {
                    block["is_error"] = json!(true);
                }
                ("user", vec![block])
            }
            Message::Assistant(a) => ("assistant", assistant_blocks(a)),
        };
        if blocks.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some(last) if last["role"] == role => {
                if let Some(content) = last["content"].as_array_mut() {
                    content.extend(blocks);
                }
            }
            _ => messages.push(json!({"role": role, "content": blocks})),
        }
    }
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_tokens.unwrap_or(options.max_tokens),
        "messages": messages,
    });
    if stream {
        body["stream"] = json!(true);
    }
    if !system.is_empty() {
        body["system"] = json!(system.join("\n\n"));
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
    }
    if let Some(budget) = options.thinking_budget {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
    }
    super::cache::mark(&mut body);
    body
}

/// An assistant turn's blocks: thinking exactly as received (signatures included),
/// then text, then tool calls.
fn assistant_blocks(a: &crate::conversation::AssistantMessage) -> Vec<Value> {
    let mut blocks: Vec<Value> = a
        .thinking
        .iter()
        .filter_map(|t| match t {
            // A block cut off before its signature (a cancelled turn) cannot go
            // back: the API verifies every thinking block it is sent.
            ThinkingBlock::Thinking { signature, .. } if signature.is_empty() => None,
            ThinkingBlock::Thinking {
                thinking,
                signature,
            } => Some(json!({"type": "thinking", "thinking": thinking, "signature": signature})),
            ThinkingBlock::RedactedThinking { data } => {
                Some(json!({"type": "redacted_thinking", "data": data}))
            }
        })
        .collect();
    if !a.text.trim().is_empty() {
        blocks.push(json!({"type": "text", "text": a.text}));
    }
    for call in &a.tool_calls {
        // Arguments the model garbled still need an object here; the tool already
        // answered the model with the parse error.
        let input = call
            .parsed_arguments()
            .ok()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{AssistantMessage, ToolCall, ToolResult};

    #[test]
    fn a_transcript_becomes_alternating_turns_with_tool_results_first() {
        let request = ChatRequest {
            model: "claude".into(),
            messages: vec![
                Message::system("Be brief."),
                Message::user("Weather?"),
                Message::Assistant(AssistantMessage {
                    text: "Checking.".into(),
                    tool_calls: vec![ToolCall {
                        id: "t1".into(),
                        name: "lookup".into(),
                        arguments: r#"{"city":"Oslo"}"#.into(),
                    }],
                    thinking: vec![ThinkingBlock::Thinking {
                        thinking: "hmm".into(),
                        signature: "sig==".into(),
                    }],
                    ..AssistantMessage::default()
                }),
                Message::Tool(ToolResult {
                    tool_call_id: "t1".into(),
                    content: "12°C".into(),
                    is_error: false,
                }),
                Message::user("And tomorrow?"),
            ],
            tools: vec![crate::llm::ToolSpec {
                name: "lookup".into(),
                description: "Looks up.".into(),
                parameters: json!({"type": "object"}),
            }]
            .into(),
            max_tokens: None,
            place: String::new(),
        };
        let options = Options {
            max_tokens: 4096,
            thinking_budget: None,
        };
        assert_eq!(
            request_body(&request, options, true),
            json!({
                "model": "claude",
                "max_tokens": 4096,
                "stream": true,
                "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
                "tools": [{"name": "lookup", "description": "Looks up.", "input_schema": {"type": "object"}}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "Weather?", "cache_control": {"type": "ephemeral"}}]},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "hmm", "signature": "sig=="},
                        {"type": "text", "text": "Checking."},
                        {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"city": "Oslo"}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "12°C"},
                        {"type": "text", "text": "And tomorrow?", "cache_control": {"type": "ephemeral"}},
                    ]},
                ],
            })
        );
    }

    #[test]
    fn empty_text_and_unsigned_thinking_are_never_sent() {
        let request = ChatRequest {
            model: "claude".into(),
            messages: vec![
                Message::user("Go."),
                Message::Assistant(AssistantMessage {
                    text: "\n\n".into(),
                    thinking: vec![ThinkingBlock::Thinking {
                        thinking: "cut off".into(),
                        signature: String::new(),
                    }],
                    tool_calls: vec![ToolCall {
                        id: "t1".into(),
                        name: "Ls".into(),
                        arguments: String::new(),
                    }],
                    ..AssistantMessage::default()
                }),
                Message::Tool(ToolResult {
                    tool_call_id: "t1".into(),
                    content: "a.txt".into(),
                    is_error: false,
                }),
                Message::user(""),
            ],
            tools: Default::default(),
            max_tokens: Some(100),
            place: String::new(),
        };
        let options = Options {
            max_tokens: 4096,
            thinking_budget: None,
        };
        assert_eq!(
            request_body(&request, options, false)["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "Go.", "cache_control": {"type": "ephemeral"}}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Ls", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt", "cache_control": {"type": "ephemeral"}}]},
            ])
        );
    }

    #[test]
    fn cached_prompt_tokens_count_as_input() {
        let usage = json!({"input_tokens": 10, "cache_creation_input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 7});
        assert_eq!(
            usage_from(usage.as_object().unwrap()),
            Usage {
                input_tokens: 115,
                output_tokens: 7,
                cached_tokens: 100,
                cache_write_tokens: 5,
                reasoning_tokens: 0,
            }
        );
    }
}
