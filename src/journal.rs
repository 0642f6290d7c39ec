//! Session journals (DESIGN §5): `.orchestrate/sessions/<id>.jsonl`, one JSON record a
//! line. Appends are buffered; a sync makes everything appended before it durable.
//!
//! All writes go through one writer thread that commits in groups: every record that
//! arrived while the previous sync ran is covered by the next single `syncfs`, so
//! thousands of sessions finishing turns at once cost a handful of syncs, not thousands,
//! and no fsync ever blocks the async runtime.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::conversation::Message;
use crate::protocol::{Outcome, SessionId};

/// Open journal files kept at once; past this the writer closes them all.
const MAX_OPEN_FILES: usize = 512;

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
    },
    /// A message added to the transcript.
    Message {
        /// The message.
        message: Message,
    },
    /// A run ended.
    Terminal {
        /// How.
        outcome: Outcome,
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

/// The journal directory of a workspace.
pub fn sessions_dir(workspace: &Path) -> PathBuf {
    workspace.join(".orchestrate").join("sessions")
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

enum Command {
    Append {
        path: PathBuf,
        line: Vec<u8>,
    },
    Sync {
        done: oneshot::Sender<Result<(), String>>,
    },
}

/// A handle to the journal writer. Cheap to clone; the writer thread ends when the
/// last handle is dropped, after flushing.
#[derive(Clone, Debug)]
pub struct Journal {
    tx: std_mpsc::Sender<Command>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Append { path, .. } => write!(f, "Append({})", path.display()),
            Self::Sync { .. } => f.write_str("Sync"),
        }
    }
}

impl Journal {
    /// Starts the writer thread.
    pub fn start() -> std::io::Result<Self> {
        let (tx, rx) = std_mpsc::channel();
        std::thread::Builder::new()
            .name("orchestrate-journal".into())
            .spawn(move || Writer::default().run(&rx))?;
        Ok(Self { tx })
    }

    /// Queues one record for `path`. It is durable after the next [`Journal::sync`].
    pub fn append(&self, path: &Path, record: &Record) -> Result<(), String> {
        let mut line = serde_json::to_vec(record).map_err(|e| e.to_string())?;
        line.push(b'\n');
        self.tx
            .send(Command::Append {
                path: path.to_owned(),
                line,
            })
            .map_err(|_| "the journal writer has stopped".to_owned())
    }

    /// Waits until everything appended so far is on disk.
    pub async fn sync(&self) -> Result<(), String> {
        let (done, wait) = oneshot::channel();
        self.tx
            .send(Command::Sync { done })
            .map_err(|_| "the journal writer has stopped".to_owned())?;
        wait.await
            .map_err(|_| "the journal writer has stopped".to_owned())?
    }
}

#[derive(Default)]
struct Writer {
    files: HashMap<PathBuf, BufWriter<File>>,
    error: Option<String>,
}

impl Writer {
    fn run(mut self, rx: &std_mpsc::Receiver<Command>) {
        while let Ok(first) = rx.recv() {
            // Take everything that is already waiting: one group, one sync.
            let mut waiters = Vec::new();
            for command in std::iter::once(first).chain(rx.try_iter()) {
                match command {
                    Command::Append { path, line } => {
                        if let Err(e) = self.write(&path, &line) {
                            self.error = Some(format!("{}: {e}", path.display()));
                        }
                    }
                    Command::Sync { done } => waiters.push(done),
                }
            }
            let flushed = self.flush_and_sync(!waiters.is_empty());
            for done in waiters {
                let _ = done.send(match (&self.error, &flushed) {
                    (Some(e), _) => Err(e.clone()),
                    (None, Err(e)) => Err(e.clone()),
                    (None, Ok(())) => Ok(()),
                });
            }
            if self.files.len() > MAX_OPEN_FILES {
                self.files.clear();
            }
        }
        let _ = self.flush_and_sync(true);
    }

    fn write(&mut self, path: &Path, line: &[u8]) -> std::io::Result<()> {
        if !self.files.contains_key(path) {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let file = OpenOptions::new().create(true).append(true).open(path)?;
            self.files.insert(path.to_owned(), BufWriter::new(file));
        }
        match self.files.get_mut(path) {
            Some(w) => w.write_all(line),
            None => Ok(()),
        }
    }

    fn flush_and_sync(&mut self, sync: bool) -> Result<(), String> {
        for (path, w) in &mut self.files {
            w.flush().map_err(|e| format!("{}: {e}", path.display()))?;
        }
        if !sync {
            return Ok(());
        }
        // Every journal lives under one directory, so one syncfs covers them all.
        if let Some((path, w)) = self.files.iter().next() {
            rustix::fs::syncfs(w.get_ref())
                .map_err(|e| format!("{}: sync: {e}", path.display()))?;
        }
        Ok(())
    }
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

    #[tokio::test]
    async fn appended_records_are_readable_after_sync() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::start().unwrap();
        let id = SessionId::new();
        let path = journal_path(dir.path(), id);
        for i in 0..100 {
            journal
                .append(
                    &path,
                    &Record::Message {
                        message: Message::user(i.to_string()),
                    },
                )
                .unwrap();
        }
        journal.sync().await.unwrap();
        let records = read_journal(&path).unwrap();
        assert_eq!(records.len(), 100);
        assert_eq!(
            records[99],
            Record::Message {
                message: Message::user("99")
            }
        );
    }
}
