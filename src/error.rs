//! The error taxonomy: one typed error per layer and one exhaustive
//! classification that decides what supervision does with each. It stays one file
//! though it passes 500 lines: it is one table, every layer's variants beside the
//! class each maps to, so a new variant and its class are written and reviewed in
//! one place, and splitting it by layer would split the classification with it.
//!
//! Every `Display` here is safe to show a person: it carries no API key, no stack trace
//! and at most a short excerpt of what a server said.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::conversation::AssistantTurn;

/// What supervision does with an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "class", rename_all = "snake_case")]
pub enum ErrorClass {
    /// Back off (honouring `after` when the server said) and try again.
    Retryable {
        /// The delay the server asked for, if any.
        #[serde(default, with = "opt_millis")]
        after: Option<Duration>,
    },
    /// The prompt is too long for the model.
    ContextOverflow,
    /// Trying again cannot help; the session fails.
    Permanent,
    /// The user or the parent cancelled.
    Cancelled,
    /// A tool failed; the model sees an error result and goes on.
    ToolFailure,
    /// An actor panicked or broke an invariant; its supervisor decides.
    Crash,
}

impl ErrorClass {
    /// A short lowercase name, as used in events and exit messages.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Retryable { .. } => "retryable",
            Self::ContextOverflow => "context_overflow",
            Self::Permanent => "permanent",
            Self::Cancelled => "cancelled",
            Self::ToolFailure => "tool_failure",
            Self::Crash => "crash",
        }
    }
}

mod opt_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(d) => s.serialize_some(&(d.as_millis() as u64)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

/// Bad or missing configuration: exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Neither a key nor a base URL says which provider to use.
    #[error(
        "no provider configured: set ANTHROPIC_API_KEY (for api.anthropic.com) or OPENAI_API_KEY (for api.openai.com), or OPENAI_BASE_URL / --base-url for any OpenAI-compatible server such as http://localhost:11434/v1 (or pass --replay FILE)"
    )]
    NoProvider,
    /// A configuration file does not parse or names something that does not exist.
    #[error("{path}:{line}: {message}")]
    File {
        /// The file.
        path: String,
        /// The line (1-based) of the problem.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A flag or setting names something unknown or contradictory.
    #[error("{0}")]
    Invalid(String),
    /// A role names a model alias nobody declared.
    #[error(
        "{source_file}: model {alias:?} is not a known alias (known: {known}); name a model id, or declare the alias under [models] in orchestrate.toml"
    )]
    UnknownAlias {
        /// The role file.
        source_file: String,
        /// The alias.
        alias: String,
        /// The aliases that exist.
        known: String,
    },
    /// A custom server is configured but no model was named.
    #[error("no model given: pass --model M or set ORCHESTRATE_MODEL")]
    NoModel,
    /// The base URL does not parse or is not http(s).
    #[error("invalid base URL {url:?}: {reason}")]
    BadBaseUrl {
        /// The URL as given.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// `--agents-dir` does not name a directory.
    #[error("--agents-dir {path}: {reason}")]
    AgentsDir {
        /// The directory as given.
        path: String,
        /// Why it was refused.
        reason: String,
    },
    /// A workspace's `orchestrate.toml` sends model requests elsewhere, and the
    /// workspace is not trusted with those addresses.
    #[error("{file} sends model requests to {targets}, {}", if *declined {
        "and you did not trust it; nothing was sent"
    } else {
        "and this workspace is not trusted with them; run with --trust-workspace to trust it (remembered in ~/.config/orchestrate/config.toml)"
    })]
    Untrusted {
        /// The workspace's file.
        file: String,
        /// Where it sends requests: `"URL" (provider NAME)`, comma-separated.
        targets: String,
        /// Whether a person was asked and said no (else nobody could be asked).
        declined: bool,
    },
    /// The workspace directory is unusable.
    #[error("workspace {path}: {reason}")]
    Workspace {
        /// The directory as given.
        path: String,
        /// Why it was refused.
        reason: String,
    },
}

