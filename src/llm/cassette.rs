//! Cassettes: JSONL recordings of provider traffic (`--record FILE`), answered from
//! by the replay provider (`--replay FILE`). One line per HTTP exchange that got a
//! response (except a stream the run itself cancelled): where the request came from (`place`, see [`ChatRequest::place`]),
//! the protocol, the request body as sent (never a key: those travel in headers),
//! the status, the raw response body (the SSE stream byte for byte) and how long
//! it took.
//!
//! [`ChatRequest::place`]: crate::llm::ChatRequest::place

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One recorded exchange.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// The session's place in the agent tree and its turn.
    pub place: String,
    /// `openai` or `anthropic`: which decoder reads the response.
    pub protocol: String,
    /// The request body as sent.
    pub request: Value,
    /// The HTTP status.
    pub status: u16,
    /// The response body as received (an SSE stream for a streamed turn).
    pub response: String,
    /// How long the response took to arrive; a replay spreads its events over it.
    #[serde(default)]
    pub duration_ms: u64,
}

/// Reads a cassette; errors name the file and line.
pub fn read(path: &Path) -> Result<Vec<Exchange>, String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut exchanges = Vec::new();
    for (n, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| format!("{}:{}: {e}", path.display(), n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let exchange = serde_json::from_str(&line)
            .map_err(|e| format!("{}:{}: {e}", path.display(), n + 1))?;
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
    /// Creates (or truncates) the cassette at `path`.
    pub fn create(path: &Path) -> Result<Self, String> {
        let file = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
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
