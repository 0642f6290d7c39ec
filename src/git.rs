//! Git run so that it runs no program a repository names: its config can name
//! a file-system monitor, hooks, a pager, an editor, an ssh command, credential
//! helpers, a signing program, a transport, filter and merge drivers, each a command
//! git would start. orchestrate's own git invocations are made through
//! [`command`] (a diff among them with `--no-ext-diff`: an empty `diff.external`
//! does not turn an external diff off, it runs a program named ""); sandboxed
//! commands get [`environment`] too, as defence in depth (not a boundary: a
//! command may unset it, which is why the sandbox makes the repository's config
//! read-only as well).

pub mod bundle;
pub mod checkout;
pub mod checkpoint;
pub mod config;
pub mod shadow;

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// Config that names no program of the repository's, given on git's command
/// line (it outranks the repository's): no monitor, no hooks, `cat` as the
/// pager, `true` as the editor, the plain `ssh` and `gpg`, no credential helper
/// (an empty value resets their list), no `ext::` transport.
pub const SAFE_CONFIG: [(&str, &str); 9] = [
    ("core.fsmonitor", ""),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("core.sshCommand", "ssh"),
    ("credential.helper", ""),
    ("gpg.program", "gpg"),
    ("gpg.ssh.program", "ssh-keygen"),
    ("protocol.ext.allow", "never"),
];

/// `git` in `dir`, configured by [`SAFE_CONFIG`], with every filter driver the
/// repository's config defines turned into a no-op (and every merge driver
/// into `false`: a merge that would run it is a conflict), no terminal prompt and no
/// optional locks (a `git status` beside the person's own does not take
/// `index.lock`).
pub fn command(dir: &Path) -> std::process::Command {
    let mut git = std::process::Command::new("git");
    git.current_dir(dir).arg("--no-pager");
    for (key, value) in SAFE_CONFIG {
        git.arg("-c").arg(format!("{key}={value}"));
    }
    for driver in drivers(dir) {
        if let Some(merge) = driver.strip_prefix("merge.") {
            // A merge that would need it conflicts instead.
            git.arg("-c").arg(format!("merge.{merge}.driver=false"));
            continue;
        }
        let Some(filter) = driver.strip_prefix("filter.") else {
            continue;
        };
        for (part, value) in [("clean", "cat"), ("smudge", "cat"), ("process", "")] {
            git.arg("-c").arg(format!("filter.{filter}.{part}={value}"));
        }
    }
    git.envs(quiet());
    git
}

/// Whether the repository in `dir` configures a filter driver (Git LFS,
/// git-crypt, …): its index then holds files in their stored form, not as
/// they are on disk.
pub fn filters_configured(dir: &Path) -> bool {
    drivers(dir).iter().any(|d| d.starts_with("filter."))
}

/// The environment that makes any git a command runs as safe as [`command`]'s
/// (less the filters, which only a look at the repository's config can name):
/// `GIT_CONFIG_COUNT` and its pairs, after any the environment `parent` holds.
pub fn environment(parent: &[(OsString, OsString)]) -> Vec<(OsString, OsString)> {
    let start = parent
        .iter()
        .find(|(name, _)| name == "GIT_CONFIG_COUNT")
        .and_then(|(_, value)| value.to_str()?.parse::<usize>().ok())
        .unwrap_or(0);
    let mut env: Vec<(OsString, OsString)> = config_env(&SAFE_CONFIG, start)
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
    env.extend(quiet());
    env
}

/// `pairs` as git reads configuration from the environment: each as
/// `GIT_CONFIG_KEY_<n>` and `GIT_CONFIG_VALUE_<n>` from `start` on, and
/// `GIT_CONFIG_COUNT` past them.
pub(crate) fn config_env(pairs: &[(&str, &str)], start: usize) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = pairs
        .iter()
        .enumerate()
        .flat_map(|(i, (key, value))| {
            [
                (format!("GIT_CONFIG_KEY_{}", start + i), (*key).to_owned()),
                (
                    format!("GIT_CONFIG_VALUE_{}", start + i),
                    (*value).to_owned(),
                ),
            ]
        })
        .collect();
    env.push((
        "GIT_CONFIG_COUNT".to_owned(),
        (start + pairs.len()).to_string(),
    ));
    env
}

/// No password prompt on the terminal the orchestrator shares, no optional
/// locks, and `cat` as every command's pager (`pager.<command>` included).
fn quiet() -> [(OsString, OsString); 3] {
    [
        ("GIT_TERMINAL_PROMPT".into(), "0".into()),
        ("GIT_OPTIONAL_LOCKS".into(), "0".into()),
        ("GIT_PAGER".into(), "cat".into()),
    ]
}