/// A failure talking to the provider before or outside the streamed body.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ProviderError {
    /// The server answered with a non-success status.
    #[error("HTTP {status}{}{}", fmt_detail(message), fmt_request(request_id))]
    Status {
        /// The HTTP status code.
        status: u16,
        /// The provider's error message, shortened.
        message: String,
        /// The provider's error code (`context_length_exceeded`, `insufficient_quota`, …).
        code: Option<String>,
        /// How long the server asked us to wait.
        retry_after: Option<Duration>,
        /// The provider's id of the request (`request-id`, `x-request-id`), for
        /// its support.
        request_id: Option<String>,
    },
    /// The server sent an error object inside a 200 stream (`{"error": …}`).
    #[error("provider error{}{}", fmt_kind(kind), fmt_detail(message))]
    InBand {
        /// The error's `type` (`server_error`, `rate_limit_error`, …).
        kind: Option<String>,
        /// The error's `code`.
        code: Option<String>,
        /// The message, shortened.
        message: String,
    },
    /// The connection could not be made or was refused.
    #[error("cannot connect to {host}: {reason}")]
    Connect {
        /// Host and port, never the full URL with credentials.
        host: String,
        /// The transport's reason.
        reason: String,
    },
    /// A non-streaming request ran past its fixed timeout.
    #[error("request timed out after {0:?}")]
    Timeout(Duration),
    /// Any other transport failure while sending the request.
    #[error("request failed: {0}")]
    Transport(String),
    /// The server redirected the request somewhere it is not followed (another
    /// origin, which would receive the key and the conversation).
    #[error("{0}")]
    Redirect(String),
    /// The response body was not the JSON we expected.
    #[error("cannot decode the response: {0}")]
    Decode(String),
    /// A replayed run sent a request the cassette does not hold.
    #[error("replay: {0}")]
    Replay(String),
}

fn fmt_detail(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

fn fmt_request(id: &Option<String>) -> String {
    id.as_ref()
        .map(|id| format!(" (request id {id})"))
        .unwrap_or_default()
}

fn fmt_kind(kind: &Option<String>) -> String {
    kind.as_ref().map(|k| format!(" ({k})")).unwrap_or_default()
}

/// A failure while reading a streamed answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// No event arrived for the idle timeout.
    #[error("stream stalled: no event for {0:?}")]
    IdleTimeout(Duration),
    /// The stream ended with neither a finish reason nor `[DONE]`.
    #[error("stream ended before its finish event")]
    EndedEarly,
    /// The connection broke mid-stream.
    #[error("connection lost mid-stream: {0}")]
    Disconnected(String),
    /// An event's data was not valid JSON of the expected shape.
    #[error("malformed stream chunk: {0}")]
    Malformed(String),
    /// The assembled answer grew past the cap.
    #[error("answer exceeded the {limit}-byte cap")]
    TooLarge {
        /// The cap, in bytes.
        limit: usize,
    },
    /// The model finished without saying anything.
    #[error("the model returned an empty answer")]
    Empty,
    /// The model hit its output-token limit before producing anything usable.
    #[error("the model reached its output limit before answering")]
    LimitBeforeOutput,
    /// The provider's content filter stopped the answer.
    #[error("the provider's content filter stopped the answer")]
    Filtered,
    /// The provider paused the turn (Anthropic's `pause_turn`) more often than one
    /// turn is continued.
    #[error("the model paused its turn {0} times without finishing it")]
    Paused(u32),
}

/// Everything one model turn can end with, short of success.
#[derive(Clone, Debug, thiserror::Error)]
pub enum LlmError {
    /// The request failed.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The stream failed.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// The task reading the stream panicked (a bug in a provider).
    #[error("the stream task crashed: {0}")]
    Crashed(String),
    /// The turn was cancelled; `partial` is what had arrived.
    #[error("cancelled")]
    Cancelled {
        /// What had been assembled before the cancel.
        partial: Box<AssistantTurn>,
    },
}

/// A tool call that failed; the model receives the message as an error result.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ToolError {
    /// The model asked for a tool that is not offered.
    #[error("unknown tool {0:?}")]
    UnknownTool(String),
    /// The arguments are not valid JSON or do not fit the schema.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The tool ran and failed.
    #[error("{0}")]
    Failed(String),
    /// The tool ran and reports a failure in words of its own that the result
    /// begins with (a sub-agent's `failed (auth)`): given as it is, marked an
    /// error.
    #[error("{0}")]
    Reported(String),
    /// The tool ran past its timeout.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The tool panicked; nothing is replayed.
    #[error("the tool crashed: {0}")]
    Crashed(String),
    /// The call was cancelled before it finished.
    #[error("cancelled")]
    Cancelled,
    /// The call was cancelled before it finished, and this is what it had
    /// produced by then.
    #[error("cancelled before it ended; its output so far:\n{0}")]
    CancelledWith(String),
}

