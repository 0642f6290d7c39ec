//! Opening the files the runtime itself reads and writes, and reading the small
//! text files a person or a repository writes for us: configuration
//! (`orchestrate.toml`), settings, role files, memory files (`CLAUDE.md`,
//! `AGENTS.md`), ignore files; journals, locks and cassettes are opened through
//! [`open`] too.
//!
//! A cloned repository may hold any of them, and a sandboxed command may have
//! planted one, so every open is made safe the same way: a final symbolic link is
//! not followed (`O_NOFOLLOW`; a link to `~/.bashrc` is not written through, one
//! to `/dev/zero` not read), nothing is opened in a way that can block (a FIFO
//! would wait for a writer forever: `O_NONBLOCK`), and the open file is checked
//! (`fstat`) to be a regular file owned by this user before a byte is read or
//! written. A read is bounded by the caller's size limit. It does not decide what
//! a caller does with a refusal (fail, skip with a warning).
//!
//! The user's own files (in their home, outside the workspace) may be symbolic
//! links they made (a dotfiles folder): [`read_own`] follows those to their end
//! and then opens the end as strictly. A repository's files may link to each
//! other (`CLAUDE.md` to `AGENTS.md`): [`read_within`] follows links only while
//! they stay in the repository.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The most bytes read from one such file: far above any real configuration, role
/// or memory file, far below what would hurt.
pub const MAX_BYTES: u64 = 1024 * 1024;

/// A file that was not opened or read, and why.
#[derive(Debug)]
pub struct ReadError {
    /// The file, as the caller named it.
    pub path: PathBuf,
    /// What was wrong.
    pub problem: Problem,
}

/// Why a file was not opened or read.
#[derive(Debug)]
pub enum Problem {
    /// A symbolic link, which is not followed.
    Symlink,
    /// A directory, FIFO, socket or device.
    NotRegular,
    /// Another user's file.
    NotOwned {
        /// Its owner's id.
        owner: u32,
    },
    /// A file to write that has other names (hard links): writing it would
    /// change them too.
    Linked,
    /// A repository's file whose links lead out of the repository.
    Outside {
        /// The folder it had to stay in.
        root: PathBuf,
        /// Where it leads.
        to: PathBuf,
    },
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

    /// True when the file exists but is not one this process opens (a symbolic
    /// link, a FIFO, a device, a folder, another user's): a caller skips it,
    /// saying so.
    pub fn is_refused(&self) -> bool {
        matches!(
            self.problem,
            Problem::Symlink
                | Problem::NotRegular
                | Problem::NotOwned { .. }
                | Problem::Linked
                | Problem::Outside { .. }
        )
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Symlink => write!(f, "a symbolic link, which is not followed"),
            Self::NotRegular => write!(f, "not a regular file"),
            Self::NotOwned { owner } => {
                write!(f, "owned by user {owner}, not by this user")
            }
            Self::Linked => write!(f, "has other names (hard links); it is not written"),
            Self::Outside { root, to } => {
                write!(f, "leads outside {} (to {})", root.display(), to.display())
            }
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

impl From<ReadError> for std::io::Error {
    fn from(e: ReadError) -> Self {
        match e.problem {
            Problem::Io(io) => {
                std::io::Error::new(io.kind(), format!("{}: {io}", e.path.display()))
            }
            _ => std::io::Error::other(e.to_string()),
        }
    }
}

/// How a file is opened by [`open`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read only; the file must exist.
    Read,
    /// Appended to, made (mode 0600) when missing; readable too (a journal's
    /// torn tail is found by reading it).
    Append,
    /// Read and written, made (mode 0600) when missing, kept as it is.
    ReadWrite,
    /// Written from the start: made (mode 0600) when missing, emptied otherwise
    /// (only once it is known to be a regular file of this user's).
    Replace,
}

/// Opens the file at `path` safely: a final symbolic link is not followed,
/// nothing blocks, and the open file must be a regular file of this user's.
pub fn open(path: &Path, access: Access) -> Result<File, ReadError> {
    use rustix::fs::{Mode, OFlags};
    let fail = |problem| ReadError {
        path: path.to_owned(),
        problem,
    };
    let base = OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let flags = match access {
        Access::Read => OFlags::RDONLY,
        Access::Append => OFlags::RDWR | OFlags::APPEND | OFlags::CREATE,
        Access::ReadWrite | Access::Replace => OFlags::RDWR | OFlags::CREATE,
    };
    let fd = rustix::fs::open(path, base | flags, Mode::from_raw_mode(0o600)).map_err(|e| {
        fail(match e {
            rustix::io::Errno::LOOP => Problem::Symlink,
            // A FIFO opened for writing with no reader, or a device without one.
            rustix::io::Errno::NXIO | rustix::io::Errno::ISDIR => Problem::NotRegular,
            e => Problem::Io(e.into()),
        })
    })?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| fail(Problem::Io(e.into())))?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(fail(Problem::NotRegular));
    }
    if stat.st_uid != rustix::process::geteuid().as_raw() {
        return Err(fail(Problem::NotOwned { owner: stat.st_uid }));
    }
    if access != Access::Read && stat.st_nlink > 1 {
        return Err(fail(Problem::Linked));
    }
    let file = File::from(fd);
    if access == Access::Replace {
        file.set_len(0).map_err(|e| fail(Problem::Io(e)))?;
    }
    Ok(file)
}

