//! The launcher: the `orchestrate` binary run again by itself, in a hidden mode
//! (`orchestrate __orchestrate-bash-launcher STAGE …`), to start one Bash command
//! confined. It exists because what it does to itself (a user namespace, Landlock,
//! becoming a subreaper) cannot be done to a child between `fork` and `exec` without
//! `unsafe`, and must not be done to the orchestrator itself.
//!
//! ```text
//! orchestrate                     non-dumpable, holds the keys in memory
//! └── launcher (stage `run`)      own user and mount namespace; Landlock; child
//!     │                           subreaper; its stdin is the lifeline
//!     └── bash -c COMMAND         own process group
//! ```
//!
//! - `run` unshares a user namespace (a process in a child namespace has no
//!   capability over the orchestrator, so even root cannot read its
//!   `/proc/<pid>/environ` or memory) and a mount namespace, then stops itself;
//!   the orchestrator, seeing it stopped, writes its id maps (every id for root,
//!   so files of other owners stay writable as before; else its own id:
//!   [`continue_mapped`]) and lets it go on. It then covers each place to hide
//!   with an empty, read-only tmpfs (orchestrate's state: its journals and control
//!   sockets), makes what the command may not change read-only (`protect`),
//!   applies Landlock (reads everywhere; writes only under the paths it was given
//!   and to a few devices), and starts `bash -c COMMAND` (`sh` where bash is
//!   missing). It waits for the shell to exit or the lifeline (its stdin, a pipe
//!   whose other end the orchestrator holds) to close: on a timeout, a cancel, or
//!   the orchestrator's death. Either way it then kills the shell's group and
//!   every process re-parented to it (those that left the group with `setsid`),
//!   until it has no child left, and exits as the shell did. One exec of the
//!   binary per command: its start-up is most of what a sandboxed call costs
//!   beyond the shell's own.
//! - `probe` says what this kernel allows: the orchestrator runs it once at start.
//!
//! It does not decide the policy (`confine`) nor read the command's output
//! (`command`).

use std::ffi::{OsStr, OsString};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use landlock::{
    ABI, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
    path_beneath_rules,
};
use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitOptions};

/// The first argument that puts the binary in launcher mode.
pub const MARK: &str = "__orchestrate-bash-launcher";

/// The running binary, whatever its path now: the launcher when no smaller one
/// is installed beside it.
const SELF_EXE: &str = "/proc/self/exe";

/// The name of the small binary that is only the launcher, installed beside
/// `orchestrate` (`src/bin/orchestrate-sandbox.rs`): a command starts several
/// times faster through it than through the whole binary.
pub const SANDBOX_BIN: &str = "orchestrate-sandbox";

/// The executable to start the launcher from: `orchestrate-sandbox` beside the
/// running binary, when it is there and a regular file; else the running binary
/// itself.
pub(super) fn executable() -> &'static std::path::Path {
    static FOUND: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FOUND.get_or_init(|| {
        std::env::current_exe()
            .ok()
            .map(|me| me.with_file_name(SANDBOX_BIN))
            .filter(|small| std::fs::metadata(small).is_ok_and(|m| m.is_file()))
            .unwrap_or_else(|| PathBuf::from(SELF_EXE))
    })
}

/// The filesystem rights of Landlock ABI 5 (the last to add any but `ResolveUnix`,
/// which would refuse connecting to sockets such as Docker's).
const LANDLOCK_ABI: ABI = ABI::V5;

/// Devices every command may write to besides the paths it is given.
const DEVICES: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/full"];

/// How long the sweep waits between rounds while processes are still dying.
const SWEEP_PAUSE: Duration = Duration::from_millis(5);

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Declares that the running executable is the `orchestrate` binary, which answers
/// [`MARK`] through [`run_if_asked`]: Bash commands are then started through it.
/// Without it (a program using the library) they are started directly.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

