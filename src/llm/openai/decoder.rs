//! Decodes one OpenAI-compatible SSE stream: each event's data goes in, a
//! [`StreamAssembler`] per choice is fed, and the quirks of real servers are absorbed
//! (see tests/fixtures/sse/INDEX.md).

use serde_json::{Value, json};

use super::wire::{self, Chunk};
use crate::conversation::{AssistantTurn, FinishReason};
use crate::error::StreamError;
use crate::llm::assembler::StreamAssembler;
use crate::llm::sse::TurnDecoder;
use crate::llm::{DeltaSink, StreamDelta};

pub use crate::llm::sse::Step;

#[derive(Debug)]
struct Choice {
    index: u32,
    assembler: StreamAssembler,
    role: Option<String>,
    finish_wire: Option<String>,
    reasoning_field: Option<&'static str>,
}

#[derive(Debug)]
struct RecordedError {
    event_index: usize,
    error: Value,
    after_output: bool,
}

/// The decoding state of one stream.
#[derive(Debug)]
pub struct ChatStreamDecoder {
    limit: usize,
    choices: Vec<Choice>,
    ids: Vec<String>,
    models: Vec<String>,
    usage: Option<Value>,
    x_groq_usage: Option<Value>,
    errors: Vec<RecordedError>,
    saw_done: bool,
    events: usize,
    /// The request's place, for ids made up for calls that came without one.
    place: String,
}

