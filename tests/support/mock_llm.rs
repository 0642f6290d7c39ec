//! A mock OpenAI-compatible Chat Completions server for integration tests and
//! benchmarks.
//!
//! [`MockLlm`] binds `127.0.0.1:0`, runs on the current tokio runtime and answers
//! `POST /v1/chat/completions` with scripted [`Reply`]s: server-sent-event
//! streams (with time to first token, per-chunk delays, stalls, holds until the
//! test opens a [`Gate`], abrupt aborts and malformed chunks), plain JSON
//! completions, or arbitrary error statuses. Every request is recorded, and
//! streamed bodies the client dropped before the end are counted as disconnects.
//! The server shuts down (gracefully) when the `MockLlm` is dropped.
//!
//! The `ev_*` functions build the `data:` payloads of real
//! `chat.completion.chunk` events; the constructors and modifiers on [`Reply`]
//! build whole turns from them.
#![allow(dead_code, unreachable_pub)]

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::serve::ListenerExt;
use bytes::Bytes;
use futures::stream;
use serde_json::{Map, Value, json};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// The path the mock serves, relative to the host (the API root is `/v1`).
const CHAT_PATH: &str = "/v1/chat/completions";
/// Anthropic's Messages path, served from the same script (the API root is the host).
const MESSAGES_PATH: &str = "/v1/messages";
/// Largest request body the mock reads.
const MAX_BODY: usize = 64 * 1024 * 1024;
/// Shortest pause before an [`End::DropAfter`] abort, so the chunks sent before
/// it reach the socket before the connection is torn down.
const MIN_ABORT_PAUSE: Duration = Duration::from_millis(5);
/// The raw payload inserted by [`Reply::with_malformed_chunk`].
const MALFORMED_CHUNK: &str =
    r#"{"id":"chatcmpl-mock","choices":[{"index":0,"delta":{"content":"bro"#;

type Responder = dyn Fn(&Recorded, usize) -> Reply + Send + Sync;

/// A running mock server. It listens on `127.0.0.1` on a free port, serves from
/// tasks on the tokio runtime that started it, and shuts down when dropped.
pub struct MockLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
}

/// One HTTP request the mock received.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The `Authorization` header, if present and valid UTF-8.
    pub authorization: Option<String>,
    /// The `x-api-key` header (Anthropic), if present.
    pub api_key: Option<String>,
    /// The `anthropic-version` header, if present.
    pub anthropic_version: Option<String>,
    /// The JSON body; `Null` if the body was empty, a JSON string holding the
    /// raw text if it was not valid JSON.
    pub body: Value,
    /// When the request's body had been read.
    pub at: Instant,
}

impl Recorded {
    /// The request's system prompt: its first message's text (empty without one).
    pub fn system(&self) -> &str {
        self.body["messages"][0]["content"].as_str().unwrap_or("")
    }

    /// How many tool results the request carries.
    pub fn results(&self) -> usize {
        self.body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count())
    }
}

/// What the mock answers to one chat-completion request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// 200 text/event-stream.
    Stream(StreamReply),
    /// Any status with extra headers (e.g. `("retry-after","1")`) and a raw body.
    /// `content-type: application/json` is sent unless `headers` sets one.
    Status {
        /// The HTTP status code (an invalid one is sent as 500).
        status: u16,
        /// Extra response headers (invalid names or values are skipped).
        headers: Vec<(String, String)>,
        /// The raw response body.
        body: String,
    },
    /// 200 application/json (non-streaming completion).
    Json(Value),
}

/// A streamed (server-sent events) reply.
#[derive(Clone, Debug)]
pub struct StreamReply {
    /// Each entry is the payload of one `data:` line; framed as
    /// `"data: {payload}\n\n"`. Use the literal `[DONE]` only via [`End::Done`].
    pub chunks: Vec<String>,
    /// Delay before the first chunk (time to first token).
    pub ttft: Duration,
    /// Delay between chunks.
    pub delay: Duration,
    /// How the stream ends after (or instead of) the last chunk.
    pub end: End,
}