/// Why a session could not go on.
#[derive(Clone, Debug, thiserror::Error)]
pub enum SessionError {
    /// A model turn failed with a non-retryable error.
    #[error("{0}")]
    Llm(LlmError),
    /// Every attempt failed; carries the last error.
    #[error("gave up after {attempts} attempts: {last}")]
    RetriesExhausted {
        /// How many requests were made.
        attempts: u32,
        /// The last attempt's error.
        last: Box<LlmError>,
    },
    /// The session actor crashed more often than its restart intensity allows.
    #[error("session crashed {restarts} times within {window:?}; giving up: {last}")]
    CrashLoop {
        /// Restarts attempted inside the window.
        restarts: u32,
        /// The intensity window.
        window: Duration,
        /// The last crash's message.
        last: String,
    },
    /// The journal could not be written or read.
    #[error("journal: {0}")]
    Journal(String),
    /// The session could not be started.
    #[error("cannot start session: {0}")]
    Spawn(String),
    /// A prompt went to a session that has ended or never existed.
    #[error("no session {0} (it ended or never existed)")]
    Gone(String),
    /// The runtime has shut down: nothing more runs.
    #[error("the runtime has shut down")]
    Shutdown,
}

/// Classification of provider error objects by their `type`/`code`, shared by the
/// HTTP-status path and the in-band path.
fn classify_api_code(kind: Option<&str>, code: Option<&str>, message: &str) -> Option<ErrorClass> {
    let is = |s: &str| kind == Some(s) || code == Some(s);
    if is("context_length_exceeded")
        || message.contains("prompt is too long")
        || message.contains("maximum context length")
    {
        return Some(ErrorClass::ContextOverflow);
    }
    if is("insufficient_quota")
        || is("invalid_api_key")
        || is("model_not_found")
        || is("content_filter")
        // Anthropic: no payment, no access, or a body past the byte limit (not the
        // context window: a shorter prompt of the same turn would not help either).
        || is("billing_error")
        || is("permission_error")
        || is("request_too_large")
    {
        return Some(ErrorClass::Permanent);
    }
    None
}

/// In-band error kinds (or codes) of both APIs that pass: the same request may well
/// succeed again.
const TRANSIENT_KINDS: [&str; 6] = [
    "server_error",
    "api_error",
    "overloaded_error",
    "rate_limit_error",
    "rate_limit_exceeded",
    "timeout_error",
];

/// In-band error kinds that asking again cannot change.
const FINAL_KINDS: [&str; 4] = [
    "invalid_request_error",
    "authentication_error",
    "not_found_error",
    "invalid_api_key",
];

/// The class an HTTP status gives an error.
fn status_class(status: u16, retry_after: Option<Duration>) -> ErrorClass {
    match status {
        408 | 409 | 425 | 429 | 500..=504 | 520..=529 => {
            ErrorClass::Retryable { after: retry_after }
        }
        413 => ErrorClass::ContextOverflow,
        _ => ErrorClass::Permanent,
    }
}

impl ProviderError {
    /// The class of this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::Status {
                status,
                message,
                code,
                retry_after,
                ..
            } => classify_api_code(None, code.as_deref(), message)
                .unwrap_or_else(|| status_class(*status, *retry_after)),
            Self::InBand {
                kind,
                code,
                message,
            } => {
                if let Some(class) = classify_api_code(kind.as_deref(), code.as_deref(), message) {
                    return class;
                }
                let is_any = |names: &[&str]| {
                    names
                        .iter()
                        .any(|n| kind.as_deref() == Some(*n) || code.as_deref() == Some(*n))
                };
                if is_any(&TRANSIENT_KINDS) {
                    ErrorClass::Retryable { after: None }
                } else if is_any(&FINAL_KINDS) {
                    ErrorClass::Permanent
                } else {
                    // A kind this client does not know, or none: a numeric code is an
                    // HTTP status (vLLM and other compatible servers send one);
                    // otherwise nothing says that asking again could help.
                    code.as_deref()
                        .and_then(|c| c.parse::<u16>().ok())
                        .map_or(ErrorClass::Permanent, |status| status_class(status, None))
                }
            }
            Self::Connect { .. } | Self::Timeout(_) | Self::Transport(_) => {
                ErrorClass::Retryable { after: None }
            }
            Self::Decode(_) => ErrorClass::Retryable { after: None },
            // The server will send the same redirect again.
            Self::Redirect(_) => ErrorClass::Permanent,
            // The run went somewhere the recording never did: asking again changes nothing.
            Self::Replay(_) => ErrorClass::Permanent,
        }
    }
}