pub(super) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// What the launcher did, for `main` to report.
#[derive(Debug)]
pub enum Launched {
    /// Print each of `notes` on stderr (after the command's output), then exit
    /// with `code` (the shell's, or the signal's number plus 128 when the signal
    /// could not be raised again).
    Exit {
        /// The exit code.
        code: ExitCode,
        /// What the sandbox did that the command should hear of.
        notes: Vec<String>,
    },
    /// The probe's answer: print it on stdout and exit 0.
    Report(String),
    /// Print this on stderr (where the command's output goes) and exit 125.
    Failed(String),
}

impl Launched {
    /// Tells what the launcher did on `out` and `err` (the process's stdout
    /// and stderr), as above; the process's exit code.
    pub fn finish(self, out: &mut dyn std::io::Write, err: &mut dyn std::io::Write) -> ExitCode {
        match self {
            Self::Exit { code, notes } => {
                for note in notes {
                    let _ = writeln!(err, "orchestrate: {note}");
                }
                code
            }
            Self::Report(text) => {
                let _ = write!(out, "{text}");
                ExitCode::SUCCESS
            }
            Self::Failed(message) => {
                let _ = writeln!(err, "orchestrate: {message}");
                ExitCode::from(125)
            }
        }
    }
}

/// One command to launch, as the stages pass it on in their arguments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Spec {
    /// Start the shell in a user namespace of its own.
    pub(super) user_namespace: bool,
    /// Places the shell must not see: each is covered by an empty tmpfs in a
    /// mount namespace of its own (needs the user namespace).
    pub(super) hidden: Vec<PathBuf>,
    /// A folder inside a hidden place that stays visible at its path (a
    /// private checkout in the run's state): the folders between are
    /// traversable, not listable.
    pub(super) shown: Option<PathBuf>,
    /// Apply Landlock, with writes allowed under these paths.
    pub(super) writable: Option<Vec<PathBuf>>,
    /// The shell command.
    pub(super) command: String,
}

impl Spec {
    /// The arguments after the executable for `stage`.
    pub(super) fn args(&self, stage: &str) -> Vec<OsString> {
        let mut args = vec![OsString::from(MARK), OsString::from(stage)];
        if self.user_namespace {
            args.push("--userns".into());
        }
        for path in &self.hidden {
            args.push("--hide".into());
            args.push(path.clone().into_os_string());
        }
        if let Some(path) = &self.shown {
            args.push("--show".into());
            args.push(path.clone().into_os_string());
        }
        if let Some(writable) = &self.writable {
            args.push("--landlock".into());
            for path in writable {
                args.push("--write".into());
                args.push(path.clone().into_os_string());
            }
        }
        args.push("--".into());
        args.push(self.command.clone().into());
        args
    }

    fn parse(mut args: impl Iterator<Item = OsString>) -> Result<Self, String> {
        let mut spec = Self::default();
        loop {
            let arg = args.next().ok_or("launcher: no command")?;
            match arg.to_str() {
                Some("--userns") => spec.user_namespace = true,
                Some("--landlock") => spec.writable = Some(spec.writable.unwrap_or_default()),
                Some("--hide") => {
                    let path = args.next().ok_or("launcher: --hide needs a path")?;
                    spec.hidden.push(PathBuf::from(path));
                }
                Some("--show") => {
                    let path = args.next().ok_or("launcher: --show needs a path")?;
                    spec.shown = Some(PathBuf::from(path));
                }
                Some("--write") => {
                    let path = args.next().ok_or("launcher: --write needs a path")?;
                    spec.writable
                        .get_or_insert_with(Vec::new)
                        .push(PathBuf::from(path));
                }
                Some("--") => break,
                _ => return Err(format!("launcher: unknown argument {arg:?}")),
            }
        }
        let command = args.next().ok_or("launcher: no command")?;
        spec.command = command
            .into_string()
            .map_err(|_| "launcher: the command is not UTF-8".to_owned())?;
        Ok(spec)
    }
}