/// How a streamed reply ends.
#[derive(Clone, Debug)]
pub enum End {
    /// After the chunks, send `"data: [DONE]\n\n"` and close.
    Done,
    /// Close cleanly after the chunks with no `[DONE]`.
    Close,
    /// Send only the first n chunks, then abort the connection abruptly (the
    /// body stream yields an `io::Error`, so the client sees an error rather
    /// than a clean end).
    DropAfter(usize),
    /// Send the first n chunks, then stall for the duration (send nothing),
    /// then send the rest and `[DONE]`.
    StallAfter(usize, Duration),
    /// Send the first n chunks, then send nothing until the gate opens, then the
    /// rest and `[DONE]`. A gate that never opens holds the stream until the
    /// client goes away.
    HoldAfter(usize, Gate),
}

/// An event the test sets once: a reply held on it (see [`End::HoldAfter`]) goes
/// on when it opens, and every wait after that returns at once. Clones share one
/// gate.
#[derive(Clone, Debug, Default)]
pub struct Gate(CancellationToken);

impl Gate {
    /// A closed gate.
    pub fn new() -> Gate {
        Gate::default()
    }

    /// Opens the gate for every waiter, present and future.
    pub fn open(&self) {
        self.0.cancel();
    }

    /// Whether the gate has been opened.
    pub fn is_open(&self) -> bool {
        self.0.is_cancelled()
    }

    /// Waits until the gate is open.
    pub async fn opened(&self) {
        self.0.cancelled().await;
    }
}

// ---------------------------------------------------------------------------
// Chunk builders
// ---------------------------------------------------------------------------

/// A `chat.completion.chunk` payload with one choice.
fn chunk(delta: &Value, finish_reason: &Value) -> String {
    json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "mock-model",
        "choices": [{ "index": 0, "delta": delta, "finish_reason": finish_reason }],
    })
    .to_string()
}

/// The opening chunk: delta `{"role":"assistant","content":""}`.
pub fn ev_role() -> String {
    chunk(&json!({ "role": "assistant", "content": "" }), &Value::Null)
}

/// A text chunk: delta `{"content": s}`.
pub fn ev_text(s: impl AsRef<str>) -> String {
    chunk(&json!({ "content": s.as_ref() }), &Value::Null)
}

/// A reasoning chunk: delta `{"reasoning_content": s}`.
pub fn ev_reasoning(s: impl AsRef<str>) -> String {
    chunk(&json!({ "reasoning_content": s.as_ref() }), &Value::Null)
}

/// The first chunk of tool call `index`: its id and function name, empty
/// arguments.
pub fn ev_tool_start(index: usize, id: impl AsRef<str>, name: impl AsRef<str>) -> String {
    chunk(
        &json!({ "tool_calls": [{
            "index": index,
            "id": id.as_ref(),
            "type": "function",
            "function": { "name": name.as_ref(), "arguments": "" },
        }] }),
        &Value::Null,
    )
}

/// A fragment of the arguments of tool call `index`.
pub fn ev_tool_args(index: usize, fragment: impl AsRef<str>) -> String {
    chunk(
        &json!({ "tool_calls": [{ "index": index, "function": { "arguments": fragment.as_ref() } }] }),
        &Value::Null,
    )
}

/// The finishing chunk: empty delta and `finish_reason: reason`.
pub fn ev_finish(reason: impl AsRef<str>) -> String {
    chunk(&json!({}), &json!(reason.as_ref()))
}

/// The usage chunk sent with `stream_options.include_usage`: no choices, and
/// usage `{prompt_tokens, completion_tokens, total_tokens}`.
pub fn ev_usage(prompt: u64, completion: u64) -> String {
    json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "mock-model",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    })
    .to_string()
}

/// An in-stream error event:
/// `{"error":{"message":message,"type":type_,"param":null,"code":null}}`.
pub fn ev_error(type_: impl AsRef<str>, message: impl AsRef<str>) -> String {
    json!({ "error": {
        "message": message.as_ref(),
        "type": type_.as_ref(),
        "param": null,
        "code": null,
    } })
    .to_string()
}

/// One Anthropic event, framed as Anthropic sends it: `event: <type>` then its data.
pub fn ev_anthropic(payload: &Value) -> String {
    let kind = payload["type"].as_str().unwrap_or("message").to_owned();
    format!("event: {kind}\ndata: {payload}")
}