impl StreamError {
    /// The class of this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::IdleTimeout(_)
            | Self::EndedEarly
            | Self::Disconnected(_)
            | Self::Malformed(_)
            | Self::Empty => ErrorClass::Retryable { after: None },
            Self::TooLarge { .. } | Self::LimitBeforeOutput | Self::Filtered | Self::Paused(_) => {
                ErrorClass::Permanent
            }
        }
    }
}

impl LlmError {
    /// The class of this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::Provider(e) => e.class(),
            Self::Stream(e) => e.class(),
            Self::Crashed(_) => ErrorClass::Crash,
            Self::Cancelled { .. } => ErrorClass::Cancelled,
        }
    }
}

impl ToolError {
    /// What the model is given: `Error: ` and the error, or a reported
    /// failure's own words.
    pub fn result_text(&self) -> String {
        match self {
            Self::Reported(text) => text.clone(),
            other => format!("Error: {other}"),
        }
    }

    /// The class of this error: always a tool failure, which the model gets to see.
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::UnknownTool(_)
            | Self::InvalidInput(_)
            | Self::Failed(_)
            | Self::Reported(_)
            | Self::Timeout(_)
            | Self::Crashed(_) => ErrorClass::ToolFailure,
            Self::Cancelled | Self::CancelledWith(_) => ErrorClass::Cancelled,
        }
    }
}

impl LlmError {
    /// Why a session with a fallback model switches to it after this error
    /// (its retries, if any, spent): the model does not exist
    /// (`model_not_found`), or the provider stayed overloaded or rate-limited
    /// (`overloaded`). A refused request (400), a key (401) or an access (403)
    /// never, whatever its body says: another model would be refused the same.
    pub fn fallback_reason(&self) -> Option<&'static str> {
        if let Self::Provider(ProviderError::Status {
            status: 400 | 401 | 403,
            ..
        }) = self
        {
            return None;
        }
        match self.kind() {
            "model_not_found" => Some("model_not_found"),
            "overloaded" | "rate_limit" => Some("overloaded"),
            _ => None,
        }
    }

    /// A failure's word, finer than its class: `auth`, `rate_limit`,
    /// `overloaded`, `quota`, `model_not_found`, `context_overflow`,
    /// `bad_request`, `server`, `network`, `stream`, `crash`, …
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Provider(ProviderError::Status {
                status,
                code,
                message,
                ..
            }) => provider_kind(Some(*status), None, code.as_deref(), message),
            Self::Provider(ProviderError::InBand {
                kind,
                code,
                message,
            }) => provider_kind(None, kind.as_deref(), code.as_deref(), message),
            Self::Provider(ProviderError::Connect { .. } | ProviderError::Transport(_)) => {
                "network"
            }
            Self::Provider(ProviderError::Timeout(_)) => "timeout",
            Self::Provider(ProviderError::Redirect(_)) => "redirect",
            Self::Provider(ProviderError::Decode(_)) => "decode",
            Self::Provider(ProviderError::Replay(_)) => "replay",
            Self::Stream(StreamError::TooLarge { .. }) => "too_large",
            Self::Stream(StreamError::Filtered) => "content_filter",
            Self::Stream(_) => "stream",
            Self::Crashed(_) => "crash",
            Self::Cancelled { .. } => "cancelled",
        }
    }
}

