//! The file tools' opens, made beneath the workspace: every open, folder made,
//! temporary file and rename resolves from a descriptor of the workspace with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, never by a path looked up
//! twice. A command running beside the tool (another agent's Bash) that swaps a
//! folder for a link out of the workspace between the tool's check and its open
//! makes the open fail, not land outside; what is opened is checked once more to
//! be none of the run's private places.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// Where the file tools may reach: the workspace, less its private places.
#[derive(Clone, Debug)]
pub(crate) struct Beneath {
    root: PathBuf,
    private: Arc<[PathBuf]>,
}

/// How often an open is tried again when the kernel says a rename raced it.
const RETRIES: usize = 8;

impl Beneath {
    /// The workspace `root` (canonical), less `private`.
    pub(crate) fn new(root: PathBuf, private: Arc<[PathBuf]>) -> Self {
        // A private place that holds the root (a private checkout's) is not
        // one to refuse: everything opened is beneath the root already.
        let private = match private.iter().any(|place| root.starts_with(place)) {
            false => private,
            true => private
                .iter()
                .filter(|place| !root.starts_with(place))
                .cloned()
                .collect(),
        };
        Self { root, private }
    }

    /// The workspace.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Opens `path` (absolute, in the workspace) to read: without blocking (a
    /// FIFO is not waited on), beneath the workspace.
    pub(crate) fn read(&self, path: &Path) -> std::io::Result<File> {
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
        Ok(File::from(self.open(path, flags, Mode::empty())?))
    }

