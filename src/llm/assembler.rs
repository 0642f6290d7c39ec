//! The stream assembler: reasoning, text, refusal and tool-call deltas in, one
//! [`AssistantTurn`] out. Pure code; providers feed it and own the wire format.

use crate::conversation::{AssistantMessage, AssistantTurn, FinishReason, ToolCall, Usage};
use crate::error::StreamError;

/// An id for the `index`th call of a turn the provider gave none: derived from the
/// request's place (FNV-1a, stable across builds) so a replay makes the same one;
/// random when the place is unknown.
pub(crate) fn made_up_call_id(place: &str, index: usize) -> String {
    if place.is_empty() {
        return format!("call_{}", uuid::Uuid::new_v4().simple());
    }
    let hash = place.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("call_{hash:016x}_{index}")
}

/// The default cap on an assembled answer: 8 MiB.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

/// Assembles one model turn from its deltas.
#[derive(Debug)]
pub struct StreamAssembler {
    text: String,
    reasoning: String,
    refusal: Option<String>,
    calls: Vec<PartialCall>,
    /// The highest call key seen: keys come in increasing order, so a key above
    /// it starts a call without a search.
    highest_key: Option<u64>,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    model: Option<String>,
    bytes: usize,
    limit: usize,
    /// Where the request came from, so that ids made up for calls the provider
    /// left without one come out the same in a recording and its replay.
    place: String,
}

#[derive(Debug)]
struct PartialCall {
    key: u64,
    id: String,
    name: String,
    arguments: String,
}

impl Default for StreamAssembler {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_ANSWER_BYTES)
    }
}

