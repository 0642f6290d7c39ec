//! The conversation model: messages, tool calls and results, finish reasons and token
//! usage, independent of any provider's wire format.
//!
//! Providers translate to and from these types; sessions, journals and events only
//! ever see these.

use serde::{Deserialize, Serialize};

/// One message of a transcript.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Instructions from the role or the caller.
    System {
        /// The system prompt.
        content: String,
    },
    /// A prompt from the person or the parent agent.
    User {
        /// The prompt.
        content: String,
    },
    /// One model turn.
    Assistant(AssistantMessage),
    /// The result of one tool call, answering the call with the same id.
    Tool(ToolResult),
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::System {
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User {
            content: content.into(),
        }
    }
}

/// What the model said in one turn.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// The visible answer.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// Reasoning the provider exposed (`reasoning_content` or `reasoning`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reasoning: String,
    /// A refusal, when the model declined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// Tool calls, in the order the model made them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Anthropic's thinking blocks, kept whole: the next request must carry them
    /// back unchanged, signatures included, or the API refuses it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thinking: Vec<ThinkingBlock>,
}

/// One block of a model's extended thinking, as the provider sent it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ThinkingBlock {
    /// Thinking text (possibly empty when the provider omits it) and its signature.
    Thinking {
        /// The thinking text.
        thinking: String,
        /// The provider's signature over it.
        signature: String,
    },
    /// Thinking the provider encrypted.
    RedactedThinking {
        /// The opaque payload.
        data: String,
    },
}

/// A tool call requested by the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id; the result must carry the same one.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments exactly as the model wrote them (JSON text, possibly invalid).
    pub arguments: String,
}

impl ToolCall {
    /// The arguments parsed as JSON; empty arguments are an empty object.
    pub fn parsed_arguments(&self) -> Result<serde_json::Value, serde_json::Error> {
        if self.arguments.trim().is_empty() {
            return Ok(serde_json::Value::Object(serde_json::Map::new()));
        }
        serde_json::from_str(&self.arguments)
    }
}

/// The answer to one tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The id of the call this answers.
    pub tool_call_id: String,
    /// What the tool returned, or the error shown to the model.
    pub content: String,
    /// Whether the call failed; the model sees the error text and may try again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl ToolResult {
    /// The placeholder for a call whose result was never recorded (the turn was cut off).
    pub fn interrupted(tool_call_id: impl Into<String>) -> Self {
        Self {
            tool_call_id: tool_call_id.into(),
            content: "interrupted: this tool call did not complete and its result was lost"
                .to_owned(),
            is_error: true,
        }
    }
}

/// Why the model stopped a turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end (`stop`, `end_turn`).
    Stop,
    /// The model wants tools run (`tool_calls`, `tool_use`, legacy `function_call`).
    ToolCalls,
    /// The output hit the token limit (`length`, `max_tokens`).
    Length,
    /// The provider's content filter cut the answer.
    ContentFilter,
    /// Any other value, kept verbatim.
    Other(String),
}

impl FinishReason {
    /// Maps a wire value; an empty string means "no finish reason".
    pub fn from_wire(value: &str) -> Option<Self> {
        Some(match value {
            "" => return None,
            "stop" | "end_turn" | "stop_sequence" => Self::Stop,
            "tool_calls" | "tool_use" | "function_call" => Self::ToolCalls,
            "length" | "max_tokens" => Self::Length,
            "content_filter" | "refusal" => Self::ContentFilter,
            other => Self::Other(other.to_owned()),
        })
    }
}

/// Token counts for one request, or summed over many.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the prompt.
    pub input_tokens: u64,
    /// Tokens generated.
    pub output_tokens: u64,
    /// Prompt tokens served from the provider's cache.
    #[serde(default)]
    pub cached_tokens: u64,
    /// Prompt tokens written to the provider's cache (Anthropic's cache writes).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// Generated tokens spent on reasoning.
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Input plus output.
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    /// Adds another count to this one.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_tokens += other.cached_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One assembled model turn: the message plus how and why it ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantTurn {
    /// What the model said.
    pub message: AssistantMessage,
    /// Why it stopped; `None` when the provider never said.
    pub finish: Option<FinishReason>,
    /// Token usage reported for the request.
    pub usage: Option<Usage>,
    /// The model that answered, as the provider reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl AssistantMessage {
    /// What the turn says to the person: its text, or its refusal when it has no
    /// text.
    pub fn answer(&self) -> &str {
        match (&self.text, &self.refusal) {
            (text, Some(refusal)) if text.is_empty() => refusal,
            (text, _) => text,
        }
    }
}

