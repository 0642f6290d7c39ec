//! Session journals (DESIGN §5): `.orchestrate/sessions/<id>.jsonl`, one JSON record a
//! line: the record format, where journals live, and reading them back. Writing is
//! `writer`'s: appends are queued; a session's sync makes everything appended to
//! its journal before it durable.

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

/// The directory of orchestrate's files in a workspace.
pub fn state_dir(workspace: &Path) -> PathBuf {
    workspace.join(".orchestrate")
}

/// The journal directory of a workspace.
pub fn sessions_dir(workspace: &Path) -> PathBuf {
    state_dir(workspace).join("sessions")
}

/// Makes the journal directory of a workspace, refusing one reached through a
/// symlink (a repository could point it anywhere). A new `.orchestrate/` gets a
/// `.gitignore` of `*`, so journals never end up in a commit.
pub fn prepare_dir(workspace: &Path) -> Result<PathBuf, String> {
    let state = state_dir(workspace);
    let sessions = sessions_dir(workspace);
    let runs = state.join("runs");
    for dir in [&state, &sessions, &runs] {
        if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(format!(
                "{} is a symbolic link; refusing to write journals through it (remove it, and orchestrate makes a real directory)",
                dir.display()
            ));
        }
    }
    let failed = |dir: &Path, e: std::io::Error| format!("{}: {e}", dir.display());
    if !state.exists() {
        std::fs::create_dir_all(&state).map_err(|e| failed(&state, e))?;
        let ignore = state.join(".gitignore");
        std::fs::write(&ignore, "*\n").map_err(|e| failed(&ignore, e))?;
    }
    std::fs::create_dir_all(&sessions).map_err(|e| failed(&sessions, e))?;
    Ok(sessions)
}

/// The journal file of one session.
pub fn journal_path(workspace: &Path, session: SessionId) -> PathBuf {
    sessions_dir(workspace).join(format!("{session}.jsonl"))
}

/// Reads a journal. A torn last line (a crash mid-write) is ignored; anything else
/// that does not parse is an error naming the line.
pub fn read_journal(path: &Path) -> Result<Vec<Record>, JournalError> {
    let text = std::fs::read_to_string(path).map_err(|source| JournalError::Io {
        path: path.to_owned(),
        source,
    })?;
    parse_journal(path, &text)
}

/// The records of a journal's text, read from `path` (named in errors). A torn
/// last line is ignored.
pub fn parse_journal(path: &Path, text: &str) -> Result<Vec<Record>, JournalError> {
    let complete = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    let mut records = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(record) => records.push(record),
            Err(_) if i + 1 == lines.len() && !complete => break,
            Err(e) => {
                return Err(JournalError::Corrupt {
                    path: path.to_owned(),
                    line: i + 1,
                    reason: e.to_string(),
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
