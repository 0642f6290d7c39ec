//! The lock of a live run: `runs/<run id>.lock` in the workspace's state folder,
//! held (`flock`) by the process running the run, with that process's id inside.
//! The kernel lets it go when the process dies, however it dies, so a lock is
//! never stale; a second process that would run the same run is refused, naming
//! the first. Lock files are opened as [`crate::small_file::open`] opens: never
//! through a link, never a FIFO or a device.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::PathBuf;

use rustix::fs::{FlockOperation, flock};

use crate::protocol::SessionId;
use crate::small_file::{self, Access};
use crate::state::StateDir;

/// The process that holds a run's lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Its process id.
    pub pid: u32,
    /// Its command line, as far as it can be read.
    pub command: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.command.is_empty() {
            write!(f, "process {}", self.pid)
        } else {
            write!(f, "process {} ({})", self.pid, self.command)
        }
    }
}

/// A run's lock, held until dropped.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
    path: PathBuf,
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Unlocked when the file closes; the file goes, so that `runs/` holds only
        // live runs' locks (a process that dies leaves its file, unlocked).
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Why a run's lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another live process runs it.
    #[error("run {run} is live in {holder}; wait for it to end, or stop it")]
    Held {
        /// The run.
        run: SessionId,
        /// Who holds it.
        holder: Holder,
    },
    /// The lock file could not be made.
    #[error("{0}")]
    Io(String),
}

impl RunLock {
    /// Takes the lock of run `run` for this process.
    pub fn acquire(state: &StateDir, run: SessionId) -> Result<Self, LockError> {
        let path = state.lock(run);
        let failed = |e: std::io::Error| LockError::Io(format!("{}: {e}", path.display()));
        state.prepare().map_err(|e| LockError::Io(e.to_string()))?;
        // A few tries: `holder` takes a shared lock for a moment to look, and a
        // lock file unlinked by the process that held it must not be kept.
        for _ in 0..20 {
            let mut file = small_file::open(&path, Access::ReadWrite)
                .map_err(|e| LockError::Io(e.to_string()))?;
            if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
                if let Some(holder) = holder_of(&mut file) {
                    return Err(LockError::Held { run, holder });
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
                continue;
            }
            // Locked the file that is at `path` now, not one unlinked meanwhile.
            let same = match (file.metadata(), std::fs::symlink_metadata(&path)) {
                (Ok(open), Ok(named)) => {
                    std::os::unix::fs::MetadataExt::ino(&open)
                        == std::os::unix::fs::MetadataExt::ino(&named)
                }
                _ => false,
            };
            if !same {
                continue;
            }
            file.set_len(0).map_err(failed)?;
            file.rewind().map_err(failed)?;
            write!(file, "{}", std::process::id()).map_err(failed)?;
            file.flush().map_err(failed)?;
            return Ok(Self { _file: file, path });
        }
        Err(LockError::Io(format!(
            "{}: cannot take the run's lock",
            path.display()
        )))
    }
}

/// The live process that holds run `run`'s lock, if one does.
pub fn holder(state: &StateDir, run: SessionId) -> Option<Holder> {
    let mut file = small_file::open(&state.lock(run), Access::Read).ok()?;
    if flock(&file, FlockOperation::NonBlockingLockShared).is_ok() {
        // Nobody holds it: the process that wrote it has died.
        return None;
    }
    holder_of(&mut file)
}

/// Who the lock file says holds it; `None` until the holder has written itself in.
fn holder_of(file: &mut File) -> Option<Holder> {
    let mut text = String::new();
    // A process id is a few digits.
    file.take(32).read_to_string(&mut text).ok()?;
    let pid: u32 = text.trim().parse().ok().filter(|pid| *pid > 0)?;
    let command = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|b| *b == 0)
                .filter(|part| !part.is_empty())
                .map(|part| String::from_utf8_lossy(part).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    Some(Holder { pid, command })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_locked_once_and_named_by_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::at(dir.path(), std::path::Path::new("/w"));
        let run = SessionId::new();
        assert_eq!(holder(&state, run), None);
        let lock = RunLock::acquire(&state, run).unwrap();
        let held = holder(&state, run).expect("held");
        assert_eq!(held.pid, std::process::id());
        // flock locks belong to the open file, so a second open in this process
        // conflicts like another process would.
        let again = RunLock::acquire(&state, run).unwrap_err().to_string();
        assert!(
            again.contains(&format!("process {}", std::process::id())),
            "{again}"
        );
        drop(lock);
        assert_eq!(holder(&state, run), None);
        assert!(!state.lock(run).exists());
    }

    #[test]
    fn a_lock_planted_as_a_link_or_a_fifo_is_neither_written_through_nor_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::at(&dir.path().join("state"), std::path::Path::new("/w"));
        state.prepare().unwrap();
        let bashrc = dir.path().join("bashrc");
        std::fs::write(&bashrc, "alias ls=ls\n").unwrap();
        let (linked, fifo) = (SessionId::new(), SessionId::new());
        std::os::unix::fs::symlink(&bashrc, state.lock(linked)).unwrap();
        crate::small_file::fifo(&state.lock(fifo));
        for run in [linked, fifo] {
            assert_eq!(holder(&state, run), None);
            let refused = RunLock::acquire(&state, run).unwrap_err().to_string();
            assert!(refused.contains(&format!("{run}.lock")), "{refused}");
        }
        assert_eq!(std::fs::read_to_string(&bashrc).unwrap(), "alias ls=ls\n");
    }
}
