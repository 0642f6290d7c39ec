//! The OpenAI-compatible Chat Completions client (OpenAI, DeepSeek, xAI, Groq,
//! Mistral, vLLM, Ollama, llama.cpp's server): streaming with an idle timeout, and
//! non-streaming with a fixed one. One request per call; retrying is the session's job.

pub mod decoder;
pub(crate) mod wire;

use std::fmt;
use std::time::{Duration, SystemTime};

use eventsource_stream::{EventStreamError, Eventsource};
use futures::StreamExt;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use self::decoder::{ChatStreamDecoder, Step};
use crate::conversation::{AssistantMessage, AssistantTurn, FinishReason, ToolCall};
use crate::error::{ConfigError, LlmError, ProviderError, StreamError, excerpt};
use crate::llm::assembler::DEFAULT_MAX_ANSWER_BYTES;
use crate::llm::{ChatRequest, DeltaSink, Provider, retry};

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
    http: reqwest::Client,
    endpoint: reqwest::Url,
    host: String,
    config: OpenAiConfig,
}

impl OpenAiClient {
    /// Validates the configuration and builds the client.
    pub fn new(config: OpenAiConfig) -> Result<Self, ConfigError> {
        let bad = |reason: &str| ConfigError::BadBaseUrl {
            url: config.base_url.clone(),
            reason: reason.to_owned(),
        };
        let root = reqwest::Url::parse(config.base_url.trim_end_matches('/'))
            .map_err(|e| bad(&e.to_string()))?;
        if !matches!(root.scheme(), "http" | "https") {
            return Err(bad("the scheme must be http or https"));
        }
        let endpoint = reqwest::Url::parse(&format!(
            "{}/chat/completions",
            root.as_str().trim_end_matches('/')
        ))
        .map_err(|e| bad(&e.to_string()))?;
        let host = format!(
            "{}:{}",
            root.host_str().unwrap_or("?"),
            root.port_or_known_default().unwrap_or(0)
        );
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| bad(&e.without_url().to_string()))?;
        Ok(Self {
            http,
            endpoint,
            host,
            config,
        })
    }

    fn post(&self, body: &serde_json::Value) -> reqwest::RequestBuilder {
        let builder = self.http.post(self.endpoint.clone()).json(body);
        match &self.config.api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    fn transport_error(&self, e: &reqwest::Error) -> ProviderError {
        if e.is_connect() {
            let reason = std::error::Error::source(e)
                .map_or_else(|| "connection failed".to_owned(), ToString::to_string);
            return ProviderError::Connect {
                host: self.host.clone(),
                reason: excerpt(&reason),
            };
        }
        if e.is_timeout() {
            return ProviderError::Timeout(self.config.request_timeout);
        }
        let mut chain = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            chain = format!("{chain}: {s}");
            source = s.source();
        }
        ProviderError::Transport(excerpt(&chain.replace(self.endpoint.as_str(), &self.host)))
    }

    /// Turns a non-success response into a typed error, reading at most 64 KiB of
    /// its body, and never waiting on it longer than the idle timeout per chunk.
    async fn status_error(&self, response: reqwest::Response) -> ProviderError {
        let status = response.status().as_u16();
        let retry_after = retry::retry_after(response.headers(), SystemTime::now());
        // Bounded per chunk and overall: a server that trickles its error must not
        // hold the turn past one idle timeout.
        let idle = self.config.idle_timeout;
        let read = tokio::time::timeout(idle, read_capped(response, 64 * 1024, idle)).await;
        let body = match read {
            Ok(Ok((body, _)) | Err(ReadError::Stalled(body))) => body,
            Ok(Err(ReadError::Transport(_))) | Err(_) => Vec::new(),
        };
        let (code, message) = match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(json) => {
                let error = json.get("error").unwrap_or(&json);
                let (_, code, message) = wire::error_fields(error);
                (code, message)
            }
            Err(_) => (None, excerpt(&String::from_utf8_lossy(&body))),
        };
        // Some proxies echo the request's credentials back in their error text.
        let message = match &self.config.api_key {
            Some(key) if !key.is_empty() => message.replace(key.as_str(), "[redacted]"),
            _ => message,
        };
        ProviderError::Status {
            status,
            message,
            code,
            retry_after,
        }
    }

    async fn stream_impl(
        &self,
        request: &ChatRequest,
        sink: DeltaSink<'_>,
        cancel: &CancellationToken,
    ) -> Result<AssistantTurn, LlmError> {
        let idle = self.config.idle_timeout;
        let body = wire::request_body(request, true);
        let send = self
            .post(&body)
            .header("accept", "text/event-stream")
            .send();
        let response = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(cancelled(AssistantTurn::default())),
            sent = tokio::time::timeout(idle, send) => match sent {
                Err(_) => return Err(StreamError::IdleTimeout(idle).into()),
                Ok(Err(e)) => return Err(self.transport_error(&e).into()),
                Ok(Ok(response)) => response,
            },
        };
        if !response.status().is_success() {
            return tokio::select! {
                biased;
                () = cancel.cancelled() => Err(cancelled(AssistantTurn::default())),
                error = self.status_error(response) => Err(error.into()),
            };
        }
        let mut events =
            crate::llm::sse::split_events(Box::pin(response.bytes_stream())).eventsource();
        let mut decoder = ChatStreamDecoder::new(self.config.max_answer_bytes);
        loop {
            let next = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(cancelled(decoder.snapshot())),
                next = tokio::time::timeout(idle, events.next()) => next,
            };
            let event = match next {
                Err(_) => return Err(StreamError::IdleTimeout(idle).into()),
                Ok(None) => break,
                Ok(Some(Err(EventStreamError::Transport(e)))) => {
                    return Err(StreamError::Disconnected(excerpt(
                        &self.transport_error(&e).to_string(),
                    ))
                    .into());
                }
                Ok(Some(Err(e))) => {
                    return Err(StreamError::Malformed(excerpt(&e.to_string())).into());
                }
                Ok(Some(Ok(event))) => event,
            };
            match decoder.on_event(&event.data, Some(sink))? {
                Step::Continue => {}
                Step::Done => break,
                Step::Error(e) => return Err(e.into()),
            }
        }
        Ok(decoder.into_turn()?)
    }

    async fn complete_impl(&self, request: &ChatRequest) -> Result<AssistantTurn, LlmError> {
        let body = wire::request_body(request, false);
        let response = self
            .post(&body)
            .timeout(self.config.request_timeout)
            .send()
            .await
            .map_err(|e| self.transport_error(&e))?;
        if !response.status().is_success() {
            return Err(self.status_error(response).await.into());
        }
        let limit = self.config.max_answer_bytes;
        let bytes = match read_capped(response, limit, self.config.request_timeout).await {
            Ok((_, true)) => return Err(StreamError::TooLarge { limit }.into()),
            Ok((bytes, false)) => bytes,
            Err(ReadError::Stalled(_)) => {
                return Err(ProviderError::Timeout(self.config.request_timeout).into());
            }
            Err(ReadError::Transport(e)) => return Err(self.transport_error(&e).into()),
        };
        let completion: wire::Completion = serde_json::from_slice(&bytes)
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
                    .map(|c| ToolCall {
                        id: c
                            .id
                            .unwrap_or_else(|| format!("call_{}", uuid::Uuid::new_v4().simple())),
                        name: c.function.name.unwrap_or_default(),
                        arguments: c.function.arguments.unwrap_or_default(),
                    })
                    .collect(),
            },
            finish: choice
                .finish_reason
                .as_deref()
                .and_then(FinishReason::from_wire),
            usage,
            model: completion.model,
        })
    }
}

fn cancelled(partial: AssistantTurn) -> LlmError {
    LlmError::Cancelled {
        partial: Box::new(partial),
    }
}

/// Reads a body up to `limit` bytes, waiting at most `idle` for each chunk. Returns
/// what was read and whether the body went on past the limit.
async fn read_capped(
    response: reqwest::Response,
    limit: usize,
    idle: Duration,
) -> Result<(Vec<u8>, bool), ReadError> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    loop {
        match tokio::time::timeout(idle, stream.next()).await {
            Err(_) => return Err(ReadError::Stalled(body)),
            Ok(None) => return Ok((body, false)),
            Ok(Some(Err(e))) => return Err(ReadError::Transport(e)),
            Ok(Some(Ok(chunk))) => {
                if body.len() + chunk.len() > limit {
                    return Ok((body, true));
                }
                body.extend_from_slice(&chunk);
            }
        }
    }
}

enum ReadError {
    /// No chunk for the idle time; carries what had arrived.
    Stalled(Vec<u8>),
    Transport(reqwest::Error),
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
