//! What the file tools share: the runtime's lock table keyed by canonical path,
//! each session's record of what it has read ([`FileState`], one per runtime,
//! a session's entries dropped when it stops, a path's lock when nobody holds
//! it), and text helpers (binary detection, line endings, byte-order marks,
//! atomic writes).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use dashmap::DashMap;
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::error::ToolError;
use crate::protocol::SessionId;

/// A file's identity at one moment: enough to notice it changed since, even by a
/// same-length write within one timestamp tick (the change time and the inode move
/// too; an atomic replacement always brings a new inode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    modified: Option<SystemTime>,
    changed: (i64, i64),
    inode: (u64, u64),
    len: u64,
}

impl Stamp {
    /// The stamp of a file's metadata.
    pub(crate) fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            modified: meta.modified().ok(),
            changed: (meta.ctime(), meta.ctime_nsec()),
            inode: (meta.dev(), meta.ino()),
            len: meta.len(),
        }
    }
}

/// The current stamp of a file, if it exists.
pub(crate) fn stamp(path: &Path) -> Option<Stamp> {
    std::fs::metadata(path).ok().map(|meta| Stamp::of(&meta))
}

/// What the file tools of one runtime share: write locks by canonical path
/// (writes to one file serialize, writes to different files proceed in
/// parallel), and what each session has read (the file's stamp then).
#[derive(Debug, Default)]
pub struct FileState {
    locks: DashMap<PathBuf, Arc<Mutex<()>>>,
    reads: DashMap<SessionId, HashMap<PathBuf, Stamp>>,
}

impl FileState {
    /// Runs `write` on the blocking pool while holding the write lock of `path`
    /// (canonical): [`FileState::locked_all`] of that one path.
    pub(crate) async fn locked<T: Send + 'static>(
        self: &Arc<Self>,
        path: &Path,
        what: &str,
        cancel: &tokio_util::sync::CancellationToken,
        write: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
    ) -> Result<T, ToolError> {
        self.locked_all(&[path.to_owned()], what, cancel, write)
            .await
    }

    /// Runs `write` on the blocking pool holding the write locks of every path
    /// of `paths` (canonical), taken in path order so that two such writers
    /// cannot each wait for the other. A `cancel` while it waits for them means
    /// the write never begins; once begun it is not cut short (it is quick, and
    /// its caller waits for it: the file tools end on a cancel with what they
    /// did). The locks travel with the blocking work: a cancel that drops this
    /// future must not free a path while the write is still going on. A lock's
    /// entry goes once nobody holds or waits for it. `what` names the work in
    /// the error if it dies.
    pub(crate) async fn locked_all<T: Send + 'static>(
        self: &Arc<Self>,
        paths: &[PathBuf],
        what: &str,
        cancel: &tokio_util::sync::CancellationToken,
        write: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
    ) -> Result<T, ToolError> {
        let mut paths = paths.to_vec();
        paths.sort();
        paths.dedup();
        let mut guards = Vec::with_capacity(paths.len());
        for path in &paths {
            let guard = tokio::select! {
                biased;
                () = cancel.cancelled() => None,
                guard = self.lock(path) => Some(guard).filter(|_| !cancel.is_cancelled()),
            };
            match guard {
                Some(guard) => guards.push(guard),
                None => {
                    drop(guards);
                    self.release(&paths);
                    return Err(ToolError::Cancelled);
                }
            }
        }
        let state = self.clone();
        tokio::task::spawn_blocking(move || {
            let done = write();
            drop(guards);
            state.release(&paths);
            done
        })
        .await
        .map_err(|e| ToolError::Failed(format!("the {what} was interrupted: {e}")))?
    }

    /// Drops the lock entries of `paths` that only the table holds now: nobody
    /// holds or waits for them.
    fn release(&self, paths: &[PathBuf]) {
        for path in paths {
            self.locks
                .remove_if(path, |_, mutex| Arc::strong_count(mutex) == 1);
        }
    }

    /// Takes the write lock of `path`, waiting for other writers.
    async fn lock(&self, path: &Path) -> OwnedMutexGuard<()> {
        let mutex = self.locks.entry(path.to_owned()).or_default().clone();
        mutex.lock_owned().await
    }

    /// Records that `session` has seen `path` as it is now.
    pub(crate) fn record_read(&self, session: SessionId, path: &Path) {
        if let Some(stamp) = stamp(path) {
            self.record_seen(session, path, stamp);
        }
    }

    /// Records that `session` has seen `path` as it was at `stamp` (taken before
    /// the read, so that a write during the read does not count as seen).
    pub(crate) fn record_seen(&self, session: SessionId, path: &Path, stamp: Stamp) {
        self.reads
            .entry(session)
            .or_default()
            .insert(path.to_owned(), stamp);
    }

    /// Whether `session` may change `path`: it must have read the file, and the
    /// file must not have changed since. The error says which and what to do.
    pub(crate) fn check_fresh(
        &self,
        session: SessionId,
        path: &Path,
        shown: &str,
    ) -> Result<(), ToolError> {
        let read = (self.reads.get(&session)).and_then(|reads| reads.get(path).copied());
        let Some(read) = read else {
            return Err(ToolError::Failed(format!(
                "{shown} exists but has not been read in this session: Read it first, then change it"
            )));
        };
        if stamp(path) != Some(read) {
            return Err(ToolError::Failed(format!(
                "{shown} has changed on disk since this session read it: Read it again before changing it"
            )));
        }
        Ok(())
    }

    /// Forgets what `session` has read: it has stopped.
    pub(crate) fn forget(&self, session: SessionId) {
        self.reads.remove(&session);
    }

    /// Paths locked or waited for, and sessions with reads on record.
    pub fn retained(&self) -> (usize, usize) {
        (self.locks.len(), self.reads.len())
    }
}

