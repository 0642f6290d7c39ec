//! The HTTP plumbing every provider shares: one endpoint with its connection pool,
//! streaming a turn through a provider's [`TurnDecoder`] with an idle timeout and a
//! cancel that always gets through, non-streaming reads with a fixed timeout and a
//! size cap, and typed, key-free errors.

mod quiet;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use eventsource_stream::{EventStreamError, Eventsource};
use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::conversation::AssistantTurn;
use crate::error::{ConfigError, ErrorClass, LlmError, ProviderError, StreamError, excerpt};
use crate::llm::cassette::{Capture, Exchange, MAX_RECORDED_BYTES, Recorder, Sent};
use crate::llm::governor::{self, Governor, Wait};
use crate::llm::sse::{SplitError, Step, TurnDecoder, split_events_within};
use crate::llm::{ChatRequest, DeltaSink, StreamDelta, retry};

use self::quiet::Quiet;

/// Reads `(code, message)` out of a provider's JSON error body.
pub(crate) type ErrorBody = fn(&Value) -> (Option<String>, String);

/// One provider endpoint.
pub(crate) struct HttpApi {
    http: reqwest::Client,
    endpoint: reqwest::Url,
    /// Host and port, what errors name instead of the URL.
    host: String,
    /// Redacted from any error text a server echoes back.
    secret: Option<String>,
    pub(crate) idle_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) max_answer_bytes: usize,
    error_body: ErrorBody,
    /// `openai` or `anthropic`, as cassettes name it.
    protocol: &'static str,
    /// Where exchanges are recorded (`--record`).
    recorder: Option<Arc<Recorder>>,
    /// Sent with every request (credentials, API version).
    headers: reqwest::header::HeaderMap,
    /// Shared with every client of the same endpoint: cooldowns and the ceiling
    /// of requests in flight.
    governor: Arc<Governor>,
}

impl std::fmt::Debug for HttpApi {
    // Never the key: clients (and the sessions holding them) may be debug-printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpApi")
            .field("endpoint", &self.endpoint.as_str())
            .field("protocol", &self.protocol)
            .field("idle_timeout", &self.idle_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

/// One request: its body, place and what a replay must match (for the recording)
/// and the request itself.
pub(crate) struct Call<'a> {
    /// The request's body, kept only when recording: otherwise only its bytes,
    /// in `request`, live until they are sent.
    pub(crate) body: Option<Value>,
    pub(crate) place: &'a str,
    /// Taken only when recording.
    pub(crate) sent: Option<Sent>,
    /// Taken to be sent: the body's bytes go with it, and do not stay for as long
    /// as the answer streams (a few kilobytes a session, at a thousand sessions).
    pub(crate) request: Option<reqwest::RequestBuilder>,
}

/// What an [`HttpApi`] is built from.
pub(crate) struct HttpApiArgs<'a> {
    pub(crate) base_url: &'a str,
    /// Appended to the base URL (`/chat/completions`, `/v1/messages`).
    pub(crate) path: &'a str,
    pub(crate) secret: Option<String>,
    pub(crate) idle_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) max_answer_bytes: usize,
    pub(crate) error_body: ErrorBody,
    pub(crate) protocol: &'static str,
    /// Sent with every request: the credentials and the API version, as the
    /// provider wants them.
    pub(crate) headers: Vec<(&'static str, String)>,
}

/// One HTTP client for every provider of the process: one connection pool and
/// one TLS set-up, however many providers the configuration names.
fn shared_client() -> Result<reqwest::Client, String> {
    static CLIENT: std::sync::OnceLock<Result<reqwest::Client, String>> =
        std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .redirect(reqwest::redirect::Policy::custom(|attempt| match redirect(
                    attempt.url(),
                    attempt.previous(),
                ) {
                    Ok(()) => attempt.follow(),
                    Err(refused) => attempt.error(refused),
                }))
                .build()
                .map_err(|e| e.without_url().to_string())
        })
        .clone()
}

/// Redirects followed at most for one request (reqwest's own default).
const MAX_REDIRECTS: usize = 10;

/// Why a redirect was not followed.
#[derive(Debug, thiserror::Error)]
enum RedirectRefused {
    /// To another scheme, host or port: every request carries its provider's key
    /// in a header (`x-api-key`, which reqwest would pass on, as well as
    /// `Authorization`, which it strips), and the conversation in its body.
    #[error(
        "the provider redirected to another origin ({0}); not followed, so neither its key nor the conversation goes there"
    )]
    OtherOrigin(String),
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooMany,
}

