//! What changed in a folder since the last look, as the kernel tells it
//! (inotify): every folder below it is watched but `.git`, what git ignores and
//! the places left out; a look drains the events queued since the last one and
//! names the paths they touched. Nothing runs in between: the kernel queues the
//! events as the changes are made, so a look after a command has ended sees all
//! of the command's. When the kernel's queue overflowed or the watched folders
//! moved, the look says everything may have changed (and watches the folder
//! anew).

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

/// The most folders one folder's watch holds; a larger tree is compared whole
/// each time.
pub(super) const MAX_WATCHES: usize = 8192;

/// The most paths a look names; past it, everything may have changed.
pub(super) const MAX_PATHS: usize = 1000;

/// What a look found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Dirty {
    /// These paths (relative to the folder; files or folders) may have
    /// changed, and nothing else; none: nothing did.
    Paths(BTreeSet<PathBuf>),
    /// Anything may have.
    All,
}

/// The watch on one folder.
#[derive(Debug)]
pub(super) struct Watch {
    fd: OwnedFd,
    root: PathBuf,
    leave_out: Vec<PathBuf>,
    /// Each watched folder, relative to the root, by watch.
    dirs: HashMap<i32, PathBuf>,
    paths: BTreeSet<PathBuf>,
    all: bool,
    /// The watches no longer say where their folders are (one moved), or are
    /// too many: the folder is watched anew at the next look.
    rewatch: bool,
}

/// The kinds of event watched: every change to a folder's entries and to
/// their content or mode.
fn flags() -> WatchFlags {
    WatchFlags::MODIFY
        | WatchFlags::ATTRIB
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
        | WatchFlags::DONT_FOLLOW
        | WatchFlags::EXCL_UNLINK
}

impl Watch {
    /// Watches `root` (canonical) but `leave_out`; an error when the kernel
    /// will not or the tree has more than [`MAX_WATCHES`] folders.
    pub(super) fn new(root: &Path, leave_out: &[PathBuf]) -> std::io::Result<Self> {
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
        let mut watch = Self {
            fd,
            root: root.to_owned(),
            leave_out: leave_out.to_vec(),
            dirs: HashMap::new(),
            paths: BTreeSet::new(),
            all: false,
            rewatch: false,
        };
        watch.watch_tree(Path::new(""))?;
        Ok(watch)
    }

    /// What may have changed since the last look. An error when the folder
    /// can no longer be watched (then it is compared whole from now on).
    pub(super) fn take(&mut self) -> std::io::Result<Dirty> {
        self.drain()?;
        if self.rewatch {
            *self = Self::new(&self.root, &self.leave_out)?;
            return Ok(Dirty::All);
        }
        let paths = std::mem::take(&mut self.paths);
        if std::mem::take(&mut self.all) || paths.len() > MAX_PATHS {
            return Ok(Dirty::All);
        }
        Ok(Dirty::Paths(paths))
    }

    /// Watches the folder `rel` (relative to the root) and every folder below
    /// it.
    fn watch_tree(&mut self, rel: &Path) -> std::io::Result<()> {
        let leave_out = self.leave_out.clone();
        // No ignore file is read: the crate would wait forever on one that
        // is a FIFO (git's rules are git's to apply, in the shadow).
        let walk = ignore::WalkBuilder::new(self.root.join(rel))
            .standard_filters(false)
            .filter_entry(move |e| {
                e.file_name() != ".git" && !leave_out.iter().any(|p| e.path().starts_with(p))
            })
            .build();
        for entry in walk.flatten() {
            if !entry.file_type().is_some_and(|t| t.is_dir()) {
                continue;
            }
            if self.dirs.len() >= MAX_WATCHES {
                return Err(std::io::Error::other(format!(
                    "more than {MAX_WATCHES} folders to watch"
                )));
            }
            let Ok(below) = entry.path().strip_prefix(&self.root) else {
                continue;
            };
            match inotify::add_watch(&self.fd, entry.path(), flags()) {
                Ok(wd) => {
                    self.dirs.insert(wd, below.to_owned());
                }
                // Gone already: its parent's event names it.
                Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Reads every event queued.
    fn drain(&mut self) -> std::io::Result<()> {
        let mut buf = [MaybeUninit::uninit(); 16 * 1024];
        let mut events = Vec::new();
        let mut reader = inotify::Reader::new(&self.fd, &mut buf);
        loop {
            match reader.next() {
                Ok(event) => events.push((
                    event.wd(),
                    event.events(),
                    event
                        .file_name()
                        .map(|n| PathBuf::from(OsStr::from_bytes(n.to_bytes()))),
                )),
                Err(rustix::io::Errno::WOULDBLOCK) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        for (wd, mask, name) in events {
            self.seen(wd, mask, name);
        }
        Ok(())
    }

    /// One event: the path it touched, and the watches it makes or ends.
    fn seen(&mut self, wd: i32, mask: ReadFlags, name: Option<PathBuf>) {
        if mask.contains(ReadFlags::QUEUE_OVERFLOW) {
            // Folders made meanwhile went unwatched.
            self.all = true;
            self.rewatch = true;
            return;
        }
        if mask.contains(ReadFlags::IGNORED) {
            self.dirs.remove(&wd);
            return;
        }
        let Some(dir) = self.dirs.get(&wd).cloned() else {
            return;
        };
        let Some(name) = name else {
            // The folder itself moved or went: its parent's event names it;
            // the root's has no parent.
            if dir.as_os_str().is_empty() {
                self.all = true;
                self.rewatch = true;
            }
            return;
        };
        if name == Path::new(".git") {
            return;
        }
        let path = dir.join(&name);
        if self
            .leave_out
            .iter()
            .any(|p| self.root.join(&path).starts_with(p))
        {
            return;
        }
        if mask.contains(ReadFlags::ISDIR) {
            if mask.contains(ReadFlags::MOVED_FROM) {
                // The folders below it keep their watches under old names.
                self.rewatch = true;
            } else if mask.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO)
                && self.watch_tree(&path).is_err()
            {
                self.rewatch = true;
            }
        }
        self.paths.insert(path);
    }
}

#[cfg(test)]
mod tests;