/// An Anthropic Messages stream for the given whole content blocks
/// (`{"type":"text","text":…}`, `{"type":"thinking","thinking":…,"signature":…}`,
/// `{"type":"tool_use","id":…,"name":…,"input":{…}}`): each block starts empty and
/// arrives in two deltas (a tool's input split mid-JSON), with a ping, then
/// `message_delta` (its usage replaces the start's) and `message_stop`.
pub fn anthropic_stream(blocks: &[Value], stop_reason: &str) -> Reply {
    let mut chunks = vec![ev_anthropic(&json!({
        "type": "message_start",
        "message": {"id": "msg_mock", "type": "message", "role": "assistant", "model": "mock-model",
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 1}},
    }))];
    chunks.push(ev_anthropic(&json!({"type": "ping"})));
    for (index, block) in blocks.iter().enumerate() {
        let kind = block["type"].as_str().unwrap_or_default();
        let (start, deltas) = match kind {
            "text" => {
                let text = block["text"].as_str().unwrap_or_default();
                let (a, b) = text.split_at(text.len() / 2);
                (
                    json!({"type": "text", "text": ""}),
                    vec![
                        json!({"type": "text_delta", "text": a}),
                        json!({"type": "text_delta", "text": b}),
                    ],
                )
            }
            "thinking" => (
                json!({"type": "thinking", "thinking": ""}),
                vec![
                    json!({"type": "thinking_delta", "thinking": block["thinking"]}),
                    json!({"type": "signature_delta", "signature": block["signature"]}),
                ],
            ),
            _ => {
                let input = block["input"].to_string();
                let (a, b) = input.split_at(input.len() / 2);
                (
                    json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                    vec![
                        json!({"type": "input_json_delta", "partial_json": a}),
                        json!({"type": "input_json_delta", "partial_json": b}),
                    ],
                )
            }
        };
        chunks.push(ev_anthropic(
            &json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        for delta in deltas {
            chunks.push(ev_anthropic(
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        chunks.push(ev_anthropic(
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    chunks.push(ev_anthropic(&json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null},
        "usage": {"output_tokens": 5},
    })));
    chunks.push(ev_anthropic(&json!({"type": "message_stop"})));
    Reply::Stream(StreamReply {
        chunks,
        ttft: Duration::ZERO,
        delay: Duration::ZERO,
        end: End::Close,
    })
}

// ---------------------------------------------------------------------------
// Reply constructors and modifiers
// ---------------------------------------------------------------------------

/// Splits `s` into at most three pieces of roughly equal char count (no empty
/// pieces; none at all for an empty string).
fn split_text(s: &str) -> Vec<&str> {
    let starts: Vec<usize> = s.char_indices().map(|(i, _)| i).collect();
    let n = starts.len();
    let parts = n.min(3);
    let mut out = Vec::with_capacity(parts);
    let mut from = 0;
    for k in 1..=parts {
        let to = if k == parts {
            s.len()
        } else {
            starts[n * k / parts]
        };
        out.push(&s[from..to]);
        from = to;
    }
    out
}

/// The first char boundary of `s` at or after `i`.
fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i.min(s.len())
}

/// Splits serialized JSON into three non-empty pieces cut near 1/3 and 2/3 of
/// its byte length, nudging the cuts so that no piece parses as JSON on its
/// own where that is possible (fewer pieces for very short input).
fn split_json(s: &str) -> Vec<&str> {
    let pieces = |a: usize, b: usize| -> Vec<&str> {
        [&s[..a], &s[a..b], &s[b..]]
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect()
    };
    let len = s.len();
    let base1 = len / 3;
    let base2 = 2 * len / 3;
    for d1 in 0..4 {
        for d2 in 0..4 {
            let a = ceil_boundary(s, base1 + d1);
            let b = ceil_boundary(s, base2 + d2);
            if a == 0 || a >= b || b >= len {
                continue;
            }
            let ps = pieces(a, b);
            if ps.iter().all(|p| serde_json::from_str::<Value>(p).is_err()) {
                return ps;
            }
        }
    }
    let a = ceil_boundary(s, base1);
    let b = ceil_boundary(s, base2).max(a);
    pieces(a, b)
}

/// Whether a chunk payload carries a finish reason or usage.
fn is_finish_or_usage(payload: &str) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(payload) else {
        return false;
    };
    let finished = v["choices"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| !c["finish_reason"].is_null()));
    finished || v.get("usage").is_some_and(|u| !u.is_null())
}

impl Reply {
    /// A stream with the given chunks, no delays, ending with `[DONE]`.
    pub fn stream(chunks: Vec<String>) -> Reply {
        Reply::Stream(StreamReply {
            chunks,
            ttft: Duration::ZERO,
            delay: Duration::ZERO,
            end: End::Done,
        })
    }

    /// A streamed text turn: role chunk, the text in up to three pieces,
    /// `finish_reason: "stop"`, usage (10, 5), `[DONE]`; no delays.
    pub fn text(s: impl AsRef<str>) -> Reply {
        let mut chunks = vec![ev_role()];
        chunks.extend(split_text(s.as_ref()).into_iter().map(ev_text));
        chunks.push(ev_finish("stop"));
        chunks.push(ev_usage(10, 5));
        Reply::stream(chunks)
    }

    /// A streamed tool-call turn: role chunk, then for each `(id, name, args)`
    /// its start chunk and its serialized arguments in three pieces cut
    /// mid-JSON, then `finish_reason: "tool_calls"`, usage (10, 5), `[DONE]`.
    pub fn tool_calls(calls: &[(&str, &str, Value)]) -> Reply {
        let mut chunks = vec![ev_role()];
        for (i, (id, name, args)) in calls.iter().enumerate() {
            chunks.push(ev_tool_start(i, id, name));
            let serialized = args.to_string();
            chunks.extend(
                split_json(&serialized)
                    .into_iter()
                    .map(|p| ev_tool_args(i, p)),
            );
        }
        chunks.push(ev_finish("tool_calls"));
        chunks.push(ev_usage(10, 5));
        Reply::stream(chunks)
    }

    /// An error status with body `{"error":{"message":..,"type":..}}`; the
    /// type is `rate_limit_error` for 429, `authentication_error` for 401 and
    /// 403, `invalid_request_error` for other 4xx, `overloaded_error` for 529
    /// and `server_error` otherwise.
    pub fn status(code: u16, body_message: impl AsRef<str>) -> Reply {
        let kind = match code {
            429 => "rate_limit_error",
            401 | 403 => "authentication_error",
            400..=499 => "invalid_request_error",
            529 => "overloaded_error",
            _ => "server_error",
        };
        Reply::Status {
            status: code,
            headers: Vec::new(),
            body: json!({ "error": { "message": body_message.as_ref(), "type": kind } })
                .to_string(),
        }
    }

    /// A 429 with header `retry-after: {retry_after_secs}`.
    pub fn rate_limited(retry_after_secs: u64) -> Reply {
        match Reply::status(429, "rate limit exceeded") {
            Reply::Status { status, body, .. } => Reply::Status {
                status,
                headers: vec![("retry-after".to_owned(), retry_after_secs.to_string())],
                body,
            },
            other => other,
        }
    }

    /// Sets time to first token and inter-chunk delay (streams only).
    pub fn with_timing(self, ttft: Duration, delay: Duration) -> Reply {
        match self {
            Reply::Stream(s) => Reply::Stream(StreamReply { ttft, delay, ..s }),
            other => other,
        }
    }

    /// Sets how the stream ends (streams only).
    pub fn with_end(self, end: End) -> Reply {
        match self {
            Reply::Stream(s) => Reply::Stream(StreamReply { end, ..s }),
            other => other,
        }
    }

    /// Removes finish-reason and usage chunks and ends with [`End::Close`]: a
    /// stream that ends cleanly with no finish reason and no `[DONE]`
    /// (streams only).
    pub fn without_finish(self) -> Reply {
        match self {
            Reply::Stream(mut s) => {
                s.chunks.retain(|c| !is_finish_or_usage(c));
                s.end = End::Close;
                Reply::Stream(s)
            }
            other => other,
        }
    }

    /// Inserts a truncated-JSON payload at position `at` (clamped to the end)
    /// (streams only).
    pub fn with_malformed_chunk(self, at: usize) -> Reply {
        match self {
            Reply::Stream(mut s) => {
                let at = at.min(s.chunks.len());
                s.chunks.insert(at, MALFORMED_CHUNK.to_owned());
                Reply::Stream(s)
            }
            other => other,
        }
    }
}

// ---------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------

struct Log {
    requests: Vec<Recorded>,
    chat_requests: usize,
}

struct Shared {
    log: Mutex<Log>,
    disconnects: AtomicUsize,
    /// `data:` frames handed to the connection so far, over all streams.
    frames_sent: AtomicUsize,
    responder: Box<Responder>,
}

impl Shared {
    fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl MockLlm {
    /// Serves `script` in order of request arrival: request k gets
    /// `script[k]`; when exhausted, answers 500 with body
    /// `{"error":{"message":"mock script exhausted","type":"server_error"}}`.
    /// (k counts only `POST /v1/chat/completions` requests.)
    ///
    /// # Panics
    /// If no port on 127.0.0.1 can be bound.
    pub async fn start(script: Vec<Reply>) -> MockLlm {
        MockLlm::start_with(move |_, index| {
            script.get(index).cloned().unwrap_or_else(|| Reply::Status {
                status: 500,
                headers: Vec::new(),
                body: json!({ "error": {
                    "message": "mock script exhausted",
                    "type": "server_error",
                } })
                .to_string(),
            })
        })
        .await
    }

    /// Calls `responder(&request, index)` for each chat-completion request
    /// (index = 0-based arrival order among `POST /v1/chat/completions`
    /// requests).
    ///
    /// # Panics
    /// If no port on 127.0.0.1 can be bound.
    pub async fn start_with(
        responder: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> MockLlm {
        let shared = Arc::new(Shared {
            log: Mutex::new(Log {
                requests: Vec::new(),
                chat_requests: 0,
            }),
            disconnects: AtomicUsize::new(0),
            frames_sent: AtomicUsize::new(0),
            responder: Box::new(responder),
        });
        let (listener, addr) = match listen() {
            Ok(bound) => bound,
            Err(e) => panic!("mock_llm: cannot listen on 127.0.0.1: {e}"),
        };
        let listener = listener.tap_io(|tcp| {
            // Best effort: without it small SSE writes may wait on Nagle.
            let _ = tcp.set_nodelay(true);
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        MockLlm {
            addr,
            shared,
            shutdown: Some(tx),
        }
    }

    /// `"http://127.0.0.1:PORT/v1"`, the API root as OpenAI SDKs take it; the
    /// server answers `POST /v1/chat/completions` (any other path: 404 JSON
    /// error).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request received so far (on any path), in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.log().requests.clone()
    }

    /// Drops the requests recorded so far (a test that measures the process's
    /// memory over thousands of them).
    pub fn forget_requests(&self) {
        let mut log = self.shared.log();
        log.requests.clear();
        log.requests.shrink_to_fit();
    }

    /// How many requests (on any path) were received so far.
    pub fn request_count(&self) -> usize {
        self.shared.log().requests.len()
    }

    /// How many streamed response bodies were dropped by the client before the
    /// server finished sending them.
    pub fn disconnects(&self) -> usize {
        self.shared.disconnects.load(Ordering::SeqCst)
    }

    /// How many `data:` frames the mock has sent so far, over all streams.
    pub fn frames_sent(&self) -> usize {
        self.shared.frames_sent.load(Ordering::SeqCst)
    }

    /// Waits (polling every 5 ms, up to `timeout`) until `disconnects() >= n`;
    /// returns whether it happened.
    pub async fn wait_for_disconnects(&self, n: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.disconnects() >= n {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Binds 127.0.0.1 on a free port with a deep backlog (benchmarks open
/// thousands of connections at once).
fn listen() -> std::io::Result<(TcpListener, SocketAddr)> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    let listener = socket.listen(4096)?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

impl std::fmt::Debug for MockLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockLlm")
            .field("addr", &self.addr)
            .field("request_count", &self.request_count())
            .field("disconnects", &self.disconnects())
            .finish_non_exhaustive()
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

fn json_response(status: StatusCode, body: String) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

fn error_response(status: StatusCode, kind: &str, message: &str) -> Response {
    json_response(
        status,
        json!({ "error": { "message": message, "type": kind } }).to_string(),
    )
}

async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let authorization = header(AUTHORIZATION.as_str());
    let api_key = header("x-api-key");
    let anthropic_version = header("anthropic-version");
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(e) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &format!("could not read request body: {e}"),
            );
        }
    };
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    let recorded = Recorded {
        path,
        authorization,
        api_key,
        anthropic_version,
        body,
        at: Instant::now(),
    };
    let served = recorded.path == CHAT_PATH || recorded.path == MESSAGES_PATH;
    let is_chat = parts.method == Method::POST && served;

    let index = {
        let mut log = shared.log();
        log.requests.push(recorded.clone());
        if is_chat {
            log.chat_requests += 1;
        }
        log.chat_requests.checked_sub(1)
    };

    if !served {
        return error_response(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            &format!("mock: no route for {} {}", parts.method, recorded.path),
        );
    }
    let Some(index) = index.filter(|_| is_chat) else {
        return error_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            &format!("mock: {} not allowed on {CHAT_PATH}", parts.method),
        );
    };

    let wants_stream = recorded
        .body
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    match (shared.responder)(&recorded, index) {
        Reply::Json(v) => json_response(StatusCode::OK, v.to_string()),
        Reply::Status {
            status,
            headers,
            body,
        } => status_response(status, &headers, body),
        Reply::Stream(s) if wants_stream => stream_response(s, &shared),
        Reply::Stream(s) => non_stream_response(s).await,
    }
}

fn status_response(status: u16, headers: &[(String, String)], body: String) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let map = resp.headers_mut();
    map.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (name, value) in headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            if n == CONTENT_TYPE {
                map.insert(n, v);
            } else {
                map.append(n, v);
            }
        }
    }
    resp
}

