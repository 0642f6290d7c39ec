//! OpenAI Chat Completions wire types. Lenient by design: every field is optional,
//! unknown fields are ignored, and strings borrow from the event when they can.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use crate::conversation::Usage;
use crate::error::{ProviderError, excerpt};

/// One `chat.completion.chunk` (or an in-band error object).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Chunk<'a> {
    #[serde(borrow)]
    pub(crate) id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub(crate) model: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub(crate) choices: Option<Vec<ChunkChoice<'a>>>,
    pub(crate) usage: Option<Value>,
    pub(crate) x_groq: Option<XGroq>,
    pub(crate) error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct XGroq {
    pub(crate) usage: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ChunkChoice<'a> {
    pub(crate) index: Option<u32>,
    #[serde(borrow)]
    pub(crate) delta: Option<Delta<'a>>,
    #[serde(borrow)]
    pub(crate) finish_reason: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Delta<'a> {
    #[serde(borrow)]
    pub(crate) role: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub(crate) content: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub(crate) reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub(crate) reasoning: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub(crate) refusal: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub(crate) tool_calls: Option<Vec<ToolCallDelta<'a>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ToolCallDelta<'a> {
    pub(crate) index: Option<u32>,
    #[serde(borrow)]
    pub(crate) id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub(crate) function: Option<FunctionDelta<'a>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct FunctionDelta<'a> {
    #[serde(borrow)]
    pub(crate) name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub(crate) arguments: Option<Cow<'a, str>>,
}

/// A whole non-streaming `chat.completion`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Completion {
    pub(crate) model: Option<String>,
    pub(crate) choices: Vec<CompletionChoice>,
    pub(crate) usage: Option<Value>,
    pub(crate) x_groq: Option<XGroq>,
    pub(crate) error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct CompletionChoice {
    pub(crate) message: CompletionMessage,
    pub(crate) finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct CompletionMessage {
    pub(crate) content: Option<String>,
    pub(crate) reasoning_content: Option<String>,
    pub(crate) reasoning: Option<String>,
    pub(crate) refusal: Option<String>,
    pub(crate) tool_calls: Vec<CompletionToolCall>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct CompletionToolCall {
    pub(crate) id: Option<String>,
    pub(crate) function: CompletionFunction,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct CompletionFunction {
    pub(crate) name: Option<String>,
    pub(crate) arguments: Option<String>,
}

/// Normalizes a usage object from any OpenAI-compatible server.
pub(crate) fn usage_from(value: &Value) -> Usage {
    let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    let input = value
        .get("prompt_tokens")
        .or_else(|| value.get("input_tokens"));
    let output = value
        .get("completion_tokens")
        .or_else(|| value.get("output_tokens"));
    let cached = value
        .pointer("/prompt_tokens_details/cached_tokens")
        .or_else(|| value.get("prompt_cache_hit_tokens"));
    let reasoning = value.pointer("/completion_tokens_details/reasoning_tokens");
    Usage {
        input_tokens: n(input),
        output_tokens: n(output),
        cached_tokens: n(cached),
        cache_write_tokens: 0,
        reasoning_tokens: n(reasoning),
    }
}

/// Reads an error object (`{"message","type","code"}`, or a bare string) into an
/// in-band provider error.
pub(crate) fn in_band_error(error: &Value) -> ProviderError {
    let (kind, code, message) = error_fields(error);
    ProviderError::InBand {
        kind,
        code,
        message,
    }
}

/// `(type, code, message)` of an error object; a numeric code becomes its text.
pub(crate) fn error_fields(error: &Value) -> (Option<String>, Option<String>, String) {
    if let Some(s) = error.as_str() {
        return (None, None, excerpt(s));
    }
    let text = |v: Option<&Value>| match v {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let message = text(error.get("message")).unwrap_or_default();
    (
        text(error.get("type")),
        text(error.get("code")),
        excerpt(&message),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn usage_reads_every_dialect() {
        let openai = json!({"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 3}, "completion_tokens_details": {"reasoning_tokens": 2}});
        assert_eq!(
            usage_from(&openai),
            Usage {
                input_tokens: 10,
                output_tokens: 5,
                cached_tokens: 3,
                cache_write_tokens: 0,
                reasoning_tokens: 2
            }
        );
        let deepseek =
            json!({"prompt_tokens": 10, "completion_tokens": 5, "prompt_cache_hit_tokens": 4});
        assert_eq!(usage_from(&deepseek).cached_tokens, 4);
    }

    #[test]
    fn error_objects_tolerate_numeric_codes_and_bare_strings() {
        let (kind, code, message) =
            error_fields(&json!({"message": "x", "type": "server_error", "code": 500}));
        assert_eq!(
            (kind.as_deref(), code.as_deref(), message.as_str()),
            (Some("server_error"), Some("500"), "x")
        );
        assert_eq!(error_fields(&json!("plain")).2, "plain");
    }
}