impl ChatStreamDecoder {
    /// A decoder whose answer may grow to `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            choices: Vec::new(),
            ids: Vec::new(),
            models: Vec::new(),
            usage: None,
            x_groq_usage: None,
            errors: Vec::new(),
            saw_done: false,
            events: 0,
            place: String::new(),
        }
    }

    /// Calls that come without an id get one derived from `place`, the same in a
    /// recording and its replay.
    pub fn with_place(mut self, place: &str) -> Self {
        self.place = place.to_owned();
        self
    }

    fn choice(&mut self, index: u32) -> &mut Choice {
        let pos = match self.choices.iter().position(|c| c.index == index) {
            Some(pos) => pos,
            None => {
                self.choices.push(Choice {
                    index,
                    assembler: StreamAssembler::new(self.limit).with_place(&self.place),
                    role: None,
                    finish_wire: None,
                    reasoning_field: None,
                });
                self.choices.len() - 1
            }
        };
        &mut self.choices[pos]
    }

    fn has_output(&self) -> bool {
        self.choices.iter().any(|c| c.assembler.has_output())
    }

    /// Feeds one event's `data`. Deltas of the first choice go to `sink`.
    pub fn on_event(
        &mut self,
        data: &str,
        sink: Option<DeltaSink<'_>>,
    ) -> Result<Step, StreamError> {
        let index = self.events;
        self.events += 1;
        let data = data.trim();
        if data == "[DONE]" {
            self.saw_done = true;
            return Ok(Step::Done);
        }
        if data.is_empty() {
            return Ok(Step::Continue);
        }
        let chunk: Chunk<'_> =
            serde_json::from_str(data).map_err(|e| StreamError::Malformed(e.to_string()))?;
        if let Some(error) = chunk.error {
            let after_output = self.has_output();
            let provider = wire::in_band_error(&error);
            self.errors.push(RecordedError {
                event_index: index,
                error,
                after_output,
            });
            return Ok(Step::Error(provider));
        }
        if let Some(id) = chunk.id.as_deref()
            && !self.ids.iter().any(|seen| seen == id)
        {
            self.ids.push(id.to_owned());
        }
        if let Some(model) = chunk.model.as_deref()
            && !self.models.iter().any(|seen| seen == model)
        {
            self.models.push(model.to_owned());
        }
        let usage = chunk.usage.filter(|u| !u.is_null()).or_else(|| {
            chunk
                .x_groq
                .as_ref()
                .and_then(|x| x.usage.clone())
                .filter(|u| !u.is_null())
        });
        if let Some(x) = chunk.x_groq.and_then(|x| x.usage).filter(|u| !u.is_null()) {
            self.x_groq_usage = Some(x);
        }
        let model = chunk.model;
        for (position, c) in chunk.choices.into_iter().flatten().enumerate() {
            let choice_index = c.index.unwrap_or(position as u32);
            let first = choice_index == 0;
            let choice = self.choice(choice_index);
            if let Some(model) = model.as_deref() {
                choice.assembler.set_model(model);
            }
            if let Some(delta) = c.delta {
                if let Some(role) = delta.role {
                    choice.role = Some(role.into_owned());
                }
                if let Some(text) = delta.content.as_deref().filter(|s| !s.is_empty()) {
                    choice.assembler.push_text(text)?;
                    emit(sink, first, || StreamDelta::Text(text.to_owned()));
                }
                for (field, value) in [
                    ("reasoning_content", &delta.reasoning_content),
                    ("reasoning", &delta.reasoning),
                ] {
                    if let Some(text) = value.as_deref().filter(|s| !s.is_empty()) {
                        choice.reasoning_field.get_or_insert(field);
                        choice.assembler.push_reasoning(text)?;
                        emit(sink, first, || StreamDelta::Reasoning(text.to_owned()));
                    }
                }
                if let Some(text) = delta.refusal.as_deref() {
                    choice.assembler.push_refusal(text)?;
                }
                for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
                    let key = u64::from(call.index.unwrap_or(position as u32));
                    let (name, arguments) = match &call.function {
                        Some(f) => (f.name.as_deref(), f.arguments.as_deref()),
                        None => (None, None),
                    };
                    if choice
                        .assembler
                        .tool_call_delta(key, call.id.as_deref(), name, arguments)?
                        && let Some(name) = name
                    {
                        emit(sink, first, || StreamDelta::ToolCall {
                            name: name.to_owned(),
                        });
                    }
                }
            }
            if let Some(reason) = c.finish_reason.as_deref().filter(|r| !r.is_empty()) {
                choice.finish_wire = Some(reason.to_owned());
                choice.assembler.set_finish(FinishReason::from_wire(reason));
            }
        }
        if let Some(usage) = usage {
            let normalized = wire::usage_from(&usage);
            if let Some(first) = self.choices.first_mut() {
                first.assembler.set_usage(normalized);
            }
            self.usage = Some(usage);
        }
        Ok(Step::Continue)
    }

    /// Whether `[DONE]` arrived.
    pub fn saw_done(&self) -> bool {
        self.saw_done
    }

    /// What the first choice has so far (for a cancelled turn).
    pub fn snapshot(&self) -> AssistantTurn {
        self.choices
            .iter()
            .min_by_key(|c| c.index)
            .map(|c| c.assembler.snapshot())
            .unwrap_or_default()
    }

    /// The assembled turn of the first choice. A stream with neither a finish reason
    /// nor `[DONE]` was cut short: that is an error, never a truncated answer.
    pub fn into_turn(mut self) -> Result<AssistantTurn, StreamError> {
        self.choices.sort_by_key(|c| c.index);
        let usage = self.usage.as_ref().map(wire::usage_from);
        let Some(first) = self.choices.into_iter().next() else {
            return if self.saw_done {
                Ok(AssistantTurn {
                    usage,
                    ..AssistantTurn::default()
                })
            } else {
                Err(StreamError::EndedEarly)
            };
        };
        if first.assembler.finish_reason().is_none() && !self.saw_done {
            return Err(StreamError::EndedEarly);
        }
        let mut turn = first.assembler.finish();
        if turn.usage.is_none() {
            turn.usage = usage;
        }
        Ok(turn)
    }

    /// Everything decoded, in the shape of the fixtures' `expected/*.json` (minus the
    /// byte-level `sse` section): the conformance view of the stream.
    pub fn report(&self) -> Value {
        let mut choices: Vec<&Choice> = self.choices.iter().collect();
        choices.sort_by_key(|c| c.index);
        let choices: Vec<Value> = choices
            .into_iter()
            .map(|c| {
                let turn = c.assembler.snapshot();
                let reasoning = |field: &str| {
                    if c.reasoning_field == Some(field) {
                        json!(turn.message.reasoning)
                    } else {
                        Value::Null
                    }
                };
                json!({
                    "index": c.index,
                    "role": c.role,
                    "content": turn.message.text,
                    "reasoning_content": reasoning("reasoning_content"),
                    "reasoning": reasoning("reasoning"),
                    "refusal": turn.message.refusal,
                    "tool_calls": turn.message.tool_calls.iter().enumerate().map(|(i, t)| json!({
                        "index": i, "id": t.id, "name": t.name, "arguments": t.arguments,
                    })).collect::<Vec<_>>(),
                    "finish_reason": c.finish_wire,
                })
            })
            .collect();
        json!({
            "ids": self.ids,
            "models": self.models,
            "choices": choices,
            "usage": self.usage,
            "x_groq_usage": self.x_groq_usage,
            "errors": self.errors.iter().map(|e| json!({
                "event_index": e.event_index, "error": e.error, "after_output": e.after_output,
            })).collect::<Vec<_>>(),
            "saw_done": self.saw_done,
        })
    }
}

fn emit(sink: Option<DeltaSink<'_>>, first_choice: bool, delta: impl FnOnce() -> StreamDelta) {
    if first_choice && let Some(sink) = sink {
        sink(delta());
    }
}

/// Decodes a whole SSE body held in memory through the same SSE parser and decoder
/// the client uses, without stopping at errors: for conformance checks and benches.
pub async fn decode_sse_body(
    body: bytes::Bytes,
    limit: usize,
) -> Result<ChatStreamDecoder, StreamError> {
    crate::llm::sse::decode_body(body, ChatStreamDecoder::new(limit)).await
}

impl TurnDecoder for ChatStreamDecoder {
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