    /// The bytes of the regular file at `path`.
    pub(crate) fn read_bytes(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        let mut file = self.read(path)?;
        if !file.metadata()?.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes)?;
        Ok(bytes)
    }

    /// The names in the folder `dir`, read from a descriptor opened beneath the
    /// workspace (a folder swapped for a link out is not listed).
    pub(crate) fn list(&self, dir: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
        let fd = self.open(dir, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())?;
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(&fd)? {
            let name = entry?.file_name().to_bytes().to_vec();
            if name != b"." && name != b".." {
                names.push(std::os::unix::ffi::OsStringExt::from_vec(name));
            }
        }
        Ok(names)
    }

    /// Writes `bytes` to `path` through a temporary file in the same folder,
    /// synced, then renamed over it: no reader ever sees half a file, a crash
    /// leaves the old one, and the new one has the old one's permissions from its
    /// first byte. Missing folders on the way are made. Every step is taken from
    /// a descriptor of the folder, itself opened beneath the workspace. A file its
    /// owner cannot write is refused rather than replaced.
    pub(crate) fn write_atomic(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(std::io::Error::other("not a file's path"));
        };
        let dir = self.folder(parent)?;
        // The file's own name is not followed (the rename replaces it), but the
        // folder may have been reached through a link.
        self.not_led_into_protected(path, &self.landed(&dir)?.join(name))?;
        let mode = match rustix::fs::statat(&dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if stat.st_mode & 0o200 == 0 => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    "the file is read-only",
                ));
            }
            Ok(stat) => stat.st_mode & 0o7777,
            Err(_) => 0o644,
        };
        let tmp = format!(
            ".{}.orchestrate-{}",
            name.to_string_lossy(),
            uuid::Uuid::new_v4().simple()
        );
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let written = (|| {
            let fd = rustix::fs::openat(&dir, &tmp, flags, Mode::from_raw_mode(mode))?;
            let mut file = File::from(fd);
            file.write_all(bytes)?;
            file.sync_all()?;
            rustix::fs::renameat(&dir, &tmp, &dir, name)?;
            Ok(())
        })();
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&dir, &tmp, rustix::fs::AtFlags::empty());
        }
        written
    }

    /// Removes the file at `path` (absolute, in the workspace; not a folder),
    /// from a descriptor of its folder opened beneath the workspace.
    pub(crate) fn remove(&self, path: &Path) -> std::io::Result<()> {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(std::io::Error::other("not a file's path"));
        };
        let dir = self.open(parent, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())?;
        self.not_led_into_protected(path, &self.landed(&dir)?.join(name))?;
        rustix::fs::unlinkat(&dir, name, rustix::fs::AtFlags::empty())?;
        Ok(())
    }

    /// Makes the file at `path` executable (by whoever may read it) or not,
    /// from a descriptor of the file opened beneath the workspace.
    pub(crate) fn set_executable(&self, path: &Path, executable: bool) -> std::io::Result<()> {
        let file = self.read(path)?;
        let mode = file.metadata()?.permissions().mode() & 0o7777;
        let mode = if executable {
            mode | ((mode & 0o444) >> 2)
        } else {
            mode & !0o111
        };
        rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))?;
        Ok(())
    }

    /// The folder `dir` (absolute, in the workspace), made with its missing
    /// parents, one at a time from the one above's descriptor.
    fn folder(&self, dir: &Path) -> std::io::Result<OwnedFd> {
        let flags = OFlags::PATH | OFlags::DIRECTORY;
        match self.open(dir, flags, Mode::empty()) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Ok(fd) => {
                self.not_led_into_protected(dir, &self.landed(&fd)?)?;
                return Ok(fd);
            }
            Err(e) => return Err(e),
        }
        let relative = self.relative(dir)?;
        let mut at = self.open(&self.root, flags, Mode::empty())?;
        let mut path = self.root.clone();
        for part in relative.components() {
            let Component::Normal(name) = part else {
                return Err(std::io::Error::other("not a plain path"));
            };
            path.push(name);
            match rustix::fs::mkdirat(&at, name, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            at = self.open(&path, flags, Mode::empty())?;
            self.not_led_into_protected(&path, &self.landed(&at)?)?;
        }
        Ok(at)
    }

    /// Refuses a write to `requested`, not a protected path, that `landed` in
    /// one ([`crate::tools::protected`]) through a link, or one swapped in by a
    /// command while it was opened: a yes was given (or not needed) for the
    /// path as written.
    fn not_led_into_protected(&self, requested: &Path, landed: &Path) -> std::io::Result<()> {
        use crate::tools::protected::is_protected;
        if is_protected(&self.root, landed) && !is_protected(&self.root, requested) {
            return Err(std::io::Error::other(
                "leads into a protected path (through a link, or one that changed while it was opened)",
            ));
        }
        Ok(())
    }

    /// Where an open descriptor is.
    fn landed(&self, fd: &impl AsFd) -> std::io::Result<PathBuf> {
        let link = format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd());
        let at = rustix::fs::readlinkat(rustix::fs::CWD, link, Vec::new())?;
        let at: std::ffi::OsString = std::os::unix::ffi::OsStringExt::from_vec(at.into_bytes());
        Ok(PathBuf::from(at))
    }

    /// `path` made relative to the workspace; an error when it is not in it.
    fn relative(&self, path: &Path) -> std::io::Result<PathBuf> {
        path.strip_prefix(&self.root)
            .map(Path::to_owned)
            .map_err(|_| std::io::Error::other("outside the workspace"))
    }

    /// Opens `path` beneath the workspace with `flags`, then checks where it
    /// landed: in the workspace, in none of its private places.
    fn open(&self, path: &Path, flags: OFlags, mode: Mode) -> std::io::Result<OwnedFd> {
        let relative = self.relative(path)?;
        let relative = if relative.as_os_str().is_empty() {
            Path::new(".")
        } else {
            relative.as_path()
        };
        let root = rustix::fs::open(
            &self.root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let how = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        let mut tries = 0;
        let fd = loop {
            match rustix::fs::openat2(&root, relative, flags | OFlags::CLOEXEC, mode, how) {
                Err(Errno::AGAIN) if tries < RETRIES => tries += 1,
                Err(Errno::XDEV) => {
                    return Err(std::io::Error::other(
                        "leads outside the workspace (through a link, or one that changed while it was opened)",
                    ));
                }
                other => break other?,
            }
        };
        self.check(&fd)?;
        Ok(fd)
    }

    /// Refuses an open file that is one of the private places, or in one.
    fn check(&self, fd: &impl AsFd) -> std::io::Result<()> {
        let at = self.landed(fd)?;
        if !at.starts_with(&self.root) || self.private.iter().any(|p| at.starts_with(p)) {
            return Err(std::io::Error::other(
                "orchestrate's own state; no tool may read or change it",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beneath() -> (tempfile::TempDir, Beneath) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir_all(root.join("src")).unwrap();
        let private: Arc<[PathBuf]> = Arc::from([root.join(".state")]);
        std::fs::create_dir_all(root.join(".state")).unwrap();
        (dir, Beneath::new(root, private))
    }

    #[test]
    fn files_are_written_and_read_beneath_the_workspace_folders_made_on_the_way() {
        let (_dir, ws) = beneath();
        let file = ws.root.join("a/b/c.txt");
        ws.write_atomic(&file, b"one").unwrap();
        assert_eq!(ws.read_bytes(&file).unwrap(), b"one");
        ws.write_atomic(&file, b"two").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(ws.root.join("a/b")).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file is left");
    }

    #[test]
    fn a_link_out_of_the_workspace_or_into_its_private_places_is_not_gone_through() {
        let (dir, ws) = beneath();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, ws.root.join("out")).unwrap();
        std::os::unix::fs::symlink(ws.root.join(".state"), ws.root.join("state")).unwrap();
        std::fs::write(ws.root.join(".state/journal"), "secret").unwrap();
        let err = ws
            .write_atomic(&ws.root.join("out/pwned.txt"), b"x")
            .unwrap_err();
        assert!(
            err.to_string().contains("leads outside the workspace"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "nothing left there"
        );
        // An absolute link is not followed beneath the workspace, even into it;
        // a relative one into a private place is followed, and refused there.
        assert!(ws.read_bytes(&ws.root.join("state/journal")).is_err());
        std::os::unix::fs::symlink(".state", ws.root.join("near")).unwrap();
        for path in ["near/journal", ".state/journal"] {
            let err = ws.read_bytes(&ws.root.join(path)).unwrap_err();
            assert!(
                err.to_string().contains("orchestrate's own state"),
                "{path}: {err}"
            );
        }
        let err = ws.write_atomic(&ws.root.join("near/x"), b"x").unwrap_err();
        assert!(err.to_string().contains("orchestrate's own state"), "{err}");
        assert!(!ws.root.join(".state/x").exists());
        // A link that stays inside is followed.
        std::fs::write(ws.root.join("src/lib.rs"), "fn x() {}").unwrap();
        std::os::unix::fs::symlink("src", ws.root.join("code")).unwrap();
        assert_eq!(
            ws.read_bytes(&ws.root.join("code/lib.rs")).unwrap(),
            b"fn x() {}"
        );
    }

    #[test]
    fn a_write_led_into_a_protected_path_by_a_link_is_refused_and_one_named_is_not() {
        let (_dir, ws) = beneath();
        std::fs::create_dir_all(ws.root.join(".git/hooks")).unwrap();
        std::os::unix::fs::symlink(".git", ws.root.join("d")).unwrap();
        for path in ["d/config", "d/hooks/pre-commit", "d/new/x"] {
            let err = ws.write_atomic(&ws.root.join(path), b"x").unwrap_err();
            assert!(
                err.to_string().contains("leads into a protected path"),
                "{path}: {err}"
            );
        }
        assert!(!ws.root.join(".git/config").exists());
        assert!(
            !ws.root.join(".git/new").exists(),
            "no folder made on the way"
        );
        // Named as what it is (the gate asked for it), it is written.
        ws.write_atomic(&ws.root.join(".git/info/exclude"), b"x")
            .unwrap();
        // A link between plain folders is followed as before.
        std::os::unix::fs::symlink("src", ws.root.join("code")).unwrap();
        ws.write_atomic(&ws.root.join("code/y.rs"), b"y").unwrap();
        assert!(ws.root.join("src/y.rs").exists());
    }

    #[test]
    fn a_fifo_is_opened_without_waiting_and_refused() {
        let (_dir, ws) = beneath();
        crate::small_file::fifo(&ws.root.join("pipe"));
        let err = ws.read_bytes(&ws.root.join("pipe")).unwrap_err();
        assert_eq!(err.to_string(), "not a regular file");
    }
}
