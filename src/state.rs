//! Where a run keeps its own state: out of the workspace, which a repository
//! ships and the agents' tools write, at paths that do not move.
//!
//! - `$XDG_STATE_HOME/orchestrate/` (default `~/.local/state/orchestrate/`) is the
//!   state root; each workspace has a folder in it named by [`workspace_key`]
//!   (the first 16 hex digits of the SHA-256 of its canonical path), holding
//!   `sessions/<session id>.jsonl` (journals), `runs/<run id>.lock` (the locks of
//!   live runs) and `mcp/<server>.log` (MCP servers' stderr).
//! - A live run's control socket is `$XDG_RUNTIME_DIR/orchestrate/<key>.sock`,
//!   where `<key>` is [`run_key`]; without a runtime folder (or one under the
//!   temporary directory, which sandboxed commands write) it is
//!   `<state root>/s/<key>.sock`. A path longer than a Unix socket's address
//!   takes ([`MAX_SOCKET_PATH`]) is reached through `/proc/self/fd/<fd>/<name>`
//!   of its open folder ([`SocketPath::open`]).
//!
//! Folders are made mode 0700 and files 0600; a folder that is a symbolic link,
//! not a folder, or another user's is refused. The state root and the runtime
//! folder are the run's private places ([`StateDir::private`]): the file tools
//! refuse them and sandboxed commands do not see them.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::protocol::SessionId;

/// The longest path a Unix socket address holds (108 bytes with its NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// The folder named after the program, in each XDG folder.
const APP: &str = "orchestrate";

/// Why the state folders cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Neither `XDG_STATE_HOME` nor `HOME` names a folder.
    #[error("no place for the run's state: set HOME (or XDG_STATE_HOME) to an absolute path")]
    NoHome,
    /// A folder could not be made or is not safe to use.
    #[error("{path}: {reason}")]
    Unsafe {
        /// The folder.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// The first 16 hex digits of the SHA-256 of `bytes`.
fn short_hash(bytes: &[u8]) -> String {
    sha256_hex(bytes)[..16].to_owned()
}

/// The SHA-256 of `bytes`, in hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The name of a workspace's state folder: the first 16 hex digits of the SHA-256
/// of its canonical path's bytes.
pub fn workspace_key(workspace: &Path) -> String {
    short_hash(workspace.as_os_str().as_encoded_bytes())
}

/// The name of a run's control socket (without `.sock`): the first 16 hex digits
/// of the SHA-256 of the run id as text.
pub fn run_key(run: SessionId) -> String {
    short_hash(run.to_string().as_bytes())
}

/// The XDG folders the state goes in, as the environment names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Roots {
    /// `$XDG_STATE_HOME/orchestrate`, or `$HOME/.local/state/orchestrate`.
    pub state: PathBuf,
    /// `$XDG_RUNTIME_DIR/orchestrate`, when that is set, absolute and not under
    /// the temporary directory.
    pub runtime: Option<PathBuf>,
    /// The person's service sockets (systemd's and D-Bus's in their runtime
    /// folder), through which a command could have a process started outside
    /// its sandbox: hidden from sandboxed commands with the state.
    pub services: Vec<PathBuf>,
}

impl Roots {
    /// The folders `env` names (XDG's rules: a relative value counts as unset).
    pub fn from_env(env: &impl Fn(&str) -> Option<String>) -> Result<Self, StateError> {
        let absolute = |name: &str| env(name).map(PathBuf::from).filter(|p| p.is_absolute());
        let state = match absolute("XDG_STATE_HOME") {
            Some(dir) => dir.join(APP),
            None => absolute("HOME")
                .ok_or(StateError::NoHome)?
                .join(".local/state")
                .join(APP),
        };
        // Sandboxed commands may write the temporary directory, so a runtime
        // folder there could be theirs before it is ours.
        let temporary = [
            Some(PathBuf::from("/tmp")),
            Some(PathBuf::from("/var/tmp")),
            absolute("TMPDIR"),
        ];
        let runtime = absolute("XDG_RUNTIME_DIR")
            .filter(|dir| {
                let dir = dir.canonicalize().unwrap_or_else(|_| dir.clone());
                !temporary.iter().flatten().any(|tmp| {
                    let tmp = tmp.canonicalize().unwrap_or_else(|_| tmp.clone());
                    dir.starts_with(tmp)
                })
            })
            .map(|dir| dir.join(APP));
        let uid = rustix::process::geteuid().as_raw();
        let mut services = Vec::new();
        for dir in absolute("XDG_RUNTIME_DIR")
            .into_iter()
            .chain([PathBuf::from(format!("/run/user/{uid}"))])
        {
            for name in ["bus", "systemd"] {
                let place = dir.join(name);
                if !services.contains(&place) {
                    services.push(place);
                }
            }
        }
        Ok(Self {
            state,
            runtime,
            services,
        })
    }

