//! The journal writer: one thread that writes every session's records and commits
//! them in groups. Every record that arrived while the previous sync ran is covered
//! by the next one, so thousands of sessions finishing turns at once cost a handful
//! of syncs, not thousands, and no fsync ever blocks the async runtime. Appends only
//! queue (no I/O; they wake the writer only past `WAKE_AT` queued); a sync request
//! wakes a waiting writer (one that can wait for the writer's next look, a turn
//! boundary's, does not), which writes the lines of the files due, syncs once and
//! answers every sync that was due; other lines go out within [`IDLE_FLUSH`], each
//! file's in one write. A session's
//! sync asks for its own file only: a file whose session did not ask stays due
//! until it does (or until a sync of everything), so a fan-out's journals are
//! each synced for their own sessions and not at every other session's turn
//! boundary (two or three `fdatasync`s per sub-agent, not five). A turn
//! boundary's request may wait up to [`SOON`] for its session's next sync, which
//! then covers it in one `fdatasync` (one per sub-agent of a fan-out: its end).

mod open_files;
mod requests;
mod unwritten;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use self::open_files::OpenFiles;
pub use self::requests::PendingSync;
use self::requests::{Held, SyncRequest};
use self::unwritten::Unwritten;
use super::Record;

/// How long appended records may sit in memory before the writer writes them to
/// their file (without a sync) on its own; a sync of the file writes them at once.
const IDLE_FLUSH: Duration = Duration::from_millis(100);

/// After a wake-up, the writer waits this long for more sync requests before it
/// syncs: sessions of a fan-out reach their turn boundaries together, and one
/// group sync then covers them all (it halves the groups of a 1000-session run).
const GATHER: Duration = Duration::from_millis(2);

/// Appended bytes queued past this wake the writer early, bounding memory (a
/// count of appends did not: four thousand of them held megabytes at a thousand
/// sessions, between looks of a writer no turn boundary wakes).
const WAKE_AT: usize = 64 << 10;

/// What an append or a sync hears once the writer is gone.
const STOPPED: &str = "the journal writer has stopped";

/// How long a turn boundary's sync may wait for a sync that covers its file
/// anyway ([`Journal::sync_file_soon`]).
pub(crate) const SOON: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Pending {
    appends: Vec<(PathBuf, Vec<u8>)>,
    /// When the first of `appends` came.
    since: Option<Instant>,
    /// The bytes of `appends`.
    bytes: usize,
    waiters: Vec<SyncRequest>,
    /// Journals whose sessions have stopped: their files may be closed.
    ended: Vec<PathBuf>,
    closed: bool,
    /// The writer waits on the condition variable: only then does a request
    /// need to wake it (a busy writer looks at what is pending before it waits).
    idle: bool,
    /// The writer thread died (a panic): appends and syncs fail at once.
    dead: bool,
    /// Files a write to failed (a full disk, an I/O error), each with its error:
    /// cut back to their last whole line, they take no more appends until their
    /// session stops, so no record is written after one that was lost.
    broken: HashMap<PathBuf, String>,
    /// Journals also kept elsewhere: each gets its file's lines in the order
    /// the file does.
    mirrors: HashMap<PathBuf, Arc<dyn super::Mirror>>,
}

/// What a batch must make durable.
#[derive(Debug, PartialEq)]
enum Scope {
    /// Nothing: the records only reach the files.
    Nothing,
    /// Every file written since its last sync.
    Everything,
    /// These files (those of them written since their last sync).
    Files(HashSet<PathBuf>),
}

impl Scope {
    /// What the batch's sync requests ask for together; closing syncs everything.
    fn of(waiters: &[SyncRequest], closed: bool) -> Self {
        if closed || waiters.iter().any(|r| r.path.is_none()) {
            return Self::Everything;
        }
        if waiters.is_empty() {
            return Self::Nothing;
        }
        Self::Files(waiters.iter().filter_map(|r| r.path.clone()).collect())
    }