/// Whether a request that went through `previous` may follow a redirect to `next`:
/// only to the origin it started at.
fn redirect(next: &reqwest::Url, previous: &[reqwest::Url]) -> Result<(), RedirectRefused> {
    if previous.len() > MAX_REDIRECTS {
        return Err(RedirectRefused::TooMany);
    }
    match previous.first() {
        Some(first) if first.origin() != next.origin() => Err(RedirectRefused::OtherOrigin(
            next.origin().ascii_serialization(),
        )),
        _ => Ok(()),
    }
}

impl HttpApi {
    /// Validates the base URL and builds the client.
    pub(crate) fn new(args: HttpApiArgs<'_>) -> Result<Self, ConfigError> {
        let bad = |reason: &str| ConfigError::BadBaseUrl {
            url: args.base_url.to_owned(),
            reason: reason.to_owned(),
        };
        let root = reqwest::Url::parse(args.base_url.trim_end_matches('/'))
            .map_err(|e| bad(&e.to_string()))?;
        if !matches!(root.scheme(), "http" | "https") {
            return Err(bad("the scheme must be http or https"));
        }
        let endpoint = reqwest::Url::parse(&format!(
            "{}{}",
            root.as_str().trim_end_matches('/'),
            args.path
        ))
        .map_err(|e| bad(&e.to_string()))?;
        let host = format!(
            "{}:{}",
            root.host_str().unwrap_or("?"),
            root.port_or_known_default().unwrap_or(0)
        );
        let http = shared_client().map_err(|e| bad(&e))?;
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &args.headers {
            let mut value = reqwest::header::HeaderValue::from_str(value).map_err(|_| {
                ConfigError::Invalid(format!("the {name} header cannot carry that value"))
            })?;
            value.set_sensitive(true);
            headers.insert(*name, value);
        }
        Ok(Self {
            http,
            headers,
            governor: governor::for_endpoint(endpoint.as_str()),
            endpoint,
            host,
            secret: args.secret,
            idle_timeout: args.idle_timeout,
            request_timeout: args.request_timeout,
            max_answer_bytes: args.max_answer_bytes,
            error_body: args.error_body,
            protocol: args.protocol,
            recorder: None,
        })
    }

    /// Records every exchange that gets a response from now on.
    pub(crate) fn record_to(&mut self, recorder: Arc<Recorder>) {
        self.recorder = Some(recorder);
    }

    fn record(&self, call: &Call<'_>, status: u16, response: &[u8], started: Instant) {
        if let Some(recorder) = &self.recorder {
            recorder.record(&Exchange {
                place: call.place.to_owned(),
                protocol: self.protocol.to_owned(),
                request: call.body.clone().unwrap_or_default(),
                sent: call.sent.clone(),
                status,
                // A proxy may echo the credential back in its body.
                response: self.redact(String::from_utf8_lossy(response).into_owned()),
                duration_ms: started.elapsed().as_millis() as u64,
            });
        }
    }