/// In launcher mode (the first argument is [`MARK`]), runs the stage the arguments
/// name and says how the process should end; `None` otherwise. Call it first in
/// `main`, before any thread starts (a process with threads cannot unshare its user
/// namespace).
pub fn run_if_asked() -> Option<Launched> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(OsStr::new(MARK)) {
        return None;
    }
    let stage = args.next().unwrap_or_default();
    let result = match stage.to_str() {
        Some("probe") => return Some(Launched::Report(probe())),
        Some("run") => Spec::parse(args).and_then(|spec| run(&spec)),
        _ => Err(format!("launcher: unknown stage {stage:?}")),
    };
    Some(match result {
        Ok((code, notes)) => Launched::Exit { code, notes },
        Err(e) => Launched::Failed(e),
    })
}

/// Stage `run`: the namespaces (stopped until the orchestrator has mapped the
/// user namespace's ids), what to hide and protect, Landlock, then the shell,
/// watched with the lifeline; then everything it left is killed, and this
/// process exits as the shell did.
fn run(spec: &Spec) -> Result<(ExitCode, Vec<String>), String> {
    let me = rustix::process::getpid();
    rustix::process::set_child_subreaper(Some(me))
        .map_err(|e| format!("launcher: cannot become a subreaper: {e}"))?;
    if spec.user_namespace {
        unshare_namespaces(true).map_err(|e| format!("cannot start a user namespace: {e}"))?;
        // The orchestrator sees this stop, writes the id maps, and continues it.
        rustix::process::kill_process(me, Signal::STOP)
            .map_err(|e| format!("launcher: cannot wait for the id maps: {e}"))?;
        let maps = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
        if maps.trim().is_empty() {
            return Err("launcher: the user namespace was given no id maps".into());
        }
    }
    // Not before the maps: the orchestrator writes them through /proc/<pid>/.
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    if spec.user_namespace {
        use rustix::mount::{MountPropagationFlags, mount_change};
        // Nothing mounted here is seen outside this namespace.
        mount_change(
            "/",
            MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
        )
        .map_err(|e| format!("the sandbox could not make its mounts private: {e}"))?;
        hide(&spec.hidden, spec.shown.as_deref())
            .map_err(|e| format!("the sandbox could not hide orchestrate's state: {e}"))?;
        protect().map_err(|e| {
            format!("the sandbox could not make the repository's git config and agents' files read-only: {e}")
        })?;
        // What was mounted stays: no capability is left to undo it (`--sandbox
        // off` applies no Landlock, which would refuse it too).
        drop_capabilities()
            .map_err(|e| format!("the sandbox could not drop its capabilities: {e}"))?;
    }
    if let Some(writable) = &spec.writable {
        match landlock(writable) {
            Ok(RulesetStatus::NotEnforced) => {
                return Err("the sandbox could not be applied: this kernel has no Landlock".into());
            }
            Ok(RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced) => {}
            Err(e) => return Err(format!("the sandbox could not be applied: {e}")),
        }
    }
    let here = std::env::current_dir().unwrap_or_default();
    // What is set aside afterwards is only in force with a namespace to protect.
    let before = match spec.user_namespace {
        true => super::protect::present(&here),
        false => Vec::new(),
    };
    let child = shell(&spec.command)?;
    let group = Pid::from_child(&child);
    let exited = match wait_or_lifeline(&child) {
        Ok(exited) => exited,
        Err(e) => {
            sweep(group);
            return Err(e);
        }
    };
    let status = if exited {
        let mut child = child;
        child.wait().ok()
    } else {
        None
    };
    sweep(group);
    // Nothing of the command runs any more: what it made among the protected
    // names is moved aside, out of force (where it could not change them).
    let notes = match spec.user_namespace {
        true => super::protect::set_aside(&here, &before)
            .into_iter()
            .map(|(made, aside)| {
                format!(
                    "the command made {made}, a protected path (settings that can run programs for the person); it was moved to {aside}: protected paths are changed with the file tools, which ask"
                )
            })
            .collect(),
        false => Vec::new(),
    };
    let code = match status {
        Some(status) => exit_as(status),
        // Cut off: nobody reads this status.
        None => ExitCode::from(128 + Signal::KILL.as_raw() as u8),
    };
    Ok((code, notes))
}