    /// Takes the files due for a sync out of those written since their last sync;
    /// the others stay due.
    fn take_due(self, files: &mut OpenFiles) -> Vec<PathBuf> {
        match self {
            Self::Nothing => Vec::new(),
            Self::Everything => files.take_dirty(None),
            Self::Files(paths) => files.take_dirty(Some(&paths)),
        }
    }
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
        let writer = Writer::new(shared.clone(), max_open_files());
        let watched = shared.clone();
        std::thread::Builder::new()
            .name("orchestrate-journal".into())
            .spawn(move || {
                if std::panic::catch_unwind(AssertUnwindSafe(move || writer.run())).is_err() {
                    // Nobody may wait forever on a writer that is gone.
                    let waiters = {
                        let mut pending = watched.lock();
                        pending.dead = true;
                        std::mem::take(&mut pending.waiters)
                    };
                    for request in waiters {
                        let _ = request.done.send(Err(STOPPED.to_owned()));
                    }
                }
            })?;
        Ok(Self {
            handle: Arc::new(Handle { shared }),
        })
    }

    /// Queues one record for `path`. It reaches the file within about 100 ms (at
    /// once if a sync of its file falls due meanwhile) and is durable after the
    /// next sync of its file or of everything. Appending never blocks on I/O and
    /// wakes the writer thread only past `WAKE_AT` (64 KiB) of queued lines, so
    /// sessions can journal every message cheaply.
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
        self.queue(path, lines)
    }

    /// Queues one line for `path`, serialized from `line` (a record's shape made
    /// from borrowed parts: an event as the bus published it, not a copy).
    pub(crate) fn append_line(
        &self,
        path: &Path,
        line: &impl serde::Serialize,
    ) -> Result<(), String> {
        let mut lines = serde_json::to_vec(line).map_err(|e| e.to_string())?;
        lines.push(b'\n');
        self.queue(path, lines)
    }

    fn queue(&self, path: &Path, lines: Vec<u8>) -> Result<(), String> {
        let shared = &self.handle.shared;
        let mut pending = shared.lock();
        if pending.dead {
            return Err(STOPPED.to_owned());
        }
        if !pending.broken.is_empty()
            && let Some(e) = pending.broken.get(path)
        {
            return Err(e.clone());
        }
        if pending.appends.is_empty() {
            pending.since = Some(Instant::now());
        }
        pending.bytes += lines.len();
        if !pending.mirrors.is_empty()
            && let Some(mirror) = pending.mirrors.get(path)
        {
            mirror.append(&lines);
        }
        pending.appends.push((path.to_owned(), lines));
        if pending.bytes >= WAKE_AT && pending.idle {
            shared.wake.notify_one();
        }
        Ok(())
    }

    /// Waits until everything appended so far (by any session) is on disk. Syncs
    /// requested while one is running are served together by the next one.
    pub async fn sync(&self) -> Result<(), String> {
        self.request(None, None).wait().await
    }

    /// Waits until everything appended so far for `path` is on disk (and its
    /// directory entry, for a new file). Other files appended to may stay
    /// unsynced: a session needs its own journal durable, not every other
    /// session's.
    pub async fn sync_file(&self, path: &Path) -> Result<(), String> {
        // Asked of its mirror now: after every line appended so far.
        let mirrored = (self.handle.shared.lock().mirrors.get(path)).map(|m| m.sync());
        self.request(Some(path.to_owned()), None).wait().await?;
        match mirrored {
            Some(kept) => kept.await,
            None => Ok(()),
        }
    }

    /// Keeps `path`'s lines appended from now on in `mirror` too, until the
    /// guard is dropped: a sync of the file (not a sync of everything, which
    /// is for the files) then also waits for the mirror, and hears its
    /// failure.
    pub fn mirror(&self, path: &Path, mirror: Arc<dyn super::Mirror>) -> Mirrored {
        (self.handle.shared.lock().mirrors).insert(path.to_owned(), mirror);
        Mirrored {
            shared: self.handle.shared.clone(),
            path: path.to_owned(),
        }
    }

    /// Asks for `path`'s sync without waiting for it: it may wait up to `SOON` (a
    /// second) for one that covers the file anyway (its session's next sync that
    /// is waited for, a sync of everything), so a turn boundary followed by a
    /// short turn costs no `fdatasync` of its own. The records still reach the
    /// file within 100 ms; a failure is told to the file's next sync that
    /// is waited for.
    pub fn sync_file_soon(&self, path: &Path) {
        drop(self.sync_file_within(path, SOON));
    }

    /// Asks for `path`'s sync within `within`, to be awaited (or not) later.
    pub fn sync_file_within(&self, path: &Path, within: Duration) -> PendingSync {
        let by = Instant::now() + within;
        self.request(Some(path.to_owned()), Some(by))
    }

    /// Says that `path`'s session has stopped: its file is closed once what was
    /// appended is written (a later append opens it again).
    pub fn ended(&self, path: &Path) {
        self.handle.shared.lock().ended.push(path.to_owned());
    }

    /// Queues a sync request, waking the writer if it must hear of it now; the
    /// answer is awaited later.
    fn request(&self, path: Option<PathBuf>, by: Option<Instant>) -> PendingSync {
        let (done, answer) = oneshot::channel();
        let shared = &self.handle.shared;
        let wake = {
            let mut pending = shared.lock();
            if pending.dead {
                return PendingSync::Answered(Err(STOPPED.to_owned()));
            }
            pending.waiters.push(SyncRequest { path, by, done });
            wakes_writer(pending.idle, by, Instant::now())
        };
        if wake {
            shared.wake.notify_one();
        }
        PendingSync::Waiting(answer)
    }
}