// ---------------------------------------------------------------------------
// Streaming body
// ---------------------------------------------------------------------------

enum Item {
    Data(Bytes),
    Abort,
}

struct Step {
    /// A gate to wait for before the wait below.
    hold: Option<Gate>,
    wait: Duration,
    item: Item,
}

/// Counts a disconnect when dropped before the body yielded its last item.
struct DisconnectGuard {
    shared: Arc<Shared>,
    finished: bool,
}

impl Drop for DisconnectGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.shared.disconnects.fetch_add(1, Ordering::SeqCst);
        }
    }
}

struct BodyState {
    steps: VecDeque<Step>,
    guard: DisconnectGuard,
    /// When the previous step was due. Steps are scheduled against absolute
    /// deadlines so timer granularity never accumulates across a stream's chunks.
    due: Option<tokio::time::Instant>,
}

/// One SSE event: a payload alone goes on a `data:` line; one that already starts
/// with `event:` (Anthropic's framing, see [`ev_anthropic`]) is sent as it is.
fn frame(payload: &str) -> Bytes {
    if payload.starts_with("event:") {
        Bytes::from(format!("{payload}\n\n"))
    } else {
        Bytes::from(format!("data: {payload}\n\n"))
    }
}

/// The timed items of a streamed reply.
fn plan(s: StreamReply) -> VecDeque<Step> {
    let StreamReply {
        chunks,
        ttft,
        delay,
        end,
    } = s;
    let (send, stall, hold) = match &end {
        End::DropAfter(n) => ((*n).min(chunks.len()), None, None),
        End::StallAfter(n, d) => (chunks.len(), Some((*n, *d)), None),
        End::HoldAfter(n, gate) => (chunks.len(), None, Some((*n, gate))),
        End::Done | End::Close => (chunks.len(), None, None),
    };
    let held_at = |i: usize| hold.filter(|(n, _)| *n == i).map(|(_, gate)| gate.clone());
    let mut steps = VecDeque::with_capacity(send + 1);
    for (i, payload) in chunks.iter().take(send).enumerate() {
        let mut wait = if i == 0 { ttft } else { delay };
        match stall {
            Some((n, d)) if i == n => wait += d,
            _ => {}
        }
        steps.push_back(Step {
            hold: held_at(i),
            wait,
            item: Item::Data(frame(payload)),
        });
    }
    let first = steps.is_empty();
    match &end {
        End::Done | End::StallAfter(..) | End::HoldAfter(..) => {
            let mut wait = if first { ttft } else { Duration::ZERO };
            match stall {
                Some((n, d)) if n >= chunks.len() => wait += d,
                _ => {}
            }
            let hold = hold
                .filter(|(n, _)| *n >= chunks.len())
                .map(|(_, gate)| gate.clone());
            steps.push_back(Step {
                hold,
                wait,
                item: Item::Data(frame("[DONE]")),
            });
        }
        End::DropAfter(_) => {
            let base = if first { ttft } else { delay };
            steps.push_back(Step {
                hold: None,
                wait: base.max(MIN_ABORT_PAUSE),
                item: Item::Abort,
            });
        }
        End::Close => {}
    }
    steps
}