/// `bash -c command` (`sh` where there is no bash) in a process group of its
/// own, its output on this process's (the command's output pipe), no input.
fn shell(command: &str) -> Result<std::process::Child, String> {
    for shell in ["bash", "sh"] {
        match Command::new(shell)
            .arg("-c")
            .arg(command)
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
        {
            Ok(child) => return Ok(child),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot start {shell}: {e}")),
        }
    }
    Err("cannot start the shell: neither bash nor sh is on PATH".into())
}

/// For whoever started the launcher `pid` with a user namespace (the Bash
/// tool): waits until it has made its namespaces and stopped itself, writes its
/// id maps and continues it; a launcher that ended first has said why on its
/// output. Blocking.
pub fn continue_mapped(pid: u32) -> Result<(), String> {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    let target = Pid::from_raw(pid as i32).ok_or("launcher: no such process")?;
    let options = WaitIdOptions::STOPPED | WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
    let status = loop {
        match waitid(WaitId::Pid(target), options) {
            Err(Errno::INTR) => {}
            // Reaped already (it ended): its output says why.
            Err(Errno::CHILD) => return Ok(()),
            Err(e) => return Err(format!("launcher: cannot watch the launcher: {e}")),
            Ok(status) => break status,
        }
    };
    if !status.is_some_and(|s| s.stopped()) {
        return Ok(());
    }
    if let Err(e) = map_ids(pid) {
        let _ = rustix::process::kill_process(target, Signal::KILL);
        return Err(e);
    }
    rustix::process::kill_process(target, Signal::CONT)
        .map_err(|e| format!("launcher: cannot continue the launcher: {e}"))
}

/// Writes the id maps of `pid`'s user namespace: every id, when this process may
/// (root); else only its own.
fn map_ids(pid: u32) -> Result<(), String> {
    let write = |name: &str, text: &str| {
        let path = format!("/proc/{pid}/{name}");
        std::fs::write(&path, text).map_err(|e| format!("launcher: {path}: {e}"))
    };
    let every = "0 0 4294967295\n";
    if write("uid_map", every).is_err() {
        let uid = rustix::process::geteuid().as_raw();
        write("uid_map", &format!("{uid} {uid} 1\n"))?;
    }
    if write("gid_map", every).is_err() {
        // Without the right to map every group, the kernel takes a map of one's own
        // group only once `setgroups` is denied in the namespace.
        write("setgroups", "deny")?;
        let gid = rustix::process::getegid().as_raw();
        write("gid_map", &format!("{gid} {gid} 1\n"))?;
    }
    Ok(())
}

/// Waits until the shell exits (true) or the lifeline on stdin closes (false).
fn wait_or_lifeline(child: &std::process::Child) -> Result<bool, String> {
    let pid = Pid::from_child(child);
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
        .map_err(|e| format!("launcher: cannot watch the shell: {e}"))?;
    let stdin = std::io::stdin();
    loop {
        let mut fds = [
            rustix::event::PollFd::new(&pidfd, rustix::event::PollFlags::IN),
            rustix::event::PollFd::new(&stdin, rustix::event::PollFlags::IN),
        ];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) => {}
            Err(Errno::INTR) => continue,
            Err(e) => return Err(format!("launcher: cannot wait: {e}")),
        }
        if !fds[0].revents().is_empty() {
            return Ok(true);
        }
        if !fds[1].revents().is_empty() {
            return Ok(false);
        }
    }
}