/// A journal kept in a mirror while held.
pub struct Mirrored {
    shared: Arc<Shared>,
    path: PathBuf,
}

impl std::fmt::Debug for Mirrored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirrored")
            .field("path", &self.path)
            .finish()
    }
}

impl Drop for Mirrored {
    fn drop(&mut self) {
        self.shared.lock().mirrors.remove(&self.path);
    }
}

/// Whether a sync request due `by` (now, when none) must wake the writer: only
/// when it waits, and not when the request can wait for its next look at what is
/// pending, at most [`IDLE_FLUSH`] away (a turn boundary's, due in a second). At
/// ten thousand sub-agents the wake-ups were two thirds of the process's futex
/// calls, each a system call and most a switch to the writer's thread.
fn wakes_writer(idle: bool, by: Option<Instant>, now: Instant) -> bool {
    idle && by.is_none_or(|by| by < now + IDLE_FLUSH)
}

/// A quarter of the process's file-descriptor limit, so journals never starve the
/// sockets and tools of descriptors (at most 16 384: the binary raises its limit
/// to 65 536 where it can, which keeps ten thousand sub-agents' journals open).
fn max_open_files() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    limit.map_or(256, |n| (n / 4).clamp(16, 16_384) as usize)
}

struct Writer {
    shared: Arc<Shared>,
    /// Open journals, unbuffered: a file's waiting lines (`unwritten`) are
    /// written at once, so no file needs a buffer of its own (8 KiB each, a
    /// session's worth of memory at a thousand sessions).
    files: OpenFiles,
    /// The batches written so far, which stamp each open file's last write.
    batch: u64,
    /// Directories that gained a file since their last sync.
    grown: HashSet<PathBuf>,
    /// Directories known to exist.
    dirs: HashSet<PathBuf>,
    /// Errors of a file (a write, a sync) not yet told to a sync request covering
    /// it: lines that could not be written are lost, and the next sync of their
    /// file must say so rather than report it durable.
    failed: HashMap<PathBuf, String>,
    /// Sync requests waiting for their deadline or a sync of their file.
    held: Held,
    /// Files a write to failed, until their session stops (`Pending::broken`).
    broken: HashSet<PathBuf>,
    /// Lines waiting for their file's sync or for [`IDLE_FLUSH`] to pass.
    unwritten: Unwritten,
}

impl Writer {
    fn new(shared: Arc<Shared>, max_open: usize) -> Self {
        Self {
            shared,
            files: OpenFiles::new(max_open),
            batch: 0,
            grown: HashSet::new(),
            dirs: HashSet::new(),
            failed: HashMap::new(),
            held: Held::default(),
            broken: HashSet::new(),
            unwritten: Unwritten::default(),
        }
    }

