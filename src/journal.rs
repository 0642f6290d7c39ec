//! Session journals (DESIGN §5): `.orchestrate/sessions/<id>.jsonl`, one JSON record a
//! line. Appends are buffered; a sync makes everything appended before it durable.
//!
//! All writes go through one writer thread that commits in groups: every record that
//! arrived while the previous sync ran is covered by the next single `syncfs`, so
//! thousands of sessions finishing turns at once cost a handful of syncs, not thousands,
//! and no fsync ever blocks the async runtime. Appends only queue (no wake-up, no
//! I/O); a sync request wakes the writer, which writes everything queued, syncs once
//! and answers every sync that was waiting.

pub(crate) mod recorder;

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

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
    parse_journal(path, &text)
}

/// The records of a journal's text, read from `path` (named in errors). A torn
/// last line is ignored.
pub(crate) fn parse_journal(path: &Path, text: &str) -> Result<Vec<Record>, JournalError> {
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

/// How long appended records may sit in memory before the writer flushes them to
/// the files (without a sync) on its own.
const IDLE_FLUSH: Duration = Duration::from_millis(100);

/// After a wake-up, the writer waits this long for more sync requests before it
/// syncs: sessions of a fan-out reach their turn boundaries together, and one
/// `syncfs` then covers them all (it halves the syncs of a 1000-session run).
const GATHER: Duration = Duration::from_millis(2);

/// Appends queued past this wake the writer early, bounding memory.
const WAKE_AT: usize = 4096;

type Waiter = oneshot::Sender<Result<(), String>>;

#[derive(Default)]
struct Pending {
    appends: Vec<(PathBuf, Vec<u8>)>,
    waiters: Vec<Waiter>,
    closed: bool,
}

#[derive(Default)]
struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        // The writer only moves Vecs in and out under this lock; a panic cannot
        // leave them half-updated.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A handle to the journal writer. Cheap to clone; the writer thread ends when the
/// last handle is dropped, after flushing and syncing what it holds.
#[derive(Clone)]
pub struct Journal {
    handle: Arc<Handle>,
}

struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").finish_non_exhaustive()
    }
}

impl Journal {
    /// Starts the writer thread.
    pub fn start() -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let writer = Writer {
            shared: shared.clone(),
            files: HashMap::new(),
            dirs: HashSet::new(),
            max_open: max_open_files(),
            sync_fd: None,
        };
        std::thread::Builder::new()
            .name("orchestrate-journal".into())
            .spawn(move || writer.run())?;
        Ok(Self {
            handle: Arc::new(Handle { shared }),
        })
    }

    /// Queues one record for `path`. It reaches the file within 100 ms and is
    /// durable after the next [`Journal::sync`]. Appending never blocks on I/O and
    /// never wakes the writer thread, so sessions can journal every message cheaply.
    pub fn append(&self, path: &Path, record: &Record) -> Result<(), String> {
        self.append_all(path, std::slice::from_ref(record))
    }

    /// Queues several records for `path` at once: they reach the file together, so
    /// a crash never leaves one without the others.
    pub fn append_all(&self, path: &Path, records: &[Record]) -> Result<(), String> {
        let mut lines = Vec::new();
        for record in records {
            serde_json::to_writer(&mut lines, record).map_err(|e| e.to_string())?;
            lines.push(b'\n');
        }
        let shared = &self.handle.shared;
        let mut pending = shared.lock();
        pending.appends.push((path.to_owned(), lines));
        if pending.appends.len() >= WAKE_AT {
            shared.wake.notify_one();
        }
        Ok(())
    }

    /// Waits until everything appended so far (by any session) is on disk. Syncs
    /// requested while one is running are served together by the next one.
    pub async fn sync(&self) -> Result<(), String> {
        let (done, wait) = oneshot::channel();
        let shared = &self.handle.shared;
        shared.lock().waiters.push(done);
        shared.wake.notify_one();
        wait.await
            .map_err(|_| "the journal writer has stopped".to_owned())?
    }
}

/// A quarter of the process's file-descriptor limit, so journals never starve the
/// sockets and tools of descriptors.
fn max_open_files() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    limit.map_or(256, |n| (n / 4).clamp(16, 8192) as usize)
}

struct Writer {
    shared: Arc<Shared>,
    files: HashMap<PathBuf, BufWriter<File>>,
    dirs: HashSet<PathBuf>,
    max_open: usize,
    /// The journal directory, held open for `syncfs` even when no file is.
    sync_fd: Option<File>,
}

impl Writer {
    fn run(mut self) {
        loop {
            {
                let mut pending = self.shared.lock();
                while pending.appends.is_empty() && pending.waiters.is_empty() && !pending.closed {
                    pending = match self.shared.wake.wait_timeout(pending, IDLE_FLUSH) {
                        Ok((guard, _)) => guard,
                        Err(poisoned) => poisoned.into_inner().0,
                    };
                }
            }
            std::thread::sleep(GATHER);
            let (appends, waiters, closed) = {
                let mut pending = self.shared.lock();
                (
                    std::mem::take(&mut pending.appends),
                    std::mem::take(&mut pending.waiters),
                    pending.closed,
                )
            };
            let mut error = None;
            for (path, line) in appends {
                if let Err(e) = self.write(&path, &line) {
                    error = Some(format!("{}: {e}", path.display()));
                }
            }
            let synced = self.flush_and_sync(!waiters.is_empty() || closed);
            let result = match (error, synced) {
                (Some(e), _) | (None, Err(e)) => Err(e),
                (None, Ok(())) => Ok(()),
            };
            if let Err(e) = &result {
                tracing::error!(error = %e, "journal write failed");
            }
            for done in waiters {
                let _ = done.send(result.clone());
            }
            if self.files.len() > self.max_open {
                self.files.clear();
            }
            if closed && self.shared.lock().appends.is_empty() {
                return;
            }
        }
    }

    fn write(&mut self, path: &Path, line: &[u8]) -> std::io::Result<()> {
        if !self.files.contains_key(path) {
            if let Some(dir) = path.parent()
                && !self.dirs.contains(dir)
            {
                std::fs::create_dir_all(dir)?;
                if self.sync_fd.is_none() {
                    self.sync_fd = Some(File::open(dir)?);
                }
                self.dirs.insert(dir.to_owned());
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
        // Journals live under one directory, so one syncfs covers every file,
        // including those already closed to stay under the descriptor budget.
        if let Some(dir) = &self.sync_fd {
            rustix::fs::syncfs(dir).map_err(|e| format!("journal sync: {e}"))?;
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