/// True when the bytes look binary (a NUL in the first 8 KiB, as git and ripgrep judge).
pub(crate) fn is_binary(bytes: &[u8]) -> bool {
    memchr::memchr(0, &bytes[..bytes.len().min(8192)]).is_some()
}

/// A text file taken apart so that an edit can put it back the way it was.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Text {
    /// The content without BOM, with `\n` line endings.
    pub(crate) body: String,
    bom: bool,
    crlf: bool,
}

impl Text {
    /// Decodes a file's bytes; `None` when they are not UTF-8 text.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes).ok()?;
        let (bom, text) = match text.strip_prefix('\u{feff}') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        // CRLF only when every line ends so: a file that mixes both is kept as it is,
        // rather than rewritten whole by a one-line edit.
        let crlf =
            text.contains("\r\n") && text.matches('\n').count() == text.matches("\r\n").count();
        let body = if crlf {
            text.replace("\r\n", "\n")
        } else {
            text.to_owned()
        };
        Some(Self { body, bom, crlf })
    }

    /// Encodes `body` (with `\n` line endings) with this file's BOM and line
    /// endings: `decode` then `encode` of the same body gives the bytes back.
    pub(crate) fn encode(&self, body: &str) -> Vec<u8> {
        let mut out = String::with_capacity(body.len() + 3);
        if self.bom {
            out.push('\u{feff}');
        }
        if self.crlf {
            // A `\r` before a line end (`\r\r\n` in the file) is the file's own.
            out.push_str(&body.replace('\n', "\r\n"));
        } else {
            out.push_str(body);
        }
        out.into_bytes()
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory, synced,
/// then renamed over it: no reader ever sees half a file, a crash leaves the old one,
/// and the new one has the old one's permissions from its first byte. A file its
/// owner cannot write is refused rather than replaced.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mode = match std::fs::metadata(path) {
        Ok(meta) if meta.permissions().mode() & 0o200 == 0 => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "the file is read-only",
            ));
        }
        Ok(meta) => meta.permissions().mode() & 0o7777,
        Err(_) => 0o644,
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.orchestrate-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Edit distance between two short strings, for "did you mean" suggestions.
pub(crate) fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    #[test]
    fn text_round_trips_bom_and_crlf() {
        let bytes = "\u{feff}a\r\nb\r\n".as_bytes();
        let text = Text::decode(bytes).unwrap();
        assert_eq!(text.body, "a\nb\n");
        assert_eq!(text.encode("a\nc\n"), "\u{feff}a\r\nc\r\n".as_bytes());
        let mixed = Text::decode(b"a\r\nb\nc").unwrap();
        assert_eq!(mixed.encode(&mixed.body), b"a\r\nb\nc");
        let plain = Text::decode(b"x\ny").unwrap();
        assert_eq!(plain.encode("x\nz"), b"x\nz");
    }

    #[test]
    fn binary_means_a_nul_early_on() {
        assert!(is_binary(b"abc\0def"));
        assert!(!is_binary("héllo".as_bytes()));
    }

    #[test]
    fn atomic_writes_keep_permissions_and_refuse_read_only_files() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("script.sh");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o750)).unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o750
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
        let err = write_atomic(&path, b"newer").unwrap_err();
        assert_eq!(err.to_string(), "the file is read-only");
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file left behind"
        );
    }

    #[test]
    fn distance_counts_edits() {
        assert_eq!(distance("main.rs", "mian.rs"), 2);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("same", "same"), 0);
    }

    #[tokio::test]
    async fn a_stale_read_is_caught_and_a_stopped_session_s_reads_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        std::fs::write(&path, "one").unwrap();
        let files = FileState::default();
        let session = SessionId::new();
        let unread = files.check_fresh(session, &path, "f.txt").unwrap_err();
        assert!(unread.to_string().contains("has not been read"));
        files.record_read(session, &path);
        files.check_fresh(session, &path, "f.txt").unwrap();
        std::fs::write(&path, "changed!").unwrap();
        let stale = files.check_fresh(session, &path, "f.txt").unwrap_err();
        assert!(stale.to_string().contains("changed on disk"));
        assert_eq!(files.retained(), (0, 1));
        files.forget(session);
        assert_eq!(files.retained(), (0, 0));
    }

    #[tokio::test]
    async fn one_path_serializes_and_different_paths_do_not_and_no_lock_outlives_its_use() {
        let files = Arc::new(FileState::default());
        let a = Path::new("/ws/a.txt");
        let b = Path::new("/ws/b.txt");
        let held = files.lock(a).await;
        // Granted at once, or not at all: polled once, no waiting on a clock.
        let other = files.lock(b).now_or_never();
        assert!(other.is_some(), "a write to another file had to wait");
        assert!(
            files.lock(a).now_or_never().is_none(),
            "a second writer of the same file did not wait"
        );
        drop(held);
        assert!(files.lock(a).now_or_never().is_some());
        // A write done, its path's lock goes.
        let written = files
            .locked(Path::new("/ws/c.txt"), "write", &Default::default(), || {
                Ok(1)
            })
            .await;
        assert_eq!(written.unwrap(), 1);
        assert!(!files.locks.contains_key(Path::new("/ws/c.txt")));
    }

    #[tokio::test]
    async fn a_write_cancelled_while_it_waits_for_its_lock_never_begins() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let files = Arc::new(FileState::default());
        let path = Path::new("/ws/a.txt");
        let held = files.lock(path).await;
        let cancel = tokio_util::sync::CancellationToken::new();
        let began = Arc::new(AtomicBool::new(false));
        let waiting = {
            let (files, cancel, began) = (files.clone(), cancel.clone(), began.clone());
            tokio::spawn(async move {
                files
                    .locked(path, "write", &cancel, move || {
                        began.store(true, Ordering::SeqCst);
                        Ok(())
                    })
                    .await
            })
        };
        // It waits behind the held lock (the table, the holder and the waiter
        // hold the entry) before the cancel comes.
        let contended = async {
            while files
                .locks
                .get(path)
                .is_none_or(|m| Arc::strong_count(&m) < 3)
            {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), contended)
            .await
            .expect("the write never waited for the lock");
        cancel.cancel();
        let result = tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
            .await
            .expect("the cancelled write still waits for the lock")
            .unwrap();
        assert!(matches!(result, Err(ToolError::Cancelled)), "{result:?}");
        drop(held);
        assert!(!began.load(Ordering::SeqCst), "a cancelled write began");
        // Not cancelled: it begins, and finishes, whatever comes after.
        let done = files
            .locked(path, "write", &Default::default(), || Ok(7))
            .await;
        assert_eq!(done.unwrap(), 7);
    }
}