    fn run(mut self) {
        loop {
            {
                let mut pending = self.shared.lock();
                while pending.appends.is_empty() && pending.waiters.is_empty() && !pending.closed {
                    let now = Instant::now();
                    let next = [self.held.next_due(), self.unwritten.next_due(IDLE_FLUSH)];
                    let wait = match next.into_iter().flatten().min() {
                        Some(by) if by <= now => break,
                        Some(by) => (by - now).min(IDLE_FLUSH),
                        None => IDLE_FLUSH,
                    };
                    pending.idle = true;
                    pending = match self.shared.wake.wait_timeout(pending, wait) {
                        Ok((guard, _)) => guard,
                        Err(poisoned) => poisoned.into_inner().0,
                    };
                    pending.idle = false;
                }
            }
            std::thread::sleep(GATHER);
            let (appends, since, waiters, ended, closed) = {
                let mut pending = self.shared.lock();
                pending.bytes = 0;
                (
                    std::mem::take(&mut pending.appends),
                    pending.since.take(),
                    std::mem::take(&mut pending.waiters),
                    std::mem::take(&mut pending.ended),
                    pending.closed,
                )
            };
            self.batch += 1;
            let now = Instant::now();
            self.unwritten.add(appends, since.unwrap_or(now));
            let due = self.held.take_due(waiters, now, closed);
            let scope = Scope::of(&due, closed);
            for (path, lines) in self.unwritten.take(&scope, now, IDLE_FLUSH) {
                if self.broken.contains(&path) {
                    continue;
                }
                if let Err(e) = self.write(&path, &lines) {
                    self.write_failed(path, &e);
                }
            }
            let dir_error = self.sync(scope);
            self.answer(due, dir_error.as_ref());
            // A file still to be synced stays open: it is synced through the
            // descriptor that wrote it, whose write-back errors it reports.
            for path in ended {
                if self.broken.remove(&path) {
                    self.shared.lock().broken.remove(&path);
                }
                if !self.files.is_dirty(&path) && !self.unwritten.holds(&path) {
                    self.files.close(&path);
                }
            }
            self.close_overflow();
            if closed && self.shared.lock().appends.is_empty() && self.unwritten.is_empty() {
                return;
            }
        }
    }

    fn write(&mut self, path: &Path, line: &[u8]) -> std::io::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        if !self.dirs.contains(dir) {
            std::fs::create_dir_all(dir)?;
            self.dirs.insert(dir.to_owned());
        }
        if self.files.append(path, self.batch, line)? {
            self.grown.insert(dir.to_owned());
        }
        Ok(())
    }

    /// A write to `path` failed: the file is cut back (by [`OpenFiles::append`])
    /// and takes no more lines until its session stops; its session hears the
    /// error at its next append or sync.
    fn write_failed(&mut self, path: PathBuf, e: &std::io::Error) {
        let e = format!("{}: {e}", path.display());
        tracing::error!(error = %e, "journal write failed");
        self.shared.lock().broken.insert(path.clone(), e.clone());
        self.broken.insert(path.clone());
        self.failed.insert(path, e);
    }

    /// Makes the files of `scope` that were written since their last sync durable
    /// (`fdatasync` of exactly those files, never the whole filesystem), and the
    /// directory entries of new files. A file that fails stays dirty (a later sync
    /// tries it again) and its error waits in `failed` for its session; a
    /// directory's error is returned, for every request of the batch.
    fn sync(&mut self, scope: Scope) -> Option<String> {
        if scope == Scope::Nothing {
            return None;
        }
        let due = scope.take_due(&mut self.files);
        for (path, e) in sync_files(&self.files, &due) {
            self.files.mark_dirty(&path);
            self.sync_failed(path, &e);
        }
        let mut dir_error = None;
        for dir in std::mem::take(&mut self.grown) {
            if let Err(e) = File::open(&dir).and_then(|d| d.sync_all()) {
                dir_error.get_or_insert(format!("journal sync of {}: {e}", dir.display()));
                self.grown.insert(dir);
            }
        }
        dir_error
    }

    /// Answers the batch's requests: each hears the error of its own file since
    /// that file's last answer (every request for the file hears it), or, for a
    /// sync of everything, any file's; a directory's error, whoever asks. A file's
    /// error that no one heard (its only requests were not waited for: a turn
    /// boundary's) is kept for the file's next sync.
    fn answer(&mut self, requests: Vec<SyncRequest>, dir_error: Option<&String>) {
        let mut told: HashMap<PathBuf, Option<String>> = HashMap::new();
        let mut heard: HashSet<PathBuf> = HashSet::new();
        for request in requests {
            let own = match &request.path {
                Some(path) => told
                    .entry(path.clone())
                    .or_insert_with(|| self.failed.remove(path))
                    .clone(),
                None => self
                    .failed
                    .values()
                    .chain(told.values().flatten())
                    .next()
                    .cloned(),
            };
            // The directory's error first; the file's own is told all the same.
            let error = dir_error.cloned().or(own);
            if request.done.send(error.map_or(Ok(()), Err)).is_ok()
                && let Some(path) = request.path
            {
                heard.insert(path);
            }
        }
        for (path, error) in told {
            if let Some(error) = error
                && !heard.contains(&path)
            {
                self.failed.insert(path, error);
            }
        }
    }

    /// Keeps `path`'s sync error for its session's next sync (and logs it).
    fn sync_failed(&mut self, path: PathBuf, e: &std::io::Error) {
        let e = format!("journal sync of {}: {e}", path.display());
        tracing::error!(error = %e, "journal sync failed");
        self.failed.insert(path, e);
    }

    /// Past the bound on open files, closes the files written longest ago, those
    /// already synced first; those still to be synced are synced first through
    /// their own descriptors, together (kept open if that fails, the error left
    /// for the session).
    fn close_overflow(&mut self) {
        let overflow = self.files.overflow();
        let dirty: Vec<PathBuf> = (overflow.iter())
            .filter(|path| self.files.is_dirty(path))
            .cloned()
            .collect();
        let mut kept = HashSet::new();
        for (path, e) in sync_files(&self.files, &dirty) {
            kept.insert(path.clone());
            self.sync_failed(path, &e);
        }
        for path in overflow {
            if !kept.contains(&path) {
                self.files.close(&path);
            }
        }
    }
}