impl StreamAssembler {
    /// An empty assembler whose answer may grow to `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            text: String::new(),
            reasoning: String::new(),
            refusal: None,
            calls: Vec::new(),
            highest_key: None,
            finish: None,
            usage: None,
            model: None,
            bytes: 0,
            limit,
            place: String::new(),
        }
    }

    /// Ids made up for calls without one derive from `place` (see
    /// [`ChatRequest::place`](crate::llm::ChatRequest::place)).
    pub fn with_place(mut self, place: &str) -> Self {
        self.place = place.to_owned();
        self
    }

    fn grow(&mut self, n: usize) -> Result<(), StreamError> {
        self.bytes += n;
        if self.bytes > self.limit {
            return Err(StreamError::TooLarge { limit: self.limit });
        }
        Ok(())
    }

    /// Appends visible text.
    pub fn push_text(&mut self, s: &str) -> Result<(), StreamError> {
        self.grow(s.len())?;
        self.text.push_str(s);
        Ok(())
    }

    /// Appends reasoning.
    pub fn push_reasoning(&mut self, s: &str) -> Result<(), StreamError> {
        self.grow(s.len())?;
        self.reasoning.push_str(s);
        Ok(())
    }

    /// Appends refusal text.
    pub fn push_refusal(&mut self, s: &str) -> Result<(), StreamError> {
        self.grow(s.len())?;
        self.refusal.get_or_insert_with(String::new).push_str(s);
        Ok(())
    }

    /// Applies one tool-call delta keyed by `key` (the wire `index`, or the delta's
    /// position when there is none). A later empty `id` or `name` never overwrites one
    /// already seen. Returns true when this delta first named the call.
    pub fn tool_call_delta(
        &mut self,
        key: u64,
        id: Option<&str>,
        name: Option<&str>,
        arguments: Option<&str>,
    ) -> Result<bool, StreamError> {
        let added =
            id.map_or(0, str::len) + name.map_or(0, str::len) + arguments.map_or(0, str::len);
        self.grow(added)?;
        // A call's deltas come together and the calls in key order, so the last
        // call is nearly always the one and a key above every other starts a new
        // one: a turn of ten thousand calls is not searched at each of its deltas.
        let last = self.calls.len().checked_sub(1);
        let found = match last.filter(|&i| self.calls[i].key == key) {
            Some(last) => Some(last),
            None if self.highest_key.is_none_or(|highest| key > highest) => None,
            None => self.calls.iter().position(|c| c.key == key),
        };
        self.highest_key = self.highest_key.max(Some(key));
        let pos = match found {
            Some(pos) => pos,
            None => {
                self.calls.push(PartialCall {
                    key,
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                });
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[pos];
        if let Some(id) = id.filter(|s| !s.is_empty())
            && call.id.is_empty()
        {
            call.id = id.to_owned();
        }
        let mut named = false;
        if let Some(name) = name.filter(|s| !s.is_empty())
            && call.name.is_empty()
        {
            call.name = name.to_owned();
            named = true;
        }
        if let Some(args) = arguments {
            call.arguments.push_str(args);
        }
        Ok(named)
    }

    /// Records the finish reason; a later `None` never clears an earlier one.
    pub fn set_finish(&mut self, finish: Option<FinishReason>) {
        if finish.is_some() {
            self.finish = finish;
        }
    }

    /// The finish reason seen so far.
    pub fn finish_reason(&self) -> Option<&FinishReason> {
        self.finish.as_ref()
    }

    /// Records usage; the last report wins.
    pub fn set_usage(&mut self, usage: Usage) {
        self.usage = Some(usage);
    }

    /// Records the model name the provider reported.
    pub fn set_model(&mut self, model: &str) {
        if self.model.is_none() && !model.is_empty() {
            self.model = Some(model.to_owned());
        }
    }

    /// True once any text, reasoning, refusal or tool call arrived.
    pub fn has_output(&self) -> bool {
        !self.text.is_empty()
            || !self.reasoning.is_empty()
            || self.refusal.is_some()
            || !self.calls.is_empty()
    }

    /// What has been assembled so far, without consuming the assembler.
    pub fn snapshot(&self) -> AssistantTurn {
        let mut calls: Vec<&PartialCall> = self.calls.iter().collect();
        calls.sort_by_key(|c| c.key);
        AssistantTurn {
            message: AssistantMessage {
                text: self.text.clone(),
                reasoning: self.reasoning.clone(),
                refusal: self.refusal.clone(),
                tool_calls: calls
                    .into_iter()
                    .map(|c| ToolCall {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    })
                    .collect(),
                thinking: Vec::new(),
            },
            finish: self.finish.clone(),
            usage: self.usage,
            model: self.model.clone(),
        }
    }

    /// The assembled turn. Calls come out ordered by key; a call the provider never
    /// gave an id gets a generated one, so results can always be matched to calls.
    pub fn finish(mut self) -> AssistantTurn {
        self.calls.sort_by_key(|c| c.key);
        let place = self.place;
        let tool_calls = self
            .calls
            .into_iter()
            .enumerate()
            .map(|(i, c)| ToolCall {
                id: if c.id.is_empty() {
                    made_up_call_id(&place, i)
                } else {
                    c.id
                },
                name: c.name,
                arguments: c.arguments,
            })
            .collect();
        AssistantTurn {
            message: AssistantMessage {
                text: self.text,
                reasoning: self.reasoning,
                refusal: self.refusal,
                tool_calls,
                thinking: Vec::new(),
            },
            finish: self.finish,
            usage: self.usage,
            model: self.model,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_calls_assemble_by_key_and_keep_their_first_name() {
        let mut a = StreamAssembler::default();
        assert!(
            a.tool_call_delta(1, Some("b"), Some("second"), Some(""))
                .unwrap()
        );
        assert!(
            a.tool_call_delta(0, Some("a"), Some("first"), Some("{\"x"))
                .unwrap()
        );
        assert!(
            !a.tool_call_delta(0, None, Some(""), Some("\": 1}"))
                .unwrap()
        );
        a.tool_call_delta(1, Some(""), None, Some("{}")).unwrap();
        let turn = a.finish();
        let calls = turn.message.tool_calls;
        assert_eq!(
            calls[0],
            ToolCall {
                id: "a".into(),
                name: "first".into(),
                arguments: "{\"x\": 1}".into()
            }
        );
        assert_eq!(
            calls[1],
            ToolCall {
                id: "b".into(),
                name: "second".into(),
                arguments: "{}".into()
            }
        );
    }

    #[test]
    fn the_cap_is_enforced_across_every_kind_of_delta() {
        let mut a = StreamAssembler::new(10);
        a.push_text("12345").unwrap();
        a.push_reasoning("1234").unwrap();
        assert!(matches!(
            a.tool_call_delta(0, None, None, Some("12")),
            Err(StreamError::TooLarge { limit: 10 })
        ));
    }

    #[test]
    fn a_later_missing_finish_does_not_clear_an_earlier_one() {
        let mut a = StreamAssembler::default();
        a.set_finish(Some(FinishReason::Stop));
        a.set_finish(None);
        assert_eq!(a.finish().finish, Some(FinishReason::Stop));
    }

    #[test]
    fn calls_without_ids_get_one() {
        let mut a = StreamAssembler::default();
        a.tool_call_delta(0, None, Some("t"), Some("{}")).unwrap();
        assert!(a.finish().message.tool_calls[0].id.starts_with("call_"));
    }
}