fn stream_response(s: StreamReply, shared: &Arc<Shared>) -> Response {
    let steps = plan(s);
    // An empty body has no last item to miss.
    let finished = steps.is_empty();
    let state = BodyState {
        steps,
        guard: DisconnectGuard {
            shared: Arc::clone(shared),
            finished,
        },
        due: None,
    };
    let body = stream::unfold(state, |mut st| async move {
        // `finished` was set when the last step was taken (or at the start).
        let step = st.steps.pop_front()?;
        if let Some(gate) = &step.hold {
            gate.opened().await;
            // Delays after a hold count from its end.
            st.due = Some(tokio::time::Instant::now());
        }
        let due = st.due.unwrap_or_else(tokio::time::Instant::now) + step.wait;
        st.due = Some(due);
        if !step.wait.is_zero() {
            tokio::time::sleep_until(due).await;
        }
        if st.steps.is_empty() {
            st.guard.finished = true;
        }
        let item = match step.item {
            Item::Data(b) => {
                st.guard.shared.frames_sent.fetch_add(1, Ordering::SeqCst);
                Ok(b)
            }
            Item::Abort => Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "mock_llm: stream aborted (End::DropAfter)",
            )),
        };
        Some((item, st))
    });
    let mut resp = Response::new(Body::from_stream(body));
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

