//! Session journals: `sessions/<id>.jsonl` in the workspace's state folder
//! ([`crate::state::StateDir::journal`]), one JSON record a line: the record
//! format and reading them back. Writing is `writer`'s: appends are queued; a
//! session's sync makes everything appended to its journal before it durable.

pub(crate) mod recorder;
mod writer;

pub use self::writer::{Journal, Mirrored, PendingSync};

/// Where a journal is also kept (a remote sub-agent's, in its run's
/// stream): given its lines in the order its file is, without waiting.
pub trait Mirror: Send + Sync + std::fmt::Debug {
    /// Takes lines appended to the journal (whole lines); never blocks.
    fn append(&self, lines: &[u8]);

    /// Resolves once every line appended before this call is kept there;
    /// why not, when it cannot be.
    fn sync(&self) -> futures::future::BoxFuture<'static, Result<(), String>>;
}

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::conversation::Message;
use crate::protocol::{Changes, Checkout, Event, Outcome, SessionId};

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
        /// The journal's format ([`FORMAT`] when written by this build).
        #[serde(default = "unnumbered")]
        format: u32,
        /// An isolated sub-agent's private checkout.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        checkout: Option<Checkout>,
        /// It runs on a worker: this journal is its lead's record of it (its
        /// start and events, then its conversation as its workers journaled
        /// it, with its end).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        remote: bool,
    },
    /// A run began; the next message is its prompt.
    RunStarted {
        /// The prompt's id.
        prompt: u64,
        /// The run's limits, in a lead's journal when it was given any: what a
        /// run carried on by `resume` is held to unless its flags say otherwise.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limits: Option<Limits>,
    },
    /// The limits of the run in progress from here on: a run carried on by
    /// `resume` with limits of its own (the flags given then) keeps them for
    /// the next `resume`.
    Limits {
        /// The limits.
        limits: Limits,
    },
    /// A prompt joined the run in progress; the next message is that prompt.
    PromptJoined {
        /// The prompt's id.
        prompt: u64,
        /// The background sub-agent whose result it is (its task id).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        background: Option<SessionId>,
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
    /// An isolated sub-agent's work, committed in its checkout (by its
    /// caller's Task call, once the sub-agent's run ended).
    Committed {
        /// The commit.
        commit: String,
    },
    /// That commit, fetched into the parent's repository as a branch.
    Fetched {
        /// The branch.
        branch: String,
        /// The commit.
        commit: String,
    },
    /// The merge into the parent's tree began, against this snapshot of it
    /// (a merge cut off is done again against the same).
    Merging {
        /// The snapshot commit of the parent's tree.
        ours: String,
    },
    /// What became of the work: merged into the parent's tree, or why not.
    Merged {
        /// What became of it.
        result: Changes,
    },
    /// The checkout was removed.
    CheckoutRemoved,
    /// A check of the sub-agent's work ran (its caller's, after it answered).
    Checked {
        /// Which attempt, from 1.
        attempt: u32,
        /// Its exit code; `None` when it did not exit (refused, timed out).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit: Option<i32>,
        /// Whether it passed.
        passed: bool,
        /// The prompt the sub-agent is sent next, when it failed with
        /// attempts left.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt: Option<String>,
        /// The permission gate refused it: no attempt is made again.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        refused: bool,
    },
    /// What the session may do was narrowed from here on (a slash command's
    /// or a loaded skill's `allowed-tools`): a session started again from
    /// its journal is narrowed as it was.
    Narrowed {
        /// What narrowed it (`the skill "pdf"`).
        by: String,
        /// The calls it allows, as rules (`Read`, `Bash(git diff:*)`).
        only: Vec<String>,
    },
    /// A lifecycle event of the session (a tool finished, a retry, a restart...),
    /// recorded from the event bus for the record; a resumed session ignores it.
    Event {
        /// The event as the bus published it.
        event: Event,
        /// When it was kept, in milliseconds since the Unix epoch: how long a
        /// run carried on by `resume` had already run. Missing in journals
        /// written before it was kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at: Option<u64>,
        /// What the journal's copy of the event leaves out (content its
        /// messages already hold); `None` when it is the event as published.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        elided: Option<Elided>,
    },
}