/// Kills the shell's group and every child of this process (descendants that left
/// the group come here when their parent dies: it is their subreaper), round after
/// round, until no child is left.
fn sweep(group: Pid) {
    let me = rustix::process::getpid();
    loop {
        let _ = rustix::process::kill_process_group(group, Signal::KILL);
        for pid in children_of(me) {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
        loop {
            match rustix::process::wait(WaitOptions::NOHANG) {
                Ok(Some(_)) | Err(Errno::INTR) => {}
                Ok(None) => break,
                // No child left at all.
                Err(_) => return,
            }
        }
        // A killed process may take a moment to die, and its orphans to arrive here.
        std::thread::sleep(SWEEP_PAUSE);
    }
}

/// The processes whose parent is `parent` (this process, single-threaded):
/// its thread's `children` file in `/proc`, or a scan of every process where
/// the kernel has no such file.
fn children_of(parent: Pid) -> Vec<Pid> {
    let raw = parent.as_raw_pid();
    let listed = format!("/proc/{raw}/task/{raw}/children");
    if let Ok(text) = std::fs::read_to_string(listed) {
        return text
            .split_whitespace()
            .filter_map(|pid| Pid::from_raw(pid.parse().ok()?))
            .collect();
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            (crate::procfs::parent_of(pid)? == raw)
                .then(|| Pid::from_raw(pid))
                .flatten()
        })
        .collect()
}

/// Ends this process as the shell ended: the same exit code, or the same signal
/// raised again (one this process ignores, SIGPIPE say, gives 128 + its number).
fn exit_as(status: std::process::ExitStatus) -> ExitCode {
    if let Some(code) = status.code() {
        return ExitCode::from(code as u8);
    }
    let raw = status.signal().unwrap_or(Signal::KILL.as_raw());
    if let Some(signal) = Signal::from_named_raw(raw) {
        let _ = rustix::process::kill_process(rustix::process::getpid(), signal);
    }
    ExitCode::from(128 + raw as u8)
}

/// `unshare(CLONE_NEWUSER)`.
fn unshare_user_namespace() -> rustix::io::Result<()> {
    unshare_namespaces(false)
}

/// `unshare(CLONE_NEWUSER)`, with `CLONE_NEWNS` and `CLONE_NEWPID` when
/// `mounts` (the mount namespace is then the new user namespace's, where this
/// process may mount; the process namespace is its children's).
/// rustix deprecated its safe `unshare` because `CLONE_FILES` can leave other
/// threads holding descriptors of a table they no longer share, which breaks
/// Rust's ownership of descriptors; a user, mount or process namespace touches
/// no descriptor and no memory, and this process has no other thread.
#[expect(
    deprecated,
    reason = "sound for NEWUSER, NEWNS and NEWPID: the unsoundness that got it deprecated is CLONE_FILES"
)]
fn unshare_namespaces(mounts: bool) -> rustix::io::Result<()> {
    use rustix::thread::UnshareFlags;
    // A process namespace of its own too: the shell is its first process, and
    // when the shell ends the kernel ends every process left in it (detached
    // with `setsid` and `nohup … &` included); a command sees, and can signal,
    // only its own processes.
    let flags = match mounts {
        true => UnshareFlags::NEWUSER | UnshareFlags::NEWNS | UnshareFlags::NEWPID,
        false => UnshareFlags::NEWUSER,
    };
    rustix::thread::unshare(flags)
}

/// Service sockets through which a command could have a process started
/// outside its sandbox (systemd and D-Bus, of the user and of the system):
/// covered with `/dev/null` wherever they exist. `$XDG_RUNTIME_DIR`'s are given
/// by the orchestrator as places to hide.
const HOST_SOCKETS: [&str; 4] = [
    "/run/dbus/system_bus_socket",
    "/var/run/dbus/system_bus_socket",
    "/run/systemd/private",
    "/run/systemd/io.system.ManagedOOM",
];