/// The filter and merge drivers the repository in `dir` configures, read once per
/// folder while its `.git/config` is unchanged (a checkout's git runs dozens
/// of commands in the same repository).
fn drivers(dir: &Path) -> Vec<String> {
    type Known = HashMap<PathBuf, (Option<SystemTime>, Vec<String>)>;
    static KNOWN: Mutex<Option<Known>> = Mutex::new(None);
    let changed = config_stamp(dir);
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    let known = known.get_or_insert_with(HashMap::new);
    if let Some((at, drivers)) = known.get(dir)
        && changed.is_some()
        && *at == changed
    {
        return drivers.clone();
    }
    let drivers = read_drivers(dir);
    if known.len() > 64 {
        known.clear();
    }
    known.insert(dir.to_owned(), (changed, drivers.clone()));
    drivers
}

/// When the config of the repository `dir` is in last changed: its `.git`
/// folder's `config` (or, for a worktree or submodule, its `.git` file), from
/// the nearest folder above that has one; a bare repository's own `config`.
fn config_stamp(dir: &Path) -> Option<SystemTime> {
    // A bare repository (a worker's of the bundles it was sent) is its own
    // git folder.
    if dir.join("HEAD").is_file() && dir.join("objects").is_dir() {
        return std::fs::metadata(dir.join("config"))
            .and_then(|m| m.modified())
            .ok();
    }
    let dot_git = dir
        .ancestors()
        .map(|d| d.join(".git"))
        .find(|g| g.exists())?;
    let config = if dot_git.is_dir() {
        dot_git.join("config")
    } else {
        dot_git
    };
    std::fs::metadata(config).and_then(|m| m.modified()).ok()
}

/// The filter and merge drivers the repository in `dir` configures
/// (`filter.NAME.*`, `merge.NAME.*`, as `filter.NAME` and `merge.NAME`), read
/// by a git that runs nothing (`git config` starts no program).
fn read_drivers(dir: &Path) -> Vec<String> {
    let mut config = std::process::Command::new("git");
    config
        .current_dir(dir)
        .args([
            "config",
            "--name-only",
            "--get-regexp",
            r"^(filter|merge)\.",
        ])
        .envs(quiet());
    let listed = output_within(config);
    let Ok(listed) = listed else {
        return Vec::new();
    };
    let mut drivers: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|key| {
            let (kind, rest) = key.split_once('.')?;
            let (driver, _) = rest.rsplit_once('.')?;
            Some(format!("{kind}.{driver}"))
        })
        .collect();
    drivers.sort();
    drivers.dedup();
    drivers
}

/// How long one git of orchestrate's may take: a FIFO where git reads (a
/// `.gitignore`, a config include) would otherwise hold it forever.
const GIT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(300);

/// Runs `command` (in a process group of its own) to its end, or until
/// [`GIT_DEADLINE`], when its group is killed and the run fails.
pub(crate) fn output_within(
    command: std::process::Command,
) -> std::io::Result<std::process::Output> {
    output_fed(command, Vec::new())
}

/// As [`output_within`], with `input` on the command's standard input (closed
/// after it; nothing when empty).
pub(crate) fn output_fed(
    mut command: std::process::Command,
    input: Vec<u8>,
) -> std::io::Result<std::process::Output> {
    use std::io::{Read, Write};
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let stdin = if input.is_empty() {
        Stdio::null()
    } else {
        Stdio::piped()
    };
    let mut child = command
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    if let Some(mut pipe) = child.stdin.take() {
        // A thread of its own: git may answer before it has read it all.
        std::thread::spawn(move || pipe.write_all(&input));
    }
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let Some(status) = wait_within(&mut child, GIT_DEADLINE)? else {
        kill_group(&mut child);
        return Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("git took longer than {} s", GIT_DEADLINE.as_secs()),
        ));
    };
    Ok(std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// A git kept running to be asked in turn (`cat-file --batch-command`):
/// its standard input and output, its error output dropped. Dropped, its
/// group is killed and it is waited for.
#[derive(Debug)]
pub(crate) struct Conversation {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
}

impl Conversation {
    /// Starts `command`.
    pub(crate) fn start(mut command: std::process::Command) -> std::io::Result<Self> {
        use std::os::unix::process::CommandExt;
        use std::process::Stdio;
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let (input, output) = match (child.stdin.take(), child.stdout.take()) {
            (Some(input), Some(output)) => (input, std::io::BufReader::new(output)),
            _ => {
                kill_group(&mut child);
                return Err(std::io::Error::other("git's pipes were not made"));
            }
        };
        Ok(Self {
            child,
            input,
            output,
        })
    }

    /// One exchange: `talk` writes and reads in turn. Past [`GIT_DEADLINE`]
    /// the git is killed, which ends any read `talk` waits in; after an
    /// error the conversation is of no more use.
    pub(crate) fn talk<T>(
        &mut self,
        talk: impl FnOnce(
            &mut std::process::ChildStdin,
            &mut std::io::BufReader<std::process::ChildStdout>,
        ) -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let group = self.child.id();
        let (done, waiting) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                waiting.recv_timeout(GIT_DEADLINE)
            {
                kill(group);
            }
        });
        let said = talk(&mut self.input, &mut self.output);
        drop(done);
        said
    }
}