/// A run's limits (`--max-cost`, `--max-tokens`, `--timeout`), as journaled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// USD at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Tokens at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Running time at most, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// A field of an event the journal keeps empty, because the session's messages
/// hold it: a call's arguments (the assistant message with that call's id), a
/// turn's text (that turn's assistant message), a change's diff (the call's
/// result, or for a file a Write created, the call's `content`). The event on
/// the bus, and so `--json`, carries it whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Elided {
    /// The field: `arguments`, `text` or `diff`.
    pub field: String,
    /// How long it was, in bytes.
    pub bytes: u64,
}

/// The format of the journals this build writes, in their headers. A journal of
/// a later format is refused (its records may mean something this build does not
/// know); one of this format or an earlier one is read. Format 2 keeps events
/// lean ([`Elided`]); format 1 kept them whole.
pub const FORMAT: u32 = 2;

/// The format of a header that names none: journals written before formats were
/// numbered, which are this format.
fn unnumbered() -> u32 {
    1
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
    /// A line too long to be a record: the file is not a journal.
    #[error("{path}:{line}: not a journal: {reason}")]
    Corrupt {
        /// The journal.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The first record is not a header: whose journal it is cannot be told.
    #[error("{path}: its first line names no session (the header is missing or damaged)")]
    Headless {
        /// The journal.
        path: PathBuf,
    },
    /// The journal was written by a later build of orchestrate.
    #[error(
        "{path}: written by a newer orchestrate (journal format {format}; this one reads up to {FORMAT})"
    )]
    Newer {
        /// The journal.
        path: PathBuf,
        /// Its format.
        format: u32,
    },
}

impl JournalError {
    /// The journal it is about.
    pub fn path(&self) -> &Path {
        match self {
            Self::Io { path, .. }
            | Self::Corrupt { path, .. }
            | Self::Headless { path }
            | Self::Newer { path, .. } => path,
        }
    }
}

/// A line of a journal that is not a record (damaged on disk, or written by
/// hand): skipped, and named to the person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Damaged {
    /// The journal.
    pub path: PathBuf,
    /// 1-based line number.
    pub line: usize,
    /// Why it is not a record.
    pub reason: String,
}

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: damaged line skipped ({})",
            self.path.display(),
            self.line,
            self.reason
        )
    }
}

/// What a journal holds: its records, and the damaged lines between them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Contents {
    /// Every record, in order.
    pub records: Vec<Record>,
    /// The lines that are not records, skipped.
    pub damaged: Vec<Damaged>,
}

/// The longest journal line read back: far above any record a session writes
/// (a compacted transcript, a tool result within its cap), far below what would
/// hurt. A longer line is damage.
pub const MAX_LINE: u64 = 256 * 1024 * 1024;

/// Reads a journal, line by line, as bytes: the file is opened safely
/// ([`crate::small_file::open`]: no symbolic link, FIFO or device, only this
/// user's regular file), and no line is read past [`MAX_LINE`]. Each complete
/// line is decoded on its own; the last segment without a newline is a torn
/// write (a crash, a full disk) and is ignored; a line in between that is not a
/// record is skipped and named in [`Contents::damaged`].
pub fn read_journal(path: &Path) -> Result<Contents, JournalError> {
    let io = |source: std::io::Error| JournalError::Io {
        path: path.to_owned(),
        source,
    };
    let file =
        crate::small_file::open(path, crate::small_file::Access::Read).map_err(|e| io(e.into()))?;
    let mut lines = crate::small_file::Lines::new(file, MAX_LINE);
    let mut reading = Reading::new(path);
    let mut line = Vec::new();
    loop {
        match lines.next_into(&mut line) {
            Ok(Some(number)) => reading.line(number, &line)?,
            Ok(None) => return Ok(reading.contents),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(JournalError::Corrupt {
                    path: path.to_owned(),
                    line: lines.number(),
                    reason: e.to_string(),
                });
            }
            Err(e) => return Err(io(e)),
        }
    }
}

/// The records of a journal's bytes, read from `path` (named in errors), as
/// [`read_journal`] reads a file.
pub fn parse_journal(path: &Path, bytes: &[u8]) -> Result<Contents, JournalError> {
    let mut reading = Reading::new(path);
    for (i, line) in bytes.split_inclusive(|b| *b == b'\n').enumerate() {
        reading.line(i + 1, line)?;
    }
    Ok(reading.contents)
}

/// A journal read so far.
struct Reading<'a> {
    path: &'a Path,
    contents: Contents,
}

impl<'a> Reading<'a> {
    fn new(path: &'a Path) -> Self {
        Self {
            path,
            contents: Contents::default(),
        }
    }