    /// The folders of this process's environment.
    pub fn from_process() -> Result<Self, StateError> {
        Self::from_env(&|name: &str| std::env::var(name).ok())
    }

    /// The state of the workspace at `workspace` (canonical).
    pub fn workspace(&self, workspace: &Path) -> StateDir {
        StateDir {
            dir: self.state.join(workspace_key(workspace)),
            roots: self.clone(),
        }
    }
}

/// One workspace's state folder, and where its runs' sockets go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateDir {
    dir: PathBuf,
    roots: Roots,
}

impl StateDir {
    /// The state of `workspace` (canonical) in the folders this process's
    /// environment names.
    pub fn for_workspace(workspace: &Path) -> Result<Self, StateError> {
        Ok(Roots::from_process()?.workspace(workspace))
    }

    /// State kept in `root` instead of the XDG folders (a program embedding the
    /// runtime, or a test): `root` is the state root, `root/s` holds sockets.
    pub fn at(root: &Path, workspace: &Path) -> Self {
        Roots {
            state: root.to_owned(),
            runtime: None,
            services: Vec::new(),
        }
        .workspace(workspace)
    }

    /// The workspace's own folder in the state root.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The state root (every workspace's folders are in it).
    pub fn root(&self) -> &Path {
        &self.roots.state
    }

    /// The journals' folder.
    pub fn sessions(&self) -> PathBuf {
        self.dir.join("sessions")
    }

    /// One session's journal.
    pub fn journal(&self, session: SessionId) -> PathBuf {
        self.sessions().join(format!("{session}.jsonl"))
    }

    /// The folder of the live runs' locks.
    pub fn runs(&self) -> PathBuf {
        self.dir.join("runs")
    }

    /// One run's lock.
    pub fn lock(&self, run: SessionId) -> PathBuf {
        self.runs().join(format!("{run}.lock"))
    }

    /// The folder of the private checkouts of isolated sub-agents.
    pub fn checkouts(&self) -> PathBuf {
        self.dir.join("checkouts")
    }

    /// The private checkout of sub-agent `session`.
    pub fn checkout(&self, session: SessionId) -> PathBuf {
        self.checkouts().join(session.to_string())
    }

    /// Where temporary indexes of snapshots are made.
    pub fn scratch(&self) -> PathBuf {
        self.checkouts().join(".scratch")
    }

    /// The folder of the MCP servers' logs.
    pub fn mcp_logs(&self) -> PathBuf {
        self.dir.join("mcp")
    }

    /// Where run `run`'s control socket is.
    pub fn socket(&self, run: SessionId) -> SocketPath {
        SocketPath {
            dir: self.sockets(),
            name: format!("{}.sock", run_key(run)),
        }
    }

    /// The folder of the control sockets: the runtime folder, else `s` in the
    /// state root.
    fn sockets(&self) -> PathBuf {
        match &self.roots.runtime {
            Some(runtime) => runtime.clone(),
            None => self.roots.state.join("s"),
        }
    }

    /// The places no agent may reach: the state root, the runtime folder and
    /// the person's service sockets.
    pub fn private(&self) -> Vec<PathBuf> {
        std::iter::once(self.roots.state.clone())
            .chain(self.roots.runtime.clone())
            .chain(self.roots.services.iter().cloned())
            .collect()
    }

    /// Checks the folders that exist, making none: what reading the state
    /// (`orchestrate sessions`, `ps`) needs.
    pub fn check(&self) -> Result<(), StateError> {
        for dir in [
            self.roots.state.clone(),
            self.dir.clone(),
            self.sessions(),
            self.runs(),
            self.sockets(),
        ] {
            check_dir(&dir)?;
        }
        Ok(())
    }