impl AssistantTurn {
    /// True when the turn carries nothing at all: no text, reasoning, refusal or call.
    pub fn is_empty(&self) -> bool {
        let m = &self.message;
        m.text.is_empty()
            && m.reasoning.is_empty()
            && m.refusal.is_none()
            && m.tool_calls.is_empty()
    }
}

/// What [`enforce_protocol`] had to repair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Repairs {
    /// Missing results replaced by an `interrupted` placeholder.
    pub inserted: usize,
    /// Tool results that answered no call (or answered one twice), dropped.
    pub dropped: usize,
}

/// Makes a transcript valid for a provider: every assistant tool call is followed by
/// exactly one result, in call order. A missing result becomes an `interrupted`
/// placeholder; a stray result is dropped. Results that arrived out of order (parallel
/// calls journaled as they finished) are put back in call order.
pub fn enforce_protocol(messages: &[Message]) -> (Vec<Message>, Repairs) {
    let mut out = Vec::with_capacity(messages.len());
    let mut repairs = Repairs::default();
    let mut i = 0;
    while i < messages.len() {
        match &messages[i] {
            Message::Assistant(a) if !a.tool_calls.is_empty() => {
                out.push(messages[i].clone());
                let mut results: Vec<&ToolResult> = Vec::new();
                i += 1;
                while let Some(Message::Tool(r)) = messages.get(i) {
                    results.push(r);
                    i += 1;
                }
                let mut used = vec![false; results.len()];
                for call in &a.tool_calls {
                    let found = results
                        .iter()
                        .enumerate()
                        .find(|(j, r)| !used[*j] && r.tool_call_id == call.id)
                        .map(|(j, r)| (j, (*r).clone()));
                    match found {
                        Some((j, r)) => {
                            used[j] = true;
                            out.push(Message::Tool(r));
                        }
                        None => {
                            repairs.inserted += 1;
                            out.push(Message::Tool(ToolResult::interrupted(&call.id)));
                        }
                    }
                }
                repairs.dropped += used.iter().filter(|u| !**u).count();
            }
            Message::Tool(_) => {
                repairs.dropped += 1;
                i += 1;
            }
            other => {
                out.push(other.clone());
                i += 1;
            }
        }
    }
    (out, repairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "t".into(),
            arguments: "{}".into(),
        }
    }

    fn result(id: &str) -> Message {
        Message::Tool(ToolResult {
            tool_call_id: id.into(),
            content: format!("r{id}"),
            is_error: false,
        })
    }

    fn calls(ids: &[&str]) -> Message {
        Message::Assistant(AssistantMessage {
            tool_calls: ids.iter().map(|id| call(id)).collect(),
            ..AssistantMessage::default()
        })
    }

    #[test]
    fn a_missing_result_becomes_an_interrupted_placeholder() {
        let t = vec![
            Message::user("go"),
            calls(&["a", "b"]),
            result("a"),
            Message::user("next"),
        ];
        let (fixed, repairs) = enforce_protocol(&t);
        assert_eq!(
            repairs,
            Repairs {
                inserted: 1,
                dropped: 0
            }
        );
        assert_eq!(
            fixed,
            vec![
                Message::user("go"),
                calls(&["a", "b"]),
                result("a"),
                Message::Tool(ToolResult::interrupted("b")),
                Message::user("next"),
            ]
        );
    }

    #[test]
    fn stray_and_duplicate_results_are_dropped_and_order_restored() {
        let t = vec![
            result("x"),
            Message::user("go"),
            calls(&["a", "b"]),
            result("b"),
            result("a"),
            result("a"),
            result("z"),
        ];
        let (fixed, repairs) = enforce_protocol(&t);
        assert_eq!(
            repairs,
            Repairs {
                inserted: 0,
                dropped: 3
            }
        );
        assert_eq!(
            fixed,
            vec![
                Message::user("go"),
                calls(&["a", "b"]),
                result("a"),
                result("b")
            ]
        );
    }

    #[test]
    fn a_valid_transcript_is_untouched() {
        let t = vec![
            Message::system("s"),
            Message::user("go"),
            calls(&["a"]),
            result("a"),
        ];
        assert_eq!(enforce_protocol(&t), (t.clone(), Repairs::default()));
    }
}
