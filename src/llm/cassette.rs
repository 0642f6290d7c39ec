//! Cassettes: JSONL recordings of provider traffic (`--record FILE`), answered from
//! by the replay provider (`--replay FILE`). One line per HTTP exchange that got a
//! response (except a stream the run itself cancelled): where the request came from (`place`, see [`ChatRequest::place`]),
//! the protocol, the request body as sent (never a key: those travel in headers),
//! what the request carried that a replay must match (`sent`: its prompts and
//! which tool results were errors, whatever the protocol), the status, the raw
//! response body (the SSE stream byte for byte) and how long it took.
//!
//! A recorded response is bounded ([`MAX_RECORDED_BYTES`]): a stream can go on
//! without end (events that add nothing to the answer are not held against its cap),
//! and a recording must not grow with it. A longer one is kept up to its last whole
//! event within the bound, then an SSE comment (which every parser skips) says
//! where and how much was cut.
//!
//! [`ChatRequest::place`]: crate::llm::ChatRequest::place

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::conversation::Message;
use crate::llm::ChatRequest;

/// One recorded exchange.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// The session's place in the agent tree and its turn.
    pub place: String,
    /// `openai` or `anthropic`: which decoder reads the response.
    pub protocol: String,
    /// The request body as sent.
    pub request: Value,
    /// What the request carried that a replay must match; absent in a line
    /// written by hand, which is then played unchecked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<Sent>,
    /// The HTTP status.
    pub status: u16,
    /// The response body as received (an SSE stream for a streamed turn).
    pub response: String,
    /// How long the response took to arrive; a replay spreads its events over it.
    #[serde(default)]
    pub duration_ms: u64,
}

/// Bytes of one response a cassette keeps at most: twice the answer's cap, room
/// for any answer with its event framing.
pub const MAX_RECORDED_BYTES: usize = 2 * crate::llm::assembler::DEFAULT_MAX_ANSWER_BYTES;

/// A streamed response as it is captured for the cassette: its first bytes, up to a
/// limit, and how long it was.
#[derive(Debug)]
pub(crate) struct Capture {
    kept: Vec<u8>,
    total: usize,
    limit: usize,
}

impl Capture {
    /// An empty capture that keeps at most `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            kept: Vec::new(),
            total: 0,
            limit,
        }
    }

    /// Adds the next bytes of the response.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len();
        let room = self.limit.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }

    /// True when nothing arrived.
    pub(crate) fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The response as recorded: whole, or cut after its last whole event within
    /// the limit and closed by a comment saying so.
    pub(crate) fn take(&mut self) -> Vec<u8> {
        let mut kept = std::mem::take(&mut self.kept);
        if self.total > kept.len() {
            let whole = memchr::memmem::rfind(&kept, b"\n\n").map_or(0, |end| end + 2);
            kept.truncate(whole);
            kept.extend_from_slice(
                format!(
                    ": orchestrate: the response was cut here; it went on for {} bytes, and a \
                     recording keeps at most {}\n\n",
                    self.total, self.limit
                )
                .as_bytes(),
            );
        }
        kept
    }
}

/// What a request carried that its answer depends on, in no protocol's shape: a
/// replay whose request differs here is no longer the recorded run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    /// Every prompt of the conversation, in order: the task first.
    pub prompts: Vec<String>,
    /// Every tool result, in order.
    pub results: Vec<SentResult>,
}

/// One tool result as a replay compares it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentResult {
    /// The id of the call it answers.
    pub call: String,
    /// Whether the call failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub error: bool,
}

impl Sent {
    /// What `request` carries.
    pub fn of(request: &ChatRequest) -> Self {
        let mut sent = Self::default();
        for message in &request.messages {
            match message {
                Message::User { content } => sent.prompts.push(content.clone()),
                Message::Tool(result) => sent.results.push(SentResult {
                    call: result.tool_call_id.clone(),
                    error: result.is_error,
                }),
                Message::System { .. } | Message::Assistant(_) => {}
            }
        }
        sent
    }
}

/// The longest cassette line read: a recorded response is kept to 16 MiB, and
/// its request and what was sent beside it.
const MAX_LINE: u64 = 64 * 1024 * 1024;

/// Reads a cassette, opened safely ([`crate::small_file::open`]) and line by
/// line, each line bounded; errors name the file and line.
pub fn read(path: &Path) -> Result<Vec<Exchange>, String> {
    let file = crate::small_file::open(path, crate::small_file::Access::Read)
        .map_err(|e| e.to_string())?;
    let mut lines = crate::small_file::Lines::new(file, MAX_LINE);
    let mut exchanges = Vec::new();
    let mut line = Vec::new();
    while let Some(n) = lines
        .next_into(&mut line)
        .map_err(|e| format!("{}: {e}", path.display()))?
    {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let exchange =
            serde_json::from_slice(&line).map_err(|e| format!("{}:{n}: {e}", path.display()))?;
        exchanges.push(exchange);
    }
    Ok(exchanges)
}

/// Appends exchanges to a cassette, a whole line at a time, flushed as it goes so a
/// crashed run keeps what it recorded.
#[derive(Debug)]
pub struct Recorder {
    path: PathBuf,
    file: Mutex<File>,
}

impl Recorder {
    /// Creates (or empties) the cassette at `path`: never through a link, nor
    /// into a FIFO or a device ([`crate::small_file::open`]).
    pub fn create(path: &Path) -> Result<Self, String> {
        let file = crate::small_file::open(path, crate::small_file::Access::Replace)
            .map_err(|e| e.to_string())?;
        Ok(Self {
            path: path.to_owned(),
            file: Mutex::new(file),
        })
    }

    /// Records one exchange.
    pub fn record(&self, exchange: &Exchange) {
        let mut line = match serde_json::to_vec(exchange) {
            Ok(line) => line,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode a cassette line");
                return;
            }
        };
        line.push(b'\n');
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = file.write_all(&line).and_then(|()| file.flush()) {
            tracing::error!(path = %self.path.display(), error = %e, "cannot write the cassette");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_keeps_its_limit_cut_at_an_event_end_and_says_so() {
        let mut capture = Capture::new(20);
        assert!(capture.is_empty());
        for _ in 0..1000 {
            capture.push(b"data: {}\n\n");
        }
        assert!(capture.kept.capacity() < 64, "{}", capture.kept.capacity());
        let recorded = String::from_utf8(capture.take()).unwrap();
        assert_eq!(
            recorded,
            "data: {}\n\ndata: {}\n\n: orchestrate: the response was cut here; it went on \
             for 10000 bytes, and a recording keeps at most 20\n\n"
        );
        let mut small = Capture::new(20);
        small.push(b"data: {}\n\n");
        assert_eq!(small.take(), b"data: {}\n\n");
    }
}