    /// Makes the workspace's folders (and the sockets' folder), each mode 0700,
    /// refusing any that is a symbolic link, not a folder or another user's.
    pub fn prepare(&self) -> Result<(), StateError> {
        make_private_dir(&self.roots.state, true)?;
        for dir in [
            self.dir.clone(),
            self.sessions(),
            self.runs(),
            self.mcp_logs(),
        ] {
            make_private_dir(&dir, false)?;
        }
        let sockets = self.sockets();
        make_private_dir(&sockets, sockets.parent() != Some(self.root()))
    }
}

/// Checks `dir`, when it exists: a real folder, this user's.
fn check_dir(dir: &Path) -> Result<(), StateError> {
    use std::os::unix::fs::MetadataExt;
    let unsafe_dir = |reason: String| StateError::Unsafe {
        path: dir.display().to_string(),
        reason,
    };
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(unsafe_dir(e.to_string())),
    };
    if meta.file_type().is_symlink() {
        return Err(unsafe_dir(
            "is a symbolic link; orchestrate keeps its state only in a real folder".into(),
        ));
    }
    if !meta.is_dir() {
        return Err(unsafe_dir("is not a folder".into()));
    }
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(unsafe_dir(format!(
            "belongs to user {}, not to this user",
            meta.uid()
        )));
    }
    Ok(())
}

/// Makes `dir` (mode 0700) unless it exists, then checks it: a real folder, this
/// user's, that nobody else may write. `parents`: make missing folders above it
/// too (the XDG folders, mode 0700).
pub(crate) fn make_private_dir(dir: &Path, parents: bool) -> Result<(), StateError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let unsafe_dir = |reason: String| StateError::Unsafe {
        path: dir.display().to_string(),
        reason,
    };
    let made = std::fs::DirBuilder::new()
        .recursive(parents)
        .mode(0o700)
        .create(dir);
    if let Err(e) = made
        && e.kind() != std::io::ErrorKind::AlreadyExists
    {
        return Err(unsafe_dir(e.to_string()));
    }
    check_dir(dir)?;
    let mode = std::fs::symlink_metadata(dir)
        .map_err(|e| unsafe_dir(e.to_string()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| unsafe_dir(format!("cannot make it private: {e}")))?;
    }
    Ok(())
}

/// Where a control socket is: its folder and its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocketPath {
    /// The folder.
    pub dir: PathBuf,
    /// The file's name.
    pub name: String,
}

impl SocketPath {
    /// The socket's path as written.
    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }

    /// A path to bind or connect to: the socket's own when it fits a Unix
    /// socket's address, else one through its folder, opened here, as
    /// `/proc/self/fd/<fd>/<name>`; the folder's descriptor must stay open
    /// while the path is used.
    pub fn open(&self) -> std::io::Result<Reachable> {
        let path = self.path();
        if path.as_os_str().len() <= MAX_SOCKET_PATH {
            return Ok(Reachable { path, _dir: None });
        }
        use rustix::fs::{Mode, OFlags};
        let dir: OwnedFd = rustix::fs::open(
            &self.dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut bytes = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
        bytes.extend_from_slice(self.name.as_bytes());
        Ok(Reachable {
            path: PathBuf::from(OsString::from_vec(bytes)),
            _dir: Some(dir),
        })
    }
}

/// A socket path short enough to use, with the folder it goes through kept open.
#[derive(Debug)]
pub struct Reachable {
    /// The path to bind or connect to.
    pub path: PathBuf,
    _dir: Option<OwnedFd>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn the_keys_are_sixteen_hex_digits_of_a_sha_256() {
        // printf %s /w | sha256sum
        assert_eq!(workspace_key(Path::new("/w")), "d1bb8ca354673cd5");
        let run = SessionId::new();
        assert_eq!(run_key(run).len(), 16);
        assert_eq!(run_key(run), short_hash(run.to_string().as_bytes()));
    }

