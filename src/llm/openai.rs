//! The OpenAI-compatible Chat Completions client (OpenAI, DeepSeek, xAI, Groq,
//! Mistral, vLLM, Ollama, llama.cpp's server): streaming with an idle timeout, and
//! non-streaming with a fixed one. One request per call; retrying is the session's job.

mod body;
pub mod decoder;
pub(crate) mod wire;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use self::decoder::ChatStreamDecoder;
use crate::conversation::{AssistantMessage, AssistantTurn, FinishReason, ToolCall};
use crate::error::{ConfigError, LlmError, ProviderError, excerpt};
use crate::llm::assembler::{DEFAULT_MAX_ANSWER_BYTES, made_up_call_id};
use crate::llm::cassette::Recorder;
use crate::llm::http::{HttpApi, HttpApiArgs};
use crate::llm::{ChatRequest, DeltaSink, Provider};

/// The API root used when none is configured.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// How to reach the server.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// The API root including `/v1`, as OpenAI's SDKs take it; `/chat/completions` is
    /// appended.
    pub base_url: String,
    /// Sent as a bearer token when present. Never printed.
    pub api_key: Option<String>,
    /// A stream with no event for this long has stalled (default 120 s).
    pub idle_timeout: Duration,
    /// A non-streaming request may take this long (default 600 s).
    pub request_timeout: Duration,
    /// The largest answer accepted (default 8 MiB).
    pub max_answer_bytes: usize,
}

impl OpenAiConfig {
    /// A configuration with default timeouts and cap.
    pub fn new(base_url: impl Into<String>, api_key: Option<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key,
            idle_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(600),
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
        }
    }
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("idle_timeout", &self.idle_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("max_answer_bytes", &self.max_answer_bytes)
            .finish()
    }
}

/// The client. Cheap to share: one connection pool for every session.
#[derive(Debug)]
pub struct OpenAiClient {
    api: HttpApi,
}

impl OpenAiClient {
    /// Validates the configuration and builds the client.
    pub fn new(config: OpenAiConfig) -> Result<Self, ConfigError> {
        let api = HttpApi::new(HttpApiArgs {
            base_url: &config.base_url,
            path: "/chat/completions",
            headers: config
                .api_key
                .iter()
                .map(|key| ("authorization", format!("Bearer {key}")))
                .collect(),
            secret: config.api_key,
            idle_timeout: config.idle_timeout,
            request_timeout: config.request_timeout,
            max_answer_bytes: config.max_answer_bytes,
            protocol: "openai",
            error_body,
        })?;
        Ok(Self { api })
    }

    /// Records every exchange with the server to `recorder` (`--record`).
    pub fn record_to(&mut self, recorder: Arc<Recorder>) {
        self.api.record_to(recorder);
    }

    async fn stream_impl(
        &self,
        request: &ChatRequest,
        sink: DeltaSink<'_>,
        cancel: &CancellationToken,
    ) -> Result<AssistantTurn, LlmError> {
        let body = body::Body::of(request, true);
        let decoder =
            ChatStreamDecoder::new(self.api.max_answer_bytes).with_place(&request.call_id_seed());
        self.api
            .stream(self.api.call(request, &body), decoder, sink, cancel)
            .await
    }

    async fn complete_impl(&self, request: &ChatRequest) -> Result<AssistantTurn, LlmError> {
        let body = body::Body::of(request, false);
        let bytes = self.api.complete(self.api.call(request, &body)).await?;
        completion_turn(&bytes, &request.call_id_seed())
    }
}

/// The turn in a whole (non-streamed) `chat.completion` body; ids made up for
/// calls without one derive from `place`.
pub(crate) fn completion_turn(bytes: &[u8], place: &str) -> Result<AssistantTurn, LlmError> {
    let completion: wire::Completion = serde_json::from_slice(bytes)
        .map_err(|e| ProviderError::Decode(excerpt(&e.to_string())))?;
    if let Some(error) = &completion.error {
        return Err(wire::in_band_error(error).into());
    }
    let usage = completion
        .usage
        .as_ref()
        .or_else(|| completion.x_groq.as_ref().and_then(|x| x.usage.as_ref()))
        .map(wire::usage_from);
    let Some(choice) = completion.choices.into_iter().next() else {
        return Err(ProviderError::Decode("the response has no choices".to_owned()).into());
    };
    let m = choice.message;
    Ok(AssistantTurn {
        message: AssistantMessage {
            text: m.content.unwrap_or_default(),
            reasoning: m.reasoning_content.or(m.reasoning).unwrap_or_default(),
            refusal: m.refusal,
            tool_calls: m
                .tool_calls
                .into_iter()
                .enumerate()
                .map(|(i, c)| ToolCall {
                    id: c.id.unwrap_or_else(|| made_up_call_id(place, i)),
                    name: c.function.name.unwrap_or_default(),
                    arguments: c.function.arguments.unwrap_or_default(),
                })
                .collect(),
            ..AssistantMessage::default()
        },
        finish: choice
            .finish_reason
            .as_deref()
            .and_then(FinishReason::from_wire),
        usage,
        model: completion.model,
    })
}

/// `(code, message)` of an OpenAI-style error body (`{"error": {...}}`).
pub(crate) fn error_body(json: &serde_json::Value) -> (Option<String>, String) {
    let error = json.get("error").unwrap_or(json);
    let (_, code, message) = wire::error_fields(error);
    (code, message)
}

impl Provider for OpenAiClient {
    fn stream_turn<'a>(
        &'a self,
        request: &'a ChatRequest,
        sink: DeltaSink<'a>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<AssistantTurn, LlmError>> {
        Box::pin(self.stream_impl(request, sink, cancel))
    }

    fn complete<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<AssistantTurn, LlmError>> {
        Box::pin(self.complete_impl(request))
    }
}
