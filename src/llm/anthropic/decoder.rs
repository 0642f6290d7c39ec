//! Decodes one Anthropic Messages SSE stream: `message_start`, content blocks
//! (text, thinking with its signature, tool_use with `input_json_delta` pieces, and
//! block types it does not know, kept for the record), `message_delta` whose usage
//! replaces the start's, `message_stop`, `ping`, and `error` events. Decoding goes
//! by each payload's `type`, so streams without `event:` lines decode the same.
//!
//! A second `message_start` in one stream (a proxy splicing a retried generation
//! in) starts over: the turn is the last generation's, as vercel/ai does; the
//! earlier one stays in the report.

use serde_json::{Map, Value, json};

use super::wire;
use crate::conversation::{AssistantMessage, AssistantTurn, FinishReason, ThinkingBlock, ToolCall};
use crate::error::StreamError;
use crate::llm::sse::{Step, TurnDecoder};
use crate::llm::{DeltaSink, StreamDelta};

/// The decoding state of one stream.
#[derive(Debug)]
pub struct MessagesStreamDecoder {
    limit: usize,
    bytes: usize,
    messages: Vec<MessageState>,
    pings: usize,
    errors: Vec<Value>,
    events: usize,
}

/// One generation, from its `message_start`.
#[derive(Debug, Default)]
pub(crate) struct MessageState {
    pub(crate) id: String,
    pub(crate) model: String,
    pub(crate) blocks: Vec<Block>,
    pub(crate) stop_reason: Value,
    pub(crate) stop_sequence: Value,
    pub(crate) stop_details: Value,
    pub(crate) usage: Map<String, Value>,
    pub(crate) message_stop: bool,
}

/// One content block.
#[derive(Debug, Default)]
pub(crate) struct Block {
    index: u64,
    kind: String,
    stopped: bool,
    /// A text block's text, or a thinking block's thinking.
    text: String,
    signature: String,
    citations: usize,
    /// A redacted thinking block's payload.
    data: String,
    id: String,
    name: String,
    /// The input given whole (in `content_block_start`, or a non-streaming answer).
    input: Option<Value>,
    /// The input as `input_json_delta` pieces, once one arrived.
    partial_json: Option<String>,
    /// A block type this decoder does not know: its start, for the record.
    start: Value,
}

impl Block {
    /// A block as `content_block_start` (or a non-streaming answer) gives it.
    pub(crate) fn from_start(index: u64, start: &Value) -> Self {
        let text = |key: &str| start[key].as_str().unwrap_or_default().to_owned();
        let kind = text("type");
        let mut block = Self {
            index,
            text: match kind.as_str() {
                "thinking" => text("thinking"),
                _ => text("text"),
            },
            signature: text("signature"),
            data: text("data"),
            id: text("id"),
            name: text("name"),
            input: start.get("input").cloned(),
            start: start.clone(),
            kind,
            ..Self::default()
        };
        if let Some(citations) = start["citations"].as_array() {
            block.citations = citations.len();
        }
        block
    }

    fn is_tool_use(&self) -> bool {
        matches!(self.kind.as_str(), "tool_use" | "server_tool_use")
    }

    /// The input: whole, or assembled from its pieces (empty pieces are `{}`).
    /// `Err` carries the pieces when they do not parse (a stream cut mid-input).
    fn parsed_input(&self) -> Result<Value, &str> {
        match &self.partial_json {
            Some(json) if json.trim().is_empty() => Ok(json!({})),
            Some(json) => serde_json::from_str(json).map_err(|_| json.as_str()),
            None => Ok(self.input.clone().unwrap_or_else(|| json!({}))),
        }
    }

    fn report(&self) -> Value {
        let mut out = json!({"index": self.index, "type": self.kind, "stopped": self.stopped});
        match self.kind.as_str() {
            "text" => {
                out["text"] = json!(self.text);
                if self.citations > 0 {
                    out["citations_count"] = json!(self.citations);
                }
            }
            "thinking" => {
                out["thinking"] = json!(self.text);
                out["signature_len"] = json!(self.signature.len());
            }
            "redacted_thinking" => out["data_len"] = json!(self.data.len()),
            _ if self.is_tool_use() => {
                out["id"] = json!(self.id);
                out["name"] = json!(self.name);
                match self.parsed_input() {
                    Ok(input) => {
                        out["input"] = input;
                        out["input_json_complete"] = json!(true);
                    }
                    Err(partial) => {
                        out["input"] = Value::Null;
                        out["input_json_complete"] = json!(false);
                        out["partial_json"] = json!(partial);
                    }
                }
            }
            _ => {
                let mut start = self.start.clone();
                let items = start
                    .as_object_mut()
                    .and_then(|s| s.remove("content"))
                    .and_then(|c| c.as_array().map(Vec::len));
                out["start"] = start;
                if let Some(items) = items {
                    out["start_content_items"] = json!(items);
                }
            }
        }
        out
    }
}