/// Makes `target` (in `folder`) hold `bytes`, whole or not at all: a fresh
/// file of this user's only (mode 0600, never through a link) is written in
/// `folder`, then renamed over it, so a reader sees one or the other.
pub(crate) fn replace_whole(folder: &Path, target: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let fresh = folder.join(format!(
        ".{}.{}.{}",
        target
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("file"),
        std::process::id(),
        uuid::Uuid::new_v4()
    ));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&fresh)
        .and_then(|mut out| out.write_all(bytes));
    match written.and_then(|()| std::fs::rename(&fresh, target)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&fresh);
            Err(e)
        }
    }
}

/// The bytes of the regular file at `path` (opened by [`open`]), at most `limit`.
pub fn read(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let fail = |problem| ReadError {
        path: path.to_owned(),
        problem,
    };
    let file = open(path, Access::Read)?;
    let size = file.metadata().map_err(|e| fail(Problem::Io(e)))?.len();
    if size > limit {
        return Err(fail(Problem::TooLarge { size, limit }));
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
    text(path, read(path, limit)?)
}

/// The text of one of the user's own files (in their home): symbolic links they
/// made are followed to their end, which is then read as [`read_to_string`]
/// reads (a regular file of this user's, at most `limit` bytes).
pub fn read_own(path: &Path, limit: u64) -> Result<String, ReadError> {
    let end = std::fs::canonicalize(path).map_err(|e| ReadError {
        path: path.to_owned(),
        problem: Problem::Io(e),
    })?;
    let bytes = read(&end, limit).map_err(|e| ReadError {
        path: path.to_owned(),
        problem: e.problem,
    })?;
    text(path, bytes)
}

/// The lines of an open file, read one at a time, none longer than a bound: a
/// file with no line break, or one endless line, holds no more than the bound in
/// memory.
#[derive(Debug)]
pub struct Lines {
    reader: std::io::BufReader<File>,
    max: u64,
    number: usize,
}

impl Lines {
    /// The lines of `file`, each at most `max` bytes.
    pub fn new(file: File, max: u64) -> Self {
        Self {
            reader: std::io::BufReader::new(file),
            max,
            number: 0,
        }
    }

    /// The number of the line read last (from 1; 0 before the first).
    pub fn number(&self) -> usize {
        self.number
    }

    /// Reads the next line into `line` (cleared first; its `\n` kept when it has
    /// one) and returns its number from 1, or `None` at the end of the file. A
    /// line longer than the bound is an `InvalidData` error naming its number.
    pub fn next_into(&mut self, line: &mut Vec<u8>) -> std::io::Result<Option<usize>> {
        line.clear();
        let read =
            std::io::BufRead::read_until(&mut (&mut self.reader).take(self.max + 1), b'\n', line)?;
        if read == 0 {
            return Ok(None);
        }
        self.number += 1;
        if line.last() != Some(&b'\n') && line.len() as u64 > self.max {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("line {} is longer than {} bytes", self.number, self.max),
            ));
        }
        Ok(Some(self.number))
    }
}

/// The text of a repository's file under `root` (canonical): symbolic links are
/// followed only while they stay under `root`, then the end is read as
/// [`read_to_string`] reads; one that leads out is refused
/// ([`Problem::Outside`]) unread.
pub fn read_within(root: &Path, path: &Path, limit: u64) -> Result<String, ReadError> {
    let fail = |problem| ReadError {
        path: path.to_owned(),
        problem,
    };
    let end = std::fs::canonicalize(path).map_err(|e| fail(Problem::Io(e)))?;
    if !end.starts_with(root) {
        return Err(fail(Problem::Outside {
            root: root.to_owned(),
            to: end,
        }));
    }
    let bytes = read(&end, limit).map_err(|e| fail(e.problem))?;
    text(path, bytes)
}

fn text(path: &Path, bytes: Vec<u8>) -> Result<String, ReadError> {
    String::from_utf8(bytes).map_err(|_| ReadError {
        path: path.to_owned(),
        problem: Problem::NotText,
    })
}