/// The word for a provider's error, from its HTTP status (when it came as one)
/// and its error object's `type` and `code`.
fn provider_kind(
    status: Option<u16>,
    kind: Option<&str>,
    code: Option<&str>,
    message: &str,
) -> &'static str {
    let is = |names: &[&str]| names.iter().any(|n| kind == Some(*n) || code == Some(*n));
    if is(&["request_too_large"]) || status == Some(413) {
        return "too_large";
    }
    if classify_api_code(kind, code, message) == Some(ErrorClass::ContextOverflow) {
        return "context_overflow";
    }
    if is(&["insufficient_quota", "billing_error"]) {
        return "quota";
    }
    if is(&["model_not_found", "not_found_error"]) || status == Some(404) {
        return "model_not_found";
    }
    if is(&[
        "authentication_error",
        "permission_error",
        "invalid_api_key",
    ]) || matches!(status, Some(401 | 403))
    {
        return "auth";
    }
    if is(&["overloaded_error"]) || matches!(status, Some(503 | 529)) {
        return "overloaded";
    }
    if is(&["rate_limit_error", "rate_limit_exceeded"]) || status == Some(429) {
        return "rate_limit";
    }
    if is(&["content_filter"]) {
        return "content_filter";
    }
    if is(&["invalid_request_error"]) || matches!(status, Some(400 | 422)) {
        return "bad_request";
    }
    if is(&["server_error", "api_error", "timeout_error"]) || status.is_some_and(|s| s >= 500) {
        return "server";
    }
    "provider"
}

impl SessionError {
    /// A failed run's word for why (the `failed (…)` of its outcome):
    /// [`LlmError::kind`] for a model's failure, else `crash`, `journal`,
    /// `spawn` or `shutdown`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Llm(e) => e.kind(),
            Self::RetriesExhausted { last, .. } => last.kind(),
            Self::CrashLoop { .. } => "crash",
            Self::Journal(_) => "journal",
            Self::Spawn(_) => "spawn",
            Self::Gone(_) | Self::Shutdown => "shutdown",
        }
    }

    /// The class of this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::Llm(e) => e.class(),
            Self::RetriesExhausted { .. }
            | Self::Journal(_)
            | Self::Spawn(_)
            | Self::Gone(_)
            | Self::Shutdown => ErrorClass::Permanent,
            Self::CrashLoop { .. } => ErrorClass::Crash,
        }
    }
}