/// Covers each of `places` with an empty, read-only tmpfs (a folder) or with
/// `/dev/null` (a socket or any other file), in this process's own mount
/// namespace (made private first, so nothing mounted here is seen elsewhere).
/// Every folder above a hidden place is first bound onto itself (with what is
/// mounted below it), so that none can be renamed away and a folder of the
/// command's own put in its place; then the working folder is entered again,
/// through the new mounts. A place that does not exist has nothing to hide.
/// `shown`, a folder inside a hidden place, is bound back at its own path
/// inside the tmpfs (through a descriptor taken before it was covered), the
/// folders leading to it traversable but not listable (mode 0111, even to
/// their owner).
fn hide(places: &[PathBuf], shown: Option<&Path>) -> rustix::io::Result<()> {
    use rustix::mount::{MountFlags, mount, mount_bind, mount_bind_recursive, mount_remount};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::DirBuilderExt;
    let places: Vec<&Path> = places
        .iter()
        .map(PathBuf::as_path)
        .chain(HOST_SOCKETS.iter().map(Path::new))
        .filter(|place| std::fs::symlink_metadata(place).is_ok())
        .collect();
    // Parents sort before their children: the outermost is bound first.
    let above: std::collections::BTreeSet<&Path> = places
        .iter()
        .flat_map(|place| place.ancestors().skip(1))
        .filter(|folder| folder.parent().is_some())
        .collect();
    for folder in above {
        mount_bind_recursive(folder, folder)?;
    }
    // Taken before anything covers it: the way back to the shown folder.
    let kept = match shown {
        Some(path) => Some((
            path,
            rustix::fs::open(
                path,
                rustix::fs::OFlags::PATH
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )?,
        )),
        None => None,
    };
    let flags = MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
    for place in places {
        if !place.is_dir() {
            mount_bind("/dev/null", place)?;
            continue;
        }
        let Some((path, fd)) = kept.as_ref().filter(|(path, _)| path.starts_with(place)) else {
            mount(
                "orchestrate-hidden",
                place,
                "tmpfs",
                MountFlags::RDONLY | flags,
                Some(c"size=4k,mode=000"),
            )?;
            continue;
        };
        mount(
            "orchestrate-hidden",
            place,
            "tmpfs",
            flags,
            Some(c"size=4k,mode=111"),
        )?;
        let mut folder = place.to_path_buf();
        for part in path
            .strip_prefix(place)
            .unwrap_or(Path::new(""))
            .components()
        {
            folder.push(part);
            std::fs::DirBuilder::new()
                .mode(0o111)
                .create(&folder)
                .map_err(|e| {
                    rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO)
                })?;
        }
        mount_bind_recursive(format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str(), *path)?;
        mount_remount(place, MountFlags::RDONLY | flags, c"size=4k,mode=111")?;
    }
    // The working folder was entered before the mounts; a path relative to it
    // would still lead through the old ones.
    let here = std::env::current_dir().map_err(|_| rustix::io::Errno::NOENT)?;
    std::env::set_current_dir(here).map_err(|_| rustix::io::Errno::NOENT)
}

/// Makes what the command may not change in its workspace (its working folder)
/// read-only in its mount namespace (`protect`): pinned folders bound onto
/// themselves, then each protected path bound read-only, keeping the flags
/// its mount had (a user namespace may not drop them).
fn protect() -> rustix::io::Result<()> {
    use rustix::fs::StatVfsMountFlags as Has;
    use rustix::mount::{MountFlags, mount_bind_recursive, mount_remount};
    let here = std::env::current_dir().map_err(|_| rustix::io::Errno::NOENT)?;
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let found = super::protect::protected(&here, home.as_deref());
    // Where git would look but nothing is yet, something read-only is put
    // first; where that cannot be made (a read-only disk), no command can
    // make it either.
    let mut missing = Vec::new();
    for (path, folder) in &found.placeholders {
        let made = match folder {
            true => std::fs::create_dir(path),
            false => std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map(drop),
        };
        if made.is_err() {
            missing.push(path);
        }
    }
    for folder in &found.pinned {
        mount_bind_recursive(folder, folder)?;
    }
    for path in found.read_only.iter().filter(|p| !missing.contains(p)) {
        mount_bind_recursive(path, path)?;
        let had = rustix::fs::statvfs(path)?.f_flag;
        let mut flags = MountFlags::BIND | MountFlags::RDONLY;
        for (has, keep) in [
            (Has::NOSUID, MountFlags::NOSUID),
            (Has::NODEV, MountFlags::NODEV),
            (Has::NOEXEC, MountFlags::NOEXEC),
            (Has::NOATIME, MountFlags::NOATIME),
            (Has::NODIRATIME, MountFlags::NODIRATIME),
            (Has::RELATIME, MountFlags::RELATIME),
        ] {
            if had.contains(has) {
                flags |= keep;
            }
        }
        mount_remount(path, flags, c"")?;
    }
    std::env::set_current_dir(here).map_err(|_| rustix::io::Errno::NOENT)
}