/// Makes a FIFO at `path`, for the tests of hostile input: opening it to read
/// waits for a writer that never comes.
#[cfg(test)]
pub(crate) fn fifo(path: &std::path::Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
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
        super::fifo(&fifo);
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        for path in [&fifo, &dir.path().to_owned()] {
            let err = read(path, MAX_BYTES).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("{}: not a regular file", path.display())
            );
        }
        assert!(matches!(
            read(&zero, MAX_BYTES).unwrap_err().problem,
            Problem::Symlink
        ));
        assert!(matches!(
            read(Path::new("/dev/zero"), MAX_BYTES).unwrap_err().problem,
            Problem::NotRegular
        ));
    }

    #[test]
    fn a_symlink_is_followed_only_to_the_users_own_file_and_binary_text_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"\xff\xfe").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = read(&link, 10).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{}: a symbolic link, which is not followed", link.display())
        );
        assert!(err.is_refused());
        assert_eq!(read(&target, 10).unwrap(), b"\xff\xfe");
        let err = read_own(&link, 10).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{}: not UTF-8 text", link.display())
        );
        std::fs::write(&target, "mine").unwrap();
        assert_eq!(read_own(&link, 10).unwrap(), "mine");
    }

    #[test]
    fn a_repositorys_links_are_followed_only_while_they_stay_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap().join("repo");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("AGENTS.md"), "be brief").unwrap();
        std::os::unix::fs::symlink("AGENTS.md", root.join("CLAUDE.md")).unwrap();
        assert_eq!(
            read_within(&root, &root.join("CLAUDE.md"), 100).unwrap(),
            "be brief"
        );
        let secret = dir.path().join("credentials");
        std::fs::write(&secret, "key").unwrap();
        std::os::unix::fs::symlink(&secret, root.join("leak.md")).unwrap();
        let err = read_within(&root, &root.join("leak.md"), 100).unwrap_err();
        assert!(err.is_refused());
        assert_eq!(
            err.to_string(),
            format!(
                "{}: leads outside {} (to {})",
                root.join("leak.md").display(),
                root.display(),
                secret.canonicalize().unwrap().display()
            )
        );
        std::os::unix::fs::symlink("/dev/zero", root.join("zero.md")).unwrap();
        assert!(
            read_within(&root, &root.join("zero.md"), 100)
                .unwrap_err()
                .is_refused()
        );
        assert!(
            read_within(&root, &root.join("missing.md"), 100)
                .unwrap_err()
                .is_not_found()
        );
    }

    #[test]
    fn lines_are_read_one_at_a_time_and_none_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lines");
        std::fs::write(&path, "one\ntwo\nthree, too long\nfour").unwrap();
        let mut lines = Lines::new(open(&path, Access::Read).unwrap(), 8);
        let mut line = Vec::new();
        assert_eq!(lines.next_into(&mut line).unwrap(), Some(1));
        assert_eq!(line, b"one\n");
        assert_eq!(lines.next_into(&mut line).unwrap(), Some(2));
        let err = lines.next_into(&mut line).unwrap_err();
        assert_eq!(err.to_string(), "line 3 is longer than 8 bytes");
        let mut lines = Lines::new(open(&path, Access::Read).unwrap(), 100);
        let mut all = Vec::new();
        while let Some(n) = lines.next_into(&mut line).unwrap() {
            all.push((n, String::from_utf8(line.clone()).unwrap()));
        }
        assert_eq!(all.last().unwrap(), &(4, "four".to_owned()));
    }

    #[test]
    fn nothing_is_written_through_a_symlink_a_fifo_or_a_device() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("bashrc");
        std::fs::write(&victim, "export KEEP=1\n").unwrap();
        let link = dir.path().join("run.lock");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let fifo = dir.path().join("fifo");
        super::fifo(&fifo);
        for access in [
            Access::Read,
            Access::Append,
            Access::ReadWrite,
            Access::Replace,
        ] {
            assert!(open(&link, access).unwrap_err().is_refused(), "{access:?}");
            assert!(open(&fifo, access).unwrap_err().is_refused(), "{access:?}");
            assert!(
                open(Path::new("/dev/null"), access)
                    .unwrap_err()
                    .is_refused()
            );
        }
        // Nor through a hard link to it.
        let hard = dir.path().join("hard.lock");
        std::fs::hard_link(&victim, &hard).unwrap();
        assert!(matches!(
            open(&hard, Access::Replace).unwrap_err().problem,
            Problem::Linked
        ));
        assert!(open(&hard, Access::Read).is_ok());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "export KEEP=1\n");
        // A new file is made, the owner's alone.
        use std::os::unix::fs::PermissionsExt;
        let fresh = dir.path().join("fresh");
        open(&fresh, Access::Append).unwrap();
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