impl MessageState {
    /// A generation as `message_start` (or a non-streaming answer) describes it.
    pub(crate) fn from_message(message: &Value) -> Self {
        Self {
            id: message["id"].as_str().unwrap_or_default().to_owned(),
            model: message["model"].as_str().unwrap_or_default().to_owned(),
            blocks: Vec::new(),
            stop_reason: message["stop_reason"].clone(),
            stop_sequence: message["stop_sequence"].clone(),
            stop_details: message["stop_details"].clone(),
            usage: message["usage"].as_object().cloned().unwrap_or_default(),
            message_stop: false,
        }
    }

    pub(crate) fn push_block(&mut self, block: Block) {
        self.blocks.push(block);
    }

    fn block(&mut self, index: u64) -> Option<&mut Block> {
        self.blocks.iter_mut().rev().find(|b| b.index == index)
    }

    /// The turn this generation amounts to. Server-side tool blocks (web search
    /// and the like) ran at the provider: they are not calls for us to run.
    pub(crate) fn turn(&self) -> AssistantTurn {
        let mut message = AssistantMessage::default();
        for block in &self.blocks {
            match block.kind.as_str() {
                "text" => message.text.push_str(&block.text),
                "thinking" => {
                    message.reasoning.push_str(&block.text);
                    message.thinking.push(ThinkingBlock::Thinking {
                        thinking: block.text.clone(),
                        signature: block.signature.clone(),
                    });
                }
                "redacted_thinking" => message.thinking.push(ThinkingBlock::RedactedThinking {
                    data: block.data.clone(),
                }),
                "tool_use" => message.tool_calls.push(ToolCall {
                    id: block.id.clone(),
                    name: block.name.clone(),
                    arguments: match block.parsed_input() {
                        Ok(input) => input.to_string(),
                        Err(partial) => partial.to_owned(),
                    },
                }),
                _ => {}
            }
        }
        AssistantTurn {
            message,
            finish: self.stop_reason.as_str().and_then(FinishReason::from_wire),
            usage: (!self.usage.is_empty()).then(|| wire::usage_from(&self.usage)),
            model: (!self.model.is_empty()).then(|| self.model.clone()),
        }
    }

    fn report(&self) -> Value {
        json!({
            "id": self.id,
            "model": self.model,
            "blocks": self.blocks.iter().map(Block::report).collect::<Vec<_>>(),
            "stop_reason": self.stop_reason,
            "stop_sequence": self.stop_sequence,
            "stop_details": self.stop_details,
            "usage": self.usage,
            "message_stop": self.message_stop,
        })
    }
}