/// Shortens a server-provided message for display, on a char boundary, on one line.
pub(crate) fn excerpt(message: &str) -> String {
    const MAX: usize = 300;
    let one_line: String = message.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.len() <= MAX {
        return one_line;
    }
    let mut end = MAX;
    while !one_line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &one_line[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_error(status: u16) -> ProviderError {
        ProviderError::Status {
            status,
            message: String::new(),
            code: None,
            retry_after: None,
            request_id: None,
        }
    }

    #[test]
    fn http_statuses_classify_as_the_taxonomy_says() {
        for s in [408, 429, 500, 502, 503, 504, 529] {
            assert!(
                matches!(status_error(s).class(), ErrorClass::Retryable { .. }),
                "{s}"
            );
        }
        for s in [400, 401, 403, 404, 422] {
            assert_eq!(status_error(s).class(), ErrorClass::Permanent, "{s}");
        }
    }

    #[test]
    fn codes_override_statuses() {
        let overflow = ProviderError::Status {
            status: 400,
            message: "This model's maximum context length is 8192 tokens".into(),
            code: Some("context_length_exceeded".into()),
            retry_after: None,
            request_id: None,
        };
        assert_eq!(overflow.class(), ErrorClass::ContextOverflow);
        let quota = ProviderError::Status {
            status: 429,
            message: "You exceeded your current quota".into(),
            code: Some("insufficient_quota".into()),
            retry_after: None,
            request_id: None,
        };
        assert_eq!(quota.class(), ErrorClass::Permanent);
    }

    #[test]
    fn retry_after_travels_with_the_class() {
        let e = ProviderError::Status {
            status: 429,
            message: String::new(),
            code: None,
            retry_after: Some(Duration::from_secs(2)),
            request_id: None,
        };
        assert_eq!(
            e.class(),
            ErrorClass::Retryable {
                after: Some(Duration::from_secs(2))
            }
        );
    }

    #[test]
    fn a_failure_has_one_word_and_only_a_missing_or_overloaded_model_falls_back() {
        let llm = |e: ProviderError| LlmError::Provider(e);
        let coded = |status: u16, code: &str| {
            llm(ProviderError::Status {
                status,
                message: String::new(),
                code: Some(code.into()),
                retry_after: None,
                request_id: None,
            })
        };
        let cases = [
            (llm(status_error(401)), "auth", None),
            (llm(status_error(403)), "auth", None),
            (llm(status_error(400)), "bad_request", None),
            (
                llm(status_error(404)),
                "model_not_found",
                Some("model_not_found"),
            ),
            (coded(400, "model_not_found"), "model_not_found", None),
            (llm(status_error(429)), "rate_limit", Some("overloaded")),
            (llm(status_error(529)), "overloaded", Some("overloaded")),
            (coded(429, "insufficient_quota"), "quota", None),
            (
                coded(400, "context_length_exceeded"),
                "context_overflow",
                None,
            ),
            (llm(status_error(500)), "server", None),
            (LlmError::Crashed("bug".into()), "crash", None),
            (LlmError::Stream(StreamError::EndedEarly), "stream", None),
        ];
        for (error, word, fallback) in cases {
            assert_eq!(error.kind(), word, "{error}");
            assert_eq!(error.fallback_reason(), fallback, "{error}");
        }
        let exhausted = SessionError::RetriesExhausted {
            attempts: 3,
            last: Box::new(llm(status_error(529))),
        };
        assert_eq!(exhausted.kind(), "overloaded");
        assert_eq!(SessionError::Journal("disk".into()).kind(), "journal");
        let with_id = ProviderError::Status {
            status: 401,
            message: "no".into(),
            code: None,
            retry_after: None,
            request_id: Some("req_1".into()),
        };
        assert_eq!(with_id.to_string(), "HTTP 401: no (request id req_1)");
    }

    #[test]
    fn in_band_errors_classify_by_type() {
        let server = ProviderError::InBand {
            kind: Some("server_error".into()),
            code: None,
            message: "boom".into(),
        };
        assert!(matches!(server.class(), ErrorClass::Retryable { .. }));
        let invalid = ProviderError::InBand {
            kind: Some("invalid_request_error".into()),
            code: None,
            message: "bad".into(),
        };
        assert_eq!(invalid.class(), ErrorClass::Permanent);
    }

    #[test]
    fn an_in_band_error_of_an_unknown_kind_is_permanent() {
        let in_band = |kind: Option<&str>, code: Option<&str>| ProviderError::InBand {
            kind: kind.map(str::to_owned),
            code: code.map(str::to_owned),
            message: "something".into(),
        };
        // A kind nobody documents, the generic "error", or none at all: asking
        // again is not known to help.
        for kind in [Some("mystery_error"), Some("error"), None] {
            assert_eq!(
                in_band(kind, None).class(),
                ErrorClass::Permanent,
                "{kind:?}"
            );
        }
        // A numeric code is an HTTP status, classified as one.
        assert_eq!(
            in_band(Some("InternalServerError"), Some("503")).class(),
            ErrorClass::Retryable { after: None }
        );
        assert_eq!(
            in_band(Some("BadRequestError"), Some("400")).class(),
            ErrorClass::Permanent
        );
        // OpenAI's rate limit names its kind by what ran out, and says so in its code.
        assert_eq!(
            in_band(Some("tokens"), Some("rate_limit_exceeded")).class(),
            ErrorClass::Retryable { after: None }
        );
        for kind in [
            "api_error",
            "overloaded_error",
            "rate_limit_error",
            "timeout_error",
        ] {
            assert_eq!(
                in_band(Some(kind), None).class(),
                ErrorClass::Retryable { after: None },
                "{kind}"
            );
        }
    }

    #[test]
    fn anthropic_billing_permission_and_size_errors_are_permanent() {
        for (kind, status) in [
            ("billing_error", 402),
            ("permission_error", 403),
            ("request_too_large", 413),
        ] {
            let in_band = ProviderError::InBand {
                kind: Some(kind.into()),
                code: None,
                message: "no".into(),
            };
            assert_eq!(in_band.class(), ErrorClass::Permanent, "{kind}");
            // As Anthropic's status answers carry them: the type as the code.
            let answered = ProviderError::Status {
                status,
                message: "no".into(),
                code: Some(kind.into()),
                retry_after: None,
                request_id: None,
            };
            assert_eq!(answered.class(), ErrorClass::Permanent, "{kind}");
        }
    }

    #[test]
    fn stream_errors_are_retryable_except_overflow_of_the_cap() {
        assert!(matches!(
            StreamError::EndedEarly.class(),
            ErrorClass::Retryable { .. }
        ));
        assert_eq!(
            StreamError::TooLarge { limit: 1 }.class(),
            ErrorClass::Permanent
        );
    }

    #[test]
    fn excerpt_is_one_bounded_line() {
        let long = "a\nb ".repeat(400);
        let e = excerpt(&long);
        assert!(!e.contains('\n'));
        assert!(e.chars().count() <= 301);
    }
}
