//! The Anthropic Messages client: streaming with an idle timeout, and non-streaming
//! with a fixed one. One request per call; retrying is the session's job.

mod cache;
pub mod decoder;
pub(crate) mod pause;
pub(crate) mod wire;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use self::decoder::{Block, MessageState, MessagesStreamDecoder};
use self::pause::{Continuation, Next};
use crate::conversation::AssistantTurn;
use crate::error::{ConfigError, LlmError, ProviderError, excerpt};
use crate::llm::assembler::DEFAULT_MAX_ANSWER_BYTES;
use crate::llm::cassette::Recorder;
use crate::llm::http::{HttpApi, HttpApiArgs};
use crate::llm::{ChatRequest, DeltaSink, Provider};

/// The API root used when none is configured.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The API version sent with every request.
pub const API_VERSION: &str = "2023-06-01";

/// Output tokens asked for when a request and the provider's settings name none:
/// what current Claude models allow at least.
pub const DEFAULT_MAX_TOKENS: u32 = 32_000;

/// How to reach the server.
#[derive(Clone)]
pub struct AnthropicConfig {
    /// The API root as Anthropic's SDKs take it (`https://api.anthropic.com`);
    /// `/v1/messages` is appended.
    pub base_url: String,
    /// Sent as `x-api-key`. Never printed.
    pub api_key: Option<String>,
    /// Used when a request sets no `max_tokens`, which the API requires (default
    /// 32 000).
    pub max_tokens: u32,
    /// Turns extended thinking on with this token budget.
    pub thinking_budget: Option<u32>,
    /// A stream with no event for this long has stalled (default 120 s).
    pub idle_timeout: Duration,
    /// A non-streaming request may take this long (default 600 s).
    pub request_timeout: Duration,
    /// The largest answer accepted (default 8 MiB).
    pub max_answer_bytes: usize,
}

impl AnthropicConfig {
    /// A configuration with default limits.
    pub fn new(base_url: impl Into<String>, api_key: Option<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key,
            max_tokens: DEFAULT_MAX_TOKENS,
            thinking_budget: None,
            idle_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(600),
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
        }
    }
}

impl fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("max_tokens", &self.max_tokens)
            .field("thinking_budget", &self.thinking_budget)
            .field("idle_timeout", &self.idle_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("max_answer_bytes", &self.max_answer_bytes)
            .finish()
    }
}

/// The client. Cheap to share: one connection pool for every session.
#[derive(Debug)]
pub struct AnthropicClient {
    api: HttpApi,
    options: wire::Options,
}

impl AnthropicClient {
    /// Validates the configuration and builds the client.
    pub fn new(config: AnthropicConfig) -> Result<Self, ConfigError> {
        let api = HttpApi::new(HttpApiArgs {
            base_url: &config.base_url,
            path: "/v1/messages",
            headers: std::iter::once(("anthropic-version", API_VERSION.to_owned()))
                .chain(config.api_key.iter().map(|key| ("x-api-key", key.clone())))
                .collect(),
            secret: config.api_key,
            idle_timeout: config.idle_timeout,
            request_timeout: config.request_timeout,
            max_answer_bytes: config.max_answer_bytes,
            protocol: "anthropic",
            error_body: wire::error_body,
        })?;
        Ok(Self {
            api,
            options: wire::Options {
                max_tokens: config.max_tokens,
                thinking_budget: config.thinking_budget,
            },
        })
    }

    /// Records every exchange with the server to `recorder` (`--record`).
    pub fn record_to(&mut self, recorder: Arc<Recorder>) {
        self.api.record_to(recorder);
    }

    /// One turn, asked again while the API pauses it (see [`pause`]).
    async fn stream_impl(
        &self,
        request: &ChatRequest,
        sink: DeltaSink<'_>,
        cancel: &CancellationToken,
    ) -> Result<AssistantTurn, LlmError> {
        let mut continuation = Continuation::default();
        let mut again = None;
        loop {
            let part = self
                .stream_one(again.as_ref().unwrap_or(request), sink, cancel)
                .await
                .map_err(|e| continuation.failed(e))?;
            match continuation.next(request, part)? {
                Next::Done(turn) => return Ok(turn),
                Next::Again(next) => again = Some(next),
            }
        }
    }

    async fn stream_one(
        &self,
        request: &ChatRequest,
        sink: DeltaSink<'_>,
        cancel: &CancellationToken,
    ) -> Result<AssistantTurn, LlmError> {
        let body = wire::request_body(request, self.options, true);
        let decoder = MessagesStreamDecoder::new(self.api.max_answer_bytes);
        self.api
            .stream(self.api.call(request, &body), decoder, sink, cancel)
            .await
    }

    async fn complete_impl(&self, request: &ChatRequest) -> Result<AssistantTurn, LlmError> {
        let mut continuation = Continuation::default();
        let mut again = None;
        loop {
            let current = again.as_ref().unwrap_or(request);
            let body = wire::request_body(current, self.options, false);
            let bytes = self.api.complete(self.api.call(current, &body)).await?;
            match continuation.next(request, message_turn(&bytes)?)? {
                Next::Done(turn) => return Ok(turn),
                Next::Again(next) => again = Some(next),
            }
        }
    }
}

/// The turn in a whole (non-streamed) Messages response body.
pub(crate) fn message_turn(bytes: &[u8]) -> Result<AssistantTurn, LlmError> {
    let json: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| ProviderError::Decode(excerpt(&e.to_string())))?;
    if json["type"] == "error" {
        return Err(wire::in_band_error(&json["error"]).into());
    }
    let mut message = MessageState::from_message(&json);
    let content = json["content"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (index, block) in (0u64..).zip(content) {
        message.push_block(Block::from_start(index, block));
    }
    Ok(message.turn())
}

impl Provider for AnthropicClient {
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