    /// The request for `body`, sent on `request`'s behalf (its place is what a
    /// recording files it under).
    pub(crate) fn call<'a>(&self, request: &'a ChatRequest, body: &impl Serialize) -> Call<'a> {
        let sending = self
            .http
            .post(self.endpoint.clone())
            .headers(self.headers.clone())
            .json(body);
        let recording = self.recorder.is_some();
        Call {
            body: recording
                .then(|| {
                    (serde_json::to_value(body))
                        .map_err(|e| tracing::error!(error = %e, "cannot record a request's body"))
                        .ok()
                })
                .flatten(),
            place: &request.place,
            sent: recording.then(|| Sent::of(request)),
            request: Some(sending),
        }
    }

    fn transport_error(&self, e: &reqwest::Error) -> ProviderError {
        let refused =
            std::error::Error::source(e).and_then(|s| s.downcast_ref::<RedirectRefused>());
        if let Some(refused) = refused {
            return ProviderError::Redirect(refused.to_string());
        }
        if e.is_connect() {
            let reason = root_cause(e);
            return ProviderError::Connect {
                host: self.host.clone(),
                reason: excerpt(&reason),
            };
        }
        if e.is_timeout() {
            return ProviderError::Timeout(self.request_timeout);
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
    async fn status_error(&self, response: reqwest::Response) -> (ProviderError, Vec<u8>) {
        let status = response.status().as_u16();
        let retry_after = retry::retry_after(response.headers(), SystemTime::now());
        let request_id = request_id(response.headers());
        // Bounded per chunk and overall: a server that trickles its error must not
        // hold the turn past one idle timeout.
        let idle = self.idle_timeout;
        let read = tokio::time::timeout(idle, read_capped(response, 64 * 1024, idle)).await;
        let body = match read {
            Ok(Ok((body, _)) | Err(ReadError::Stalled(body))) => body,
            Ok(Err(ReadError::Transport(_))) | Err(_) => Vec::new(),
        };
        let (code, message) = match serde_json::from_slice::<Value>(&body) {
            Ok(json) => (self.error_body)(&json),
            Err(_) => (None, excerpt(&String::from_utf8_lossy(&body))),
        };
        let error = ProviderError::Status {
            status,
            message: self.redact(message),
            code,
            retry_after,
            request_id,
        };
        // An overloaded endpoint makes every session of it wait; an error that
        // no wait can mend (a spent quota, say) does not.
        if matches!(status, 429 | 529) && matches!(error.class(), ErrorClass::Retryable { .. }) {
            self.governor.rate_limited(retry_after);
        }
        (error, body)
    }

    /// Some proxies echo the request's credentials back in their error text.
    fn redact(&self, message: String) -> String {
        match &self.secret {
            Some(key) if !key.is_empty() => message.replace(key.as_str(), "[redacted]"),
            _ => message,
        }
    }

    /// Sends a streaming request and decodes its events until the stream completes,
    /// fails, stalls for the idle timeout, or `cancel` fires (checked between events,
    /// so a cancel is never stuck behind a slow server).
    pub(crate) async fn stream<D: TurnDecoder>(
        &self,
        mut call: Call<'_>,
        decoder: D,
        sink: DeltaSink<'_>,
        cancel: &CancellationToken,
    ) -> Result<AssistantTurn, LlmError> {
        let started = Instant::now();
        let captured = Arc::new(Mutex::new(Capture::new(MAX_RECORDED_BYTES)));
        let result = self
            .stream_inner(&mut call, decoder, sink, cancel, &captured, started)
            .await;
        if !matches!(result, Err(LlmError::Cancelled { .. })) {
            let mut captured = captured
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !captured.is_empty() {
                self.record(&call, 200, &captured.take(), started);
            }
        }
        result
    }

    async fn stream_inner<D: TurnDecoder>(
        &self,
        call: &mut Call<'_>,
        mut decoder: D,
        sink: DeltaSink<'_>,
        cancel: &CancellationToken,
        captured: &Arc<Mutex<Capture>>,
        started: Instant,
    ) -> Result<AssistantTurn, LlmError> {
        let idle = self.idle_timeout;
        let request = call.request.take().ok_or_else(|| {
            ProviderError::Transport("the request body cannot be sent".to_owned())
        })?;
        // Held until the stream ends: it counts against the endpoint's ceiling.
        let _permit = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(cancelled(AssistantTurn::default())),
            permit = self.governor.acquire(|Wait::Cooldown(wait)| sink(StreamDelta::RateLimited { wait })) => permit,
        };
        let send = request.header("accept", "text/event-stream").send();
        let response = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(cancelled(AssistantTurn::default())),
            sent = tokio::time::timeout(idle, send) => match sent {
                Err(_) => return Err(StreamError::IdleTimeout(idle).into()),
                Ok(Err(e)) => return Err(self.transport_error(&e).into()),
                Ok(Ok(response)) => response,
            },
        };
        self.judged_by(&response);
        if !response.status().is_success() {
            let status = response.status().as_u16();
            return tokio::select! {
                biased;
                () = cancel.cancelled() => Err(cancelled(AssistantTurn::default())),
                (error, body) = self.status_error(response) => {
                    self.record(call, status, &body, started);
                    Err(error.into())
                }
            };
        }
        let tee = captured.clone();
        let recording = self.recorder.is_some();
        let bytes = response.bytes_stream().inspect(move |chunk| {
            if recording && let Ok(chunk) = chunk {
                tee.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(chunk);
            }
        });
        let mut events = split_events_within(Box::pin(bytes), self.max_answer_bytes).eventsource();
        // One cancellation waiter and one idle timer for the whole stream, not a
        // new pair for every event.
        let cancel_wait = cancel.cancelled();
        tokio::pin!(cancel_wait);
        let mut quiet = Quiet::new(idle);
        loop {
            let next = tokio::select! {
                biased;
                () = &mut cancel_wait => return Err(cancelled(decoder.snapshot())),
                next = events.next() => next,
                () = quiet.expired() => return Err(StreamError::IdleTimeout(idle).into()),
            };
            quiet.heard();
            let event = match next {
                None => break,
                Some(Err(EventStreamError::Transport(SplitError::Inner(e)))) => {
                    return Err(StreamError::Disconnected(excerpt(
                        &self.transport_error(&e).to_string(),
                    ))
                    .into());
                }
                Some(Err(EventStreamError::Transport(SplitError::TooLarge { limit }))) => {
                    return Err(StreamError::TooLarge { limit }.into());
                }
                Some(Err(e)) => {
                    return Err(StreamError::Malformed(excerpt(&e.to_string())).into());
                }
                Some(Ok(event)) => event,
            };
            match decoder.on_event(&event.data, Some(sink))? {
                Step::Continue => {}
                Step::Done => break,
                Step::Error(e) => {
                    if overloaded(&e) {
                        self.governor.rate_limited(None);
                    }
                    return Err(self.redact_error(e).into());
                }
            }
        }
        Ok(decoder.into_turn()?)
    }

    fn redact_error(&self, error: ProviderError) -> ProviderError {
        match error {
            ProviderError::InBand {
                kind,
                code,
                message,
            } => ProviderError::InBand {
                kind,
                code,
                message: self.redact(message),
            },
            other => other,
        }
    }

    /// Sends a non-streaming request and reads its whole body (capped) within the
    /// fixed request timeout.
    pub(crate) async fn complete(&self, mut call: Call<'_>) -> Result<Vec<u8>, LlmError> {
        let _permit = self.governor.acquire(|_| {}).await;
        let started = Instant::now();
        let response = call
            .request
            .take()
            .ok_or_else(|| ProviderError::Transport("the request body cannot be sent".to_owned()))?
            .timeout(self.request_timeout)
            .send()
            .await
            .map_err(|e| self.transport_error(&e))?;
        self.judged_by(&response);
        if !response.status().is_success() {
            let status = response.status().as_u16();
            let (error, body) = self.status_error(response).await;
            self.record(&call, status, &body, started);
            return Err(error.into());
        }
        let limit = self.max_answer_bytes;
        match read_capped(response, limit, self.request_timeout).await {
            Ok((_, true)) => Err(StreamError::TooLarge { limit }.into()),
            Ok((bytes, false)) => {
                self.record(&call, 200, &bytes, started);
                Ok(bytes)
            }
            Err(ReadError::Stalled(_)) => Err(ProviderError::Timeout(self.request_timeout).into()),
            Err(ReadError::Transport(e)) => Err(self.transport_error(&e).into()),
        }
    }
}