    /// Takes line `number`, its newline kept: a record, a blank line, a torn
    /// tail (no newline: ignored) or a damaged line.
    fn line(&mut self, number: usize, line: &[u8]) -> Result<(), JournalError> {
        let Some(line) = line.strip_suffix(b"\n") else {
            return Ok(());
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        match serde_json::from_slice::<Record>(line) {
            Ok(Record::Header { format, .. }) if format > FORMAT => Err(JournalError::Newer {
                path: self.path.to_owned(),
                format,
            }),
            Ok(record) => {
                self.contents.records.push(record);
                Ok(())
            }
            Err(e) => {
                self.contents.damaged.push(Damaged {
                    path: self.path.to_owned(),
                    line: number,
                    reason: e.to_string(),
                });
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> String {
        serde_json::to_string(&Record::Message {
            message: Message::user(text),
        })
        .unwrap()
    }

    #[test]
    fn a_torn_last_line_is_ignored_and_a_damaged_one_elsewhere_is_skipped_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let good = line("hi");
        std::fs::write(&path, format!("{good}\n{good}\n{{\"record\":\"mess")).unwrap();
        let read = read_journal(&path).unwrap();
        assert_eq!((read.records.len(), read.damaged.len()), (2, 0));
        // Even a whole record is torn without its newline: the next append cuts it.
        std::fs::write(&path, format!("{good}\n{good}")).unwrap();
        assert_eq!(read_journal(&path).unwrap().records.len(), 1);
        std::fs::write(&path, format!("{good}\n{{oops\n\n{good}\n")).unwrap();
        let read = read_journal(&path).unwrap();
        assert_eq!(read.records.len(), 2);
        let [damaged] = read.damaged.as_slice() else {
            panic!("{:?}", read.damaged)
        };
        assert_eq!(damaged.line, 2);
        let said = damaged.to_string();
        assert!(
            said.starts_with(&format!("{}:2: damaged line skipped (", path.display())),
            "{said}"
        );
    }

    #[test]
    fn a_torn_multi_byte_character_is_a_torn_line_and_bad_bytes_mid_file_a_damaged_one() {
        let good = line("é");
        let mut bytes = format!("{good}\n{good}").into_bytes();
        bytes.truncate(bytes.len() - 4);
        let read = parse_journal(Path::new("j.jsonl"), &bytes).unwrap();
        assert_eq!((read.records.len(), read.damaged.len()), (1, 0));
        let mut bytes = format!("{good}\n").into_bytes();
        bytes.extend_from_slice(b"\xff\xfe{}\n");
        bytes.extend_from_slice(format!("{good}\n").as_bytes());
        let read = parse_journal(Path::new("j.jsonl"), &bytes).unwrap();
        assert_eq!(read.records.len(), 2);
        assert_eq!(read.damaged[0].line, 2);
    }

    #[test]
    fn a_journal_of_a_later_format_is_refused_and_one_without_a_format_is_the_first() {
        let header = |format: Option<u32>| {
            let mut value = serde_json::json!({
                "record": "header",
                "session": crate::protocol::SessionId::new(),
                "agent": "lead",
                "model": "m",
            });
            if let Some(format) = format {
                value["format"] = format.into();
            }
            format!("{value}\n")
        };
        let read = parse_journal(Path::new("j.jsonl"), header(None).as_bytes()).unwrap();
        assert!(matches!(read.records[0], Record::Header { format: 1, .. }));
        let newer = header(Some(FORMAT + 1));
        let err = parse_journal(Path::new("j.jsonl"), newer.as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "j.jsonl: written by a newer orchestrate (journal format {}; this one reads up to {FORMAT})",
                FORMAT + 1
            )
        );
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
    }

    mod properties {
        use std::path::Path;

        use proptest::prelude::*;

        use super::super::{parse_journal, read_journal};

        proptest! {
            /// Any bytes are records and damaged lines, each named within the
            /// file; what a file holds reads the same as its bytes.
            #[test]
            fn any_bytes_are_records_and_located_damage(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
                let read = parse_journal(Path::new("j.jsonl"), &bytes).unwrap();
                let lines = bytes.split(|b| *b == b'\n').count();
                for damaged in &read.damaged {
                    prop_assert!(damaged.line >= 1 && damaged.line < lines);
                }
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("j.jsonl");
                std::fs::write(&path, &bytes).unwrap();
                let from_file = read_journal(&path).unwrap();
                prop_assert_eq!(from_file.records, read.records);
                prop_assert_eq!(from_file.damaged.len(), read.damaged.len());
            }
        }
    }
}