/// A group's files are synced by up to this many threads at once: each
/// `fdatasync` waits for the disk (twice for a grown file: its data, then its
/// inode), which serves several at once; one after another, the 500 journals of
/// a fan-out's turn boundary took 60–80 ms, and every one of those sessions waited.
const SYNC_THREADS: usize = 8;

/// Below this many files a group is synced by the writer thread alone.
const FILES_PER_THREAD: usize = 8;

/// `fdatasync`s each file through the descriptor that wrote it (a file still to
/// be synced is never closed), spread over threads when there are many; returns
/// those that failed.
fn sync_files(files: &OpenFiles, due: &[PathBuf]) -> Vec<(PathBuf, std::io::Error)> {
    let sync_one = |path: &PathBuf| {
        let synced = match files.get(path) {
            Some(file) => file.sync_data(),
            None => Err(std::io::Error::other("it was closed before it was synced")),
        };
        synced.err().map(|e| (path.clone(), e))
    };
    let threads = (due.len() / FILES_PER_THREAD).clamp(1, SYNC_THREADS);
    if threads == 1 {
        return due.iter().filter_map(sync_one).collect();
    }
    std::thread::scope(|scope| {
        let mut failed = Vec::new();
        let mut workers = Vec::new();
        for chunk in due.chunks(due.len().div_ceil(threads)) {
            let sync_chunk = || chunk.iter().filter_map(sync_one).collect::<Vec<_>>();
            match std::thread::Builder::new().spawn_scoped(scope, sync_chunk) {
                Ok(worker) => workers.push((worker, chunk)),
                // No thread to be had (a process or cgroup limit): this one does it.
                Err(_) => failed.extend(chunk.iter().filter_map(sync_one)),
            }
        }
        for (worker, chunk) in workers {
            match worker.join() {
                Ok(errors) => failed.extend(errors),
                // Nothing of a chunk whose thread died is known to be durable.
                Err(_) => failed.extend(chunk.iter().map(|path| {
                    let e = std::io::Error::other("the sync thread panicked");
                    (path.clone(), e)
                })),
            }
        }
        failed
    })
}

#[cfg(test)]
mod tests;
