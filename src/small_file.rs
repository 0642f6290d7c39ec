//! Reading the small text files a person or a repository writes for us:
//! configuration (`orchestrate.toml`), role files, memory files (`CLAUDE.md`,
//! `AGENTS.md`), ignore files. A cloned repository may hold any of them, so a read
//! is bounded: a file that is not a regular file (a FIFO, which would block the
//! read forever; a symlink to `/dev/zero`, which never ends) is refused without
//! reading it, and so is one over the caller's size limit. It does not decide what
//! a caller does with a refusal (fail, skip with a warning).

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The most bytes read from one such file: far above any real configuration, role
/// or memory file, far below what would hurt.
pub const MAX_BYTES: u64 = 1024 * 1024;

/// A file that was not read, and why.
#[derive(Debug)]
pub struct ReadError {
    /// The file, as the caller named it.
    pub path: PathBuf,
    /// What was wrong.
    pub problem: Problem,
}

/// Why a file was not read.
#[derive(Debug)]
pub enum Problem {
    /// A directory, FIFO, socket or device (also through a symlink).
    NotRegular,
    /// Longer than the limit.
    TooLarge {
        /// Its length (at least this many bytes, when it grew while being read).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// Not UTF-8 (for a caller that wants text).
    NotText,
    /// Missing, unreadable, or a failed read.
    Io(std::io::Error),
}

impl ReadError {
    /// True when the file does not exist (many callers look for optional files).
    pub fn is_not_found(&self) -> bool {
        matches!(&self.problem, Problem::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotRegular => write!(f, "not a regular file"),
            Self::TooLarge { size, limit } => {
                write!(f, "too large ({size} bytes; the limit is {limit})")
            }
            Self::NotText => write!(f, "not UTF-8 text"),
            Self::Io(e) => write!(f, "{e}"),
        }
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.problem)
    }
}

impl std::error::Error for ReadError {}

/// The bytes of the regular file at `path` (symlinks followed), at most `limit`.
pub fn read(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let fail = |problem| ReadError {
        path: path.to_owned(),
        problem,
    };
    // Looked at before it is opened: opening a FIFO waits for a writer, and
    // opening a device can have effects of its own.
    let meta = std::fs::metadata(path).map_err(|e| fail(Problem::Io(e)))?;
    if !meta.is_file() {
        return Err(fail(Problem::NotRegular));
    }
    if meta.len() > limit {
        return Err(fail(Problem::TooLarge {
            size: meta.len(),
            limit,
        }));
    }
    // Non-blocking, and checked again once open: the path may have been swapped
    // for a FIFO since.
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let file = std::fs::File::from(
        rustix::fs::open(path, flags, Mode::empty())
            .map_err(|e| fail(Problem::Io(std::io::Error::from(e))))?,
    );
    let meta = file.metadata().map_err(|e| fail(Problem::Io(e)))?;
    if !meta.is_file() {
        return Err(fail(Problem::NotRegular));
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| fail(Problem::Io(e)))?;
    let size = bytes.len() as u64;
    if size > limit {
        return Err(fail(Problem::TooLarge { size, limit }));
    }
    Ok(bytes)
}

/// The text of the regular file at `path`, at most `limit` bytes of UTF-8.
pub fn read_to_string(path: &Path, limit: u64) -> Result<String, ReadError> {
    String::from_utf8(read(path, limit)?).map_err(|_| ReadError {
        path: path.to_owned(),
        problem: Problem::NotText,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_file_is_read_and_a_large_one_refused_by_its_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orchestrate.toml");
        std::fs::write(&path, "model = \"m\"\n").unwrap();
        assert_eq!(read_to_string(&path, 100).unwrap(), "model = \"m\"\n");
        let err = read_to_string(&path, 4).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{}: too large (12 bytes; the limit is 4)", path.display())
        );
        let err = read(&dir.path().join("missing"), 4).unwrap_err();
        assert!(err.is_not_found(), "{err}");
    }

    #[test]
    fn a_fifo_a_device_and_a_directory_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        for path in [&fifo, &zero, &dir.path().to_owned()] {
            let err = read(path, MAX_BYTES).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("{}: not a regular file", path.display())
            );
        }
    }

    #[test]
    fn a_symlink_to_a_regular_file_is_followed_and_binary_text_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"\xff\xfe").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(read(&link, 10).unwrap(), b"\xff\xfe");
        let err = read_to_string(&link, 10).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{}: not UTF-8 text", link.display())
        );
    }
}