/// Drops every capability this process has in its user namespace, and from
/// its bounding set, so that neither it nor what it runs (as the namespace's
/// root, which would otherwise regain them at exec) can unmount what hides and
/// protects.
fn drop_capabilities() -> rustix::io::Result<()> {
    use rustix::thread::{
        CapabilitySet, CapabilitySets, clear_ambient_capability_set,
        remove_capability_from_bounding_set, set_capabilities,
    };
    for capability in CapabilitySet::all().iter() {
        match remove_capability_from_bounding_set(capability) {
            // One this kernel does not know.
            Err(rustix::io::Errno::INVAL) | Ok(()) => {}
            Err(e) => return Err(e),
        }
    }
    clear_ambient_capability_set()?;
    set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )
}

/// Restricts this process (and what it execs) with Landlock: reads and execution
/// everywhere, every right under `writable` and on [`DEVICES`].
fn landlock(writable: &[PathBuf]) -> Result<RulesetStatus, landlock::RulesetError> {
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(LANDLOCK_ABI))?
        .create()?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(LANDLOCK_ABI)))?
        .add_rules(path_beneath_rules(
            DEVICES,
            AccessFs::from_file(LANDLOCK_ABI),
        ))?
        .add_rules(path_beneath_rules(
            writable,
            AccessFs::from_all(LANDLOCK_ABI),
        ))?
        .restrict_self()?;
    Ok(status.ruleset)
}

/// Stage `probe`: whether this kernel lets a process start a user namespace and
/// apply Landlock, as two lines (`userns ok` or the error; `landlock full`,
/// `partial`, `none` or the error).
fn probe() -> String {
    let userns = match unshare_user_namespace() {
        Ok(()) => "ok".to_owned(),
        Err(e) => e.to_string(),
    };
    let landlock = match landlock(&[]) {
        Ok(RulesetStatus::FullyEnforced) => "full".to_owned(),
        Ok(RulesetStatus::PartiallyEnforced) => "partial".to_owned(),
        Ok(RulesetStatus::NotEnforced) => "none".to_owned(),
        Err(e) => e.to_string(),
    };
    format!("userns {userns}\nlandlock {landlock}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_survives_its_arguments() {
        let spec = Spec {
            user_namespace: true,
            hidden: vec![
                "/h/.local/state/orchestrate".into(),
                "/run/user/0/orchestrate".into(),
            ],
            shown: Some("/h/.local/state/orchestrate/k/checkouts/c1".into()),
            writable: Some(vec!["/w s".into(), "/tmp".into()]),
            command: "echo -- --write x".into(),
        };
        let args = spec.args("run");
        assert_eq!(args[..2], [OsString::from(MARK), OsString::from("run")]);
        assert_eq!(Spec::parse(args.into_iter().skip(2)).unwrap(), spec);
        let bare = Spec {
            command: "true".into(),
            ..Spec::default()
        };
        assert_eq!(
            Spec::parse(bare.args("confine").into_iter().skip(2)).unwrap(),
            bare
        );
    }
}
