//! Session journals: `sessions/<id>.jsonl` in the workspace's state folder
//! ([`crate::state::StateDir::journal`]), one JSON record a line: the record
//! format and reading them back. Writing is `writer`'s: appends are queued; a
//! session's sync makes everything appended to its journal before it durable.

pub(crate) mod recorder;
mod writer;

pub use self::writer::{Journal, PendingSync};

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::conversation::Message;
use crate::protocol::{Event, Outcome, SessionId};

/// One line of a journal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum Record {
    /// The first line: who this session is.
    Header {
        /// The session.
        session: SessionId,
        /// Its role.
        agent: String,
        /// Its model.
        model: String,
        /// The parent session, for sub-agents.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<SessionId>,
        /// The parent's tool call that spawned it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_call_id: Option<String>,
        /// The run it belongs to: its lead session's id (its own, for a lead).
        /// Missing in journals written before runs were named.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run: Option<SessionId>,
    },
    /// A run began; the next message is its prompt.
    RunStarted {
        /// The prompt's id.
        prompt: u64,
    },
    /// A prompt joined the run in progress; the next message is that prompt.
    PromptJoined {
        /// The prompt's id.
        prompt: u64,
    },
    /// A tool call is about to run (recorded so that a resumed session knows which
    /// calls may already have had effects).
    ToolStarted {
        /// The call's id.
        call_id: String,
    },
    /// A message added to the transcript.
    Message {
        /// The message.
        message: Message,
    },
    /// The conversation was compacted: from here on it is this transcript.
    Compacted {
        /// The whole transcript after compaction.
        transcript: Vec<Message>,
        /// Model turns the run had made by then.
        #[serde(default)]
        turns: u32,
    },
    /// A run ended.
    Terminal {
        /// How.
        outcome: Outcome,
    },
    /// A lifecycle event of the session (a tool finished, a retry, a restart...),
    /// recorded from the event bus for the record; a resumed session ignores it.
    Event {
        /// The event as the bus published it.
        event: Event,
    },
}

/// Failures reading a journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The journal.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line other than a torn last one is not a record.
    #[error("{path}:{line}: not a journal record: {reason}")]
    Corrupt {
        /// The journal.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The parse error.
        reason: String,
    },
}

/// The longest journal line read back: far above any record a session writes
/// (a compacted transcript, a tool result within its cap), far below what would
/// hurt. A longer line is damage.
pub const MAX_LINE: u64 = 256 * 1024 * 1024;

/// Reads a journal, line by line: the file is opened safely
/// ([`crate::small_file::open`]: no symbolic link, FIFO or device, only this
/// user's regular file), and no line is read past [`MAX_LINE`]. A torn last line
/// (a crash mid-write) is ignored; anything else that does not parse is an error
/// naming the line.
pub fn read_journal(path: &Path) -> Result<Vec<Record>, JournalError> {
    let io = |source: std::io::Error| JournalError::Io {
        path: path.to_owned(),
        source,
    };
    let file =
        crate::small_file::open(path, crate::small_file::Access::Read).map_err(|e| io(e.into()))?;
    let mut lines = crate::small_file::Lines::new(file, MAX_LINE);
    let mut records = Vec::new();
    let mut line = Vec::new();
    loop {
        let number = match lines.next_into(&mut line) {
            Ok(Some(number)) => number,
            Ok(None) => return Ok(records),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(JournalError::Corrupt {
                    path: path.to_owned(),
                    line: lines.number(),
                    reason: e.to_string(),
                });
            }
            Err(e) => return Err(io(e)),
        };
        let complete = line.last() == Some(&b'\n');
        match parse_line(&line) {
            Ok(Some(record)) => records.push(record),
            Ok(None) => {}
            // Torn: the last line, cut before its end.
            Err(_) if !complete => return Ok(records),
            Err(reason) => {
                return Err(JournalError::Corrupt {
                    path: path.to_owned(),
                    line: number,
                    reason,
                });
            }
        }
    }
}

/// One line's record; `None` for a blank line.
fn parse_line(line: &[u8]) -> Result<Option<Record>, String> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(line)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The records of a journal's text, read from `path` (named in errors). A torn
/// last line is ignored.
pub fn parse_journal(path: &Path, text: &str) -> Result<Vec<Record>, JournalError> {
    let complete = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    let mut records = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        match parse_line(line.as_bytes()) {
            Ok(Some(record)) => records.push(record),
            Ok(None) => {}
            Err(_) if i + 1 == lines.len() && !complete => break,
            Err(reason) => {
                return Err(JournalError::Corrupt {
                    path: path.to_owned(),
                    line: i + 1,
                    reason,
                });
            }
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_last_line_is_ignored_but_corruption_elsewhere_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let good = serde_json::to_string(&Record::Message {
            message: Message::user("hi"),
        })
        .unwrap();
        std::fs::write(&path, format!("{good}\n{good}\n{{\"record\":\"mess")).unwrap();
        assert_eq!(read_journal(&path).unwrap().len(), 2);
        std::fs::write(&path, format!("{good}\n{{oops\n{good}\n")).unwrap();
        let err = read_journal(&path).unwrap_err().to_string();
        assert!(err.contains("s.jsonl:2:"), "{err}");
    }

    #[test]
    fn a_journal_that_is_a_link_a_fifo_or_a_device_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let zero = dir.path().join("zero.jsonl");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let fifo = dir.path().join("fifo.jsonl");
        crate::small_file::fifo(&fifo);
        for path in [&zero, &fifo] {
            let err = read_journal(path).unwrap_err().to_string();
            assert!(err.starts_with(&path.display().to_string()), "{err}");
        }
        // A torn multi-byte character on the last line is a torn line.
        let path = dir.path().join("s.jsonl");
        let good = serde_json::to_string(&Record::Message {
            message: Message::user("é"),
        })
        .unwrap();
        let mut bytes = format!("{good}\n{good}").into_bytes();
        bytes.truncate(bytes.len() - 4);
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(read_journal(&path).unwrap().len(), 1);
    }

    mod properties {
        use std::path::Path;

        use proptest::prelude::*;

        use super::super::{JournalError, parse_journal};

        proptest! {
            /// Any text is records, or an error naming its line: damage is never
            /// read as something else, and a torn last line is no error.
            #[test]
            fn any_text_is_records_or_a_located_error(text in "[ -~\n]{0,300}") {
                match parse_journal(Path::new("j.jsonl"), &text) {
                    Ok(_) => {}
                    Err(JournalError::Corrupt { line, .. }) => {
                        prop_assert!(line >= 1 && line <= text.lines().count());
                        prop_assert!(line < text.lines().count() || text.ends_with('\n'));
                    }
                    Err(e) => prop_assert!(false, "{}", e),
                }
            }
        }
    }
}