impl MessagesStreamDecoder {
    /// A decoder whose answer may grow to `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            bytes: 0,
            messages: Vec::new(),
            pings: 0,
            errors: Vec::new(),
            events: 0,
        }
    }

    fn grow(&mut self, n: usize) -> Result<(), StreamError> {
        self.bytes += n;
        if self.bytes > self.limit {
            return Err(StreamError::TooLarge { limit: self.limit });
        }
        Ok(())
    }

    /// Feeds one event's `data`. Text, thinking and tool starts go to `sink`.
    pub fn on_event(
        &mut self,
        data: &str,
        sink: Option<DeltaSink<'_>>,
    ) -> Result<Step, StreamError> {
        let index = self.events;
        self.events += 1;
        if data.trim().is_empty() {
            return Ok(Step::Continue);
        }
        let event: Value = serde_json::from_str(data.trim())
            .map_err(|e| StreamError::Malformed(format!("event {index}: {e}")))?;
        let emit = |delta: StreamDelta| {
            if let Some(sink) = sink {
                sink(delta);
            }
        };
        let block_index = event["index"].as_u64().unwrap_or(0);
        match event["type"].as_str().unwrap_or_default() {
            "message_start" => {
                self.messages
                    .push(MessageState::from_message(&event["message"]));
            }
            "content_block_start" => {
                let block = Block::from_start(block_index, &event["content_block"]);
                self.grow(block.text.len() + block.signature.len() + block.data.len())?;
                if block.kind == "tool_use" {
                    emit(StreamDelta::ToolCall {
                        name: block.name.clone(),
                    });
                }
                if let Some(message) = self.messages.last_mut() {
                    message.push_block(block);
                }
            }
            "content_block_delta" => {
                let delta = &event["delta"];
                let piece = |key: &str| delta[key].as_str().unwrap_or_default();
                let added = ["text", "partial_json", "thinking", "signature"]
                    .iter()
                    .map(|k| piece(k).len())
                    .sum();
                self.grow(added)?;
                let Some(block) = self.messages.last_mut().and_then(|m| m.block(block_index))
                else {
                    return Ok(Step::Continue);
                };
                match delta["type"].as_str().unwrap_or_default() {
                    "text_delta" => {
                        block.text.push_str(piece("text"));
                        emit(StreamDelta::Text(piece("text").to_owned()));
                    }
                    "thinking_delta" => {
                        block.text.push_str(piece("thinking"));
                        emit(StreamDelta::Reasoning(piece("thinking").to_owned()));
                    }
                    "signature_delta" => block.signature.push_str(piece("signature")),
                    "input_json_delta" => block
                        .partial_json
                        .get_or_insert_with(String::new)
                        .push_str(piece("partial_json")),
                    "citations_delta" => block.citations += 1,
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(block) = self.messages.last_mut().and_then(|m| m.block(block_index)) {
                    block.stopped = true;
                }
            }
            "message_delta" => {
                if let Some(message) = self.messages.last_mut() {
                    let delta = &event["delta"];
                    for (key, field) in [
                        ("stop_reason", &mut message.stop_reason),
                        ("stop_sequence", &mut message.stop_sequence),
                        ("stop_details", &mut message.stop_details),
                    ] {
                        if let Some(value) = delta.get(key) {
                            *field = value.clone();
                        }
                    }
                    if let Some(usage) = event["usage"].as_object() {
                        // Cumulative: each value replaces the start's.
                        for (key, value) in usage {
                            message.usage.insert(key.clone(), value.clone());
                        }
                    }
                }
            }
            "message_stop" => {
                if let Some(message) = self.messages.last_mut() {
                    message.message_stop = true;
                }
                return Ok(Step::Done);
            }
            "ping" => self.pings += 1,
            "error" => {
                let error = event.get("error").cloned().unwrap_or(Value::Null);
                self.errors.push(json!({
                    "event_index": index,
                    "error": error,
                    "request_id": event.get("request_id").cloned().unwrap_or(Value::Null),
                    "after_message_start": !self.messages.is_empty(),
                }));
                return Ok(Step::Error(wire::in_band_error(&error)));
            }
            // New event types are announced as additive: skip them.
            _ => {}
        }
        Ok(Step::Continue)
    }

    /// What the current generation has so far.
    pub fn snapshot(&self) -> AssistantTurn {
        self.messages
            .last()
            .map(MessageState::turn)
            .unwrap_or_default()
    }

    /// The assembled turn of the last generation. A stream that never said why it
    /// stopped was cut short: an error, never a truncated answer.
    pub fn into_turn(self) -> Result<AssistantTurn, StreamError> {
        match self.messages.last() {
            Some(m) if m.message_stop || !m.stop_reason.is_null() => Ok(m.turn()),
            _ => Err(StreamError::EndedEarly),
        }
    }

    /// Everything decoded, in the shape of the fixtures' `expected/*.json` (minus the
    /// byte-level `sse` section): the conformance view of the stream.
    pub fn report(&self) -> Value {
        json!({
            "message_starts": self.messages.len(),
            "messages": self.messages.iter().map(MessageState::report).collect::<Vec<_>>(),
            "pings": self.pings,
            "errors": self.errors,
            "saw_message_stop": self.messages.iter().any(|m| m.message_stop),
        })
    }
}

impl TurnDecoder for MessagesStreamDecoder {
    fn on_event(&mut self, data: &str, sink: Option<DeltaSink<'_>>) -> Result<Step, StreamError> {
        Self::on_event(self, data, sink)
    }

    fn snapshot(&self) -> AssistantTurn {
        Self::snapshot(self)
    }

    fn into_turn(self) -> Result<AssistantTurn, StreamError> {
        Self::into_turn(self)
    }
}

/// Decodes a whole SSE body held in memory through the same SSE parser and decoder
/// the client uses, without stopping at errors: for conformance checks and benches.
pub async fn decode_sse_body(
    body: bytes::Bytes,
    limit: usize,
) -> Result<MessagesStreamDecoder, StreamError> {
    crate::llm::sse::decode_body(body, MessagesStreamDecoder::new(limit)).await
}