// ---------------------------------------------------------------------------
// Non-streaming conversion
// ---------------------------------------------------------------------------

/// Answers a non-streaming request with a streamed reply: waits as long as the
/// stream would have taken (its gates included), then sends the chunks assembled
/// into one `chat.completion` (or the first in-stream error as a 500).
async fn non_stream_response(s: StreamReply) -> Response {
    let mut total = Duration::ZERO;
    for step in plan(s.clone()) {
        if let Some(gate) = step.hold {
            gate.opened().await;
        }
        total += step.wait;
    }
    if !total.is_zero() {
        tokio::time::sleep(total).await;
    }
    if let End::DropAfter(_) = s.end {
        let body = stream::iter([Err::<Bytes, _>(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "mock_llm: response aborted (End::DropAfter)",
        ))]);
        let mut resp = Response::new(Body::from_stream(body));
        resp.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        return resp;
    }
    match assemble(&s.chunks) {
        Ok(v) => json_response(StatusCode::OK, v.to_string()),
        Err(error) => json_response(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
    }
}

#[derive(Default)]
struct ToolAcc {
    id: Option<Value>,
    name: String,
    arguments: String,
}

/// Assembles chunk payloads into a `chat.completion`; an in-stream error
/// chunk is returned as `Err` (the whole `{"error":..}` object). Payloads
/// that are not JSON are skipped.
fn assemble(chunks: &[String]) -> Result<Value, Value> {
    let mut content = String::new();
    let mut reasoning = String::new();
    let mut tools: Vec<ToolAcc> = Vec::new();
    let mut finish = Value::Null;
    let mut usage = None;
    for payload in chunks {
        let Ok(v) = serde_json::from_str::<Value>(payload) else {
            continue;
        };
        if v.get("error").is_some() {
            return Err(v);
        }
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            usage = Some(u.clone());
        }
        let Some(choice) = v["choices"].as_array().and_then(|cs| cs.first()) else {
            continue;
        };
        if !choice["finish_reason"].is_null() {
            finish = choice["finish_reason"].clone();
        }
        let delta = &choice["delta"];
        if let Some(t) = delta["content"].as_str() {
            content.push_str(t);
        }
        if let Some(t) = delta["reasoning_content"].as_str() {
            reasoning.push_str(t);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let i = call["index"]
                .as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .unwrap_or(tools.len());
            if tools.len() <= i {
                tools.resize_with(i + 1, ToolAcc::default);
            }
            let acc = &mut tools[i];
            if let Some(id) = call.get("id").filter(|id| !id.is_null()) {
                acc.id = Some(id.clone());
            }
            if let Some(name) = call["function"]["name"].as_str() {
                acc.name.push_str(name);
            }
            if let Some(args) = call["function"]["arguments"].as_str() {
                acc.arguments.push_str(args);
            }
        }
    }

    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    let content = if content.is_empty() && !tools.is_empty() {
        Value::Null
    } else {
        Value::String(content)
    };
    message.insert("content".into(), content);
    if !reasoning.is_empty() {
        message.insert("reasoning_content".into(), Value::String(reasoning));
    }
    if !tools.is_empty() {
        let calls: Vec<Value> = tools
            .into_iter()
            .map(|t| {
                json!({
                    "id": t.id.unwrap_or(Value::Null),
                    "type": "function",
                    "function": { "name": t.name, "arguments": t.arguments },
                })
            })
            .collect();
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    let mut out = json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "mock-model",
        "choices": [{ "index": 0, "message": message, "finish_reason": finish }],
    });
    if let Some(u) = usage {
        out["usage"] = u;
    }
    Ok(out)
}