impl Drop for Conversation {
    fn drop(&mut self) {
        kill_group(&mut self.child);
    }
}

/// Kills `child`'s group and waits for it.
fn kill_group(child: &mut std::process::Child) {
    kill(child.id());
    let _ = child.wait();
}

/// Kills the process group `group` (a child's id, as it leads its own).
fn kill(group: u32) {
    if let Some(group) = rustix::process::Pid::from_raw(group as i32) {
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    }
}

/// Waits for `child` to exit, at most `deadline`: its status, or `None` when it
/// still runs. Woken by the process's own descriptor the moment it exits (a
/// git takes a few milliseconds; a poll would add its period to each), or,
/// where the kernel has none, by polling.
fn wait_within(
    child: &mut std::process::Child,
    deadline: std::time::Duration,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let started = std::time::Instant::now();
    let pidfd = rustix::process::Pid::from_raw(child.id() as i32).and_then(|pid| {
        rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
    });
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let left = deadline.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Ok(None);
        }
        match &pidfd {
            Some(fd) => {
                let mut fds = [PollFd::new(fd, PollFlags::IN)];
                let timeout = Timespec::try_from(left).unwrap_or(Timespec {
                    tv_sec: 1,
                    tv_nsec: 0,
                });
                let _ = poll(&mut fds, Some(&timeout));
            }
            None => std::thread::sleep(std::time::Duration::from_millis(5)),
        }
    }
}

/// Plain `git args` in `dir` for a test's set-up: an identity, and no
/// configuration of the machine's; its output, trimmed.
#[cfg(test)]
pub(crate) fn plain(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repositorys_planted_programs_never_run_through_orchestrates_git() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path();
        let ran = repo.join("ran");
        plain(repo, &["init", "-q"]);
        plain(repo, &["config", "user.email", "a@b"]);
        plain(repo, &["config", "user.name", "a"]);
        let mark = |what: &str| format!("sh -c 'echo {what} >> {}'", ran.display());
        for (key, what) in [
            ("core.fsmonitor", "fsmonitor"),
            ("core.pager", "pager"),
            ("pager.log", "log pager"),
            ("diff.external", "diff"),
            ("filter.evil.clean", "clean"),
            ("filter.evil.smudge", "smudge"),
        ] {
            plain(repo, &["config", key, &mark(what)]);
        }
        std::fs::write(repo.join(".gitattributes"), "*.txt filter=evil\n").unwrap();
        let hook = repo.join(".git/hooks/pre-commit");
        std::fs::write(&hook, format!("#!/bin/sh\n{}\n", mark("hook"))).unwrap();
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::fs::write(repo.join("a.txt"), "one\n").unwrap();
        for args in [
            &["add", "a.txt"][..],
            &["commit", "-qm", "first"],
            &["status"],
            &["log", "-p", "--no-ext-diff"],
        ] {
            let done = command(repo)
                .args(args)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .output()
                .unwrap();
            assert!(
                done.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&done.stderr)
            );
        }
        std::fs::write(repo.join("a.txt"), "two\n").unwrap();
        let diff = command(repo)
            .args(["diff", "--no-ext-diff"])
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&diff.stdout).contains("+two"));
        assert!(
            !ran.exists(),
            "ran: {}",
            std::fs::read_to_string(&ran).unwrap_or_default()
        );
        // The same repository through a plain git does run them: the test plants
        // what it says it does.
        plain(repo, &["status"]);
        assert!(ran.exists());
    }

    #[test]
    fn the_environment_adds_its_config_after_what_the_environment_has() {
        let parent = vec![("GIT_CONFIG_COUNT".into(), "2".into())];
        let env = environment(&parent);
        let get = |name: &str| {
            env.iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(get("GIT_CONFIG_COUNT").as_deref(), Some("11"));
        assert_eq!(get("GIT_CONFIG_KEY_2").as_deref(), Some("core.fsmonitor"));
        assert_eq!(get("GIT_CONFIG_VALUE_3").as_deref(), Some("/dev/null"));
        assert_eq!(get("GIT_OPTIONAL_LOCKS").as_deref(), Some("0"));
    }
}