    #[test]
    fn the_folders_follow_xdg_and_never_the_temporary_directory() {
        let home = Roots::from_env(&env(&[("HOME", "/home/u")])).unwrap();
        assert_eq!(home.state, Path::new("/home/u/.local/state/orchestrate"));
        assert_eq!(home.runtime, None);
        let xdg = Roots::from_env(&env(&[
            ("HOME", "/home/u"),
            ("XDG_STATE_HOME", "/s"),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
        ]))
        .unwrap();
        assert_eq!(xdg.state, Path::new("/s/orchestrate"));
        assert_eq!(
            xdg.runtime.as_deref(),
            Some(Path::new("/run/user/1000/orchestrate"))
        );
        for tmp in ["/tmp/x", "/var/tmp", "/scratch/t"] {
            let roots = Roots::from_env(&env(&[
                ("HOME", "/home/u"),
                ("TMPDIR", "/scratch"),
                ("XDG_RUNTIME_DIR", tmp),
            ]))
            .unwrap();
            assert_eq!(roots.runtime, None, "{tmp}");
        }
        // A relative value counts as unset.
        let relative = Roots::from_env(&env(&[("HOME", "/h"), ("XDG_STATE_HOME", "s")])).unwrap();
        assert_eq!(relative.state, Path::new("/h/.local/state/orchestrate"));
        assert_eq!(Roots::from_env(&env(&[])), Err(StateError::NoHome));
    }

    #[test]
    fn a_workspace_has_its_files_at_pinned_places() {
        let roots = Roots::from_env(&env(&[("HOME", "/h")])).unwrap();
        let state = roots.workspace(Path::new("/w"));
        let run = SessionId::new();
        let dir = "/h/.local/state/orchestrate/d1bb8ca354673cd5";
        assert_eq!(state.dir(), Path::new(dir));
        assert_eq!(
            state.journal(run),
            Path::new(&format!("{dir}/sessions/{run}.jsonl"))
        );
        assert_eq!(
            state.lock(run),
            Path::new(&format!("{dir}/runs/{run}.lock"))
        );
        assert_eq!(
            state.socket(run).path(),
            Path::new(&format!(
                "/h/.local/state/orchestrate/s/{}.sock",
                run_key(run)
            ))
        );
        assert_eq!(state.private()[0], Path::new("/h/.local/state/orchestrate"));
        let uid = rustix::process::geteuid().as_raw();
        assert_eq!(
            state.private()[1..],
            [
                PathBuf::from(format!("/run/user/{uid}/bus")),
                PathBuf::from(format!("/run/user/{uid}/systemd"))
            ]
        );
    }

    #[test]
    fn folders_are_made_private_and_a_symlinked_one_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().unwrap();
        let state = StateDir::at(&home.path().join("state"), Path::new("/w"));
        state.prepare().unwrap();
        for dir in [
            state.root().to_owned(),
            state.dir().to_owned(),
            state.sessions(),
        ] {
            let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{}", dir.display());
        }
        std::fs::remove_dir(state.runs()).unwrap();
        std::os::unix::fs::symlink(home.path(), state.runs()).unwrap();
        let refused = state.prepare().unwrap_err().to_string();
        assert!(
            refused
                .ends_with("is a symbolic link; orchestrate keeps its state only in a real folder"),
            "{refused}"
        );
    }

    #[test]
    fn a_long_socket_path_is_reached_through_its_open_folder() {
        let home = tempfile::tempdir().unwrap();
        let deep = home.path().join("d".repeat(120));
        std::fs::create_dir_all(&deep).unwrap();
        let socket = SocketPath {
            dir: deep.clone(),
            name: "0123456789abcdef.sock".into(),
        };
        let reachable = socket.open().unwrap();
        let shown = reachable.path.display().to_string();
        assert!(
            shown.starts_with("/proc/self/fd/") && shown.len() <= MAX_SOCKET_PATH,
            "{shown}"
        );
        let listener = std::os::unix::net::UnixListener::bind(&reachable.path).unwrap();
        assert!(deep.join("0123456789abcdef.sock").exists());
        std::os::unix::net::UnixStream::connect(&socket.open().unwrap().path).unwrap();
        drop(listener);
        let short = SocketPath {
            dir: "/r".into(),
            name: "k.sock".into(),
        };
        assert_eq!(short.open().unwrap().path, Path::new("/r/k.sock"));
    }
}