impl HttpApi {
    /// Tells the endpoint's governor of a success: one more request may be in
    /// flight. (A rate limit is told once its body says whether waiting helps:
    /// `status_error`.)
    fn judged_by(&self, response: &reqwest::Response) {
        if response.status().is_success() {
            self.governor.succeeded();
        }
    }
}

/// What went wrong at the bottom of an error's chain, in words: `connection
/// refused`, not `client error (Connect)`.
pub(crate) fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(next) = last.source() {
        last = next;
    }
    if let Some(io) = last.downcast_ref::<std::io::Error>() {
        use std::io::ErrorKind;
        let words = match io.kind() {
            ErrorKind::ConnectionRefused => Some("connection refused"),
            ErrorKind::ConnectionReset => Some("connection reset"),
            ErrorKind::ConnectionAborted => Some("connection aborted"),
            ErrorKind::TimedOut => Some("connection timed out"),
            ErrorKind::HostUnreachable => Some("host unreachable"),
            ErrorKind::NetworkUnreachable => Some("network unreachable"),
            _ => None,
        };
        if let Some(words) = words {
            return words.to_owned();
        }
    }
    let text = last.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

/// An in-band error that says the provider is overloaded or rate limiting.
fn overloaded(error: &ProviderError) -> bool {
    matches!(error, ProviderError::InBand { kind: Some(kind), .. }
        if kind == "overloaded_error" || kind == "rate_limit_error")
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

#[cfg(test)]
mod tests;

/// The provider's id of a request, from its response's headers (Anthropic's
/// `request-id`, OpenAI's `x-request-id`): printable, at most 128 bytes.
fn request_id(headers: &reqwest::header::HeaderMap) -> Option<String> {
    ["request-id", "x-request-id"]
        .iter()
        .find_map(|name| headers.get(*name)?.to_str().ok())
        .map(|id| id.trim())
        .filter(|id| !id.is_empty() && id.len() <= 128)
        .filter(|id| id.chars().all(|c| c.is_ascii_graphic()))
        .map(str::to_owned)
}
