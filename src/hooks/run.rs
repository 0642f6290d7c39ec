//! Running one command hook: `sh -c` in the agent's working directory with
//! `CLAUDE_PROJECT_DIR` set, the event's JSON on its standard input, in a
//! process group of its own that is killed (every process of it) when it
//! outlives its timeout. Its output is read up to a bound. It runs with the
//! person's environment, less the provider keys.

use std::path::Path;
use std::process::Stdio;

use rustix::process::{Pid, Signal, kill_process_group};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::CommandHook;

/// The most of a hook's standard output or error that is read.
const MAX_OUTPUT: u64 = 64 * 1024;

/// How a hook ran.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ran {
    /// Its exit code; `None` when it was killed, timed out or never started.
    pub exit_code: Option<i32>,
    /// What it wrote on its standard output (bounded).
    pub stdout: String,
    /// What it wrote on its standard error (bounded).
    pub stderr: String,
    /// Why it did not run to an exit code of its own, when it did not.
    pub failure: Option<String>,
}

/// Runs `hook` with `input` on its standard input, in `cwd`.
pub async fn run(hook: &CommandHook, input: &Value, cwd: &Path, project_dir: &Path) -> Ran {
    let body = serde_json::to_vec(input).unwrap_or_default();
    shell(&hook.command, body, cwd, project_dir, hook.timeout).await
}

/// Runs `line` as the person's own command (a hook, a command file's
/// `` !`…` ``): `sh -c` in `cwd` with `CLAUDE_PROJECT_DIR` set to
/// `project_dir`, `stdin` on its standard input, its process group killed
/// past `timeout`, its output bounded, no provider key in its environment.
pub async fn shell(
    line: &str,
    stdin: Vec<u8>,
    cwd: &Path,
    project_dir: &Path,
    timeout: std::time::Duration,
) -> Ran {
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(line)
        .current_dir(cwd)
        .env_clear()
        .envs(std::env::vars_os().filter(|(name, _)| {
            !crate::keys::is_key_variable(name, &[]) && name != crate::keys::HANDOFF_FD_VAR
        }))
        .env("CLAUDE_PROJECT_DIR", project_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return Ran {
                failure: Some(format!("it could not start: {e}")),
                ..Ran::default()
            };
        }
    };
    // Every process of the hook goes when it is done, or when its caller
    // gives up on it (a cancelled call).
    let group = Group(child.id().and_then(|id| Pid::from_raw(id as i32)));
    let (pipe, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let body = stdin;
    tokio::spawn(async move {
        if let Some(mut stdin) = pipe {
            // A hook that does not read its input is no failure.
            let _ = stdin.write_all(&body).await;
        }
    });
    let out = tokio::spawn(read_bounded(stdout));
    let err = tokio::spawn(read_bounded(stderr));
    let status = tokio::time::timeout(timeout, child.wait()).await;
    // What it left running (holding its output open) goes with it.
    drop(group);
    let output = |task: tokio::task::JoinHandle<String>| async move {
        match tokio::time::timeout(DRAIN, task).await {
            Ok(Ok(text)) => text,
            _ => String::new(),
        }
    };
    let (stdout, stderr) = (output(out).await, output(err).await);
    match status {
        Ok(Ok(status)) => Ran {
            exit_code: status.code(),
            failure: status
                .code()
                .is_none()
                .then(|| format!("it was killed ({status})")),
            stdout,
            stderr,
        },
        Ok(Err(e)) => Ran {
            failure: Some(format!("it could not be waited for: {e}")),
            stdout,
            stderr,
            ..Ran::default()
        },
        Err(_) => Ran {
            failure: Some(format!("it timed out after {}s", timeout.as_secs_f64())),
            ..Ran::default()
        },
    }
}

/// How long a hook's output is read for once it has exited.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(1);

/// A hook's process group, killed when dropped.
struct Group(Option<Pid>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(group) = self.0 {
            let _ = kill_process_group(group, Signal::KILL);
        }
    }
}

/// What `pipe` gives, up to [`MAX_OUTPUT`] bytes; the rest is read and
/// dropped, so that a hook that writes more is not held up.
async fn read_bounded(pipe: Option<impl tokio::io::AsyncRead + Unpin>) -> String {
    let mut text = Vec::new();
    if let Some(mut pipe) = pipe {
        let mut chunk = [0u8; 8192];
        while let Ok(n) = pipe.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            let room = (MAX_OUTPUT as usize).saturating_sub(text.len());
            text.extend_from_slice(&chunk[..n.min(room)]);
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn hook(command: &str, timeout: Duration) -> CommandHook {
        CommandHook {
            command: command.into(),
            timeout,
            block_on_failure: false,
        }
    }

    #[tokio::test]
    async fn a_hook_reads_the_event_and_answers_with_its_exit_code_and_output() {
        let dir = tempfile::tempdir().unwrap();
        let ran = run(
            &hook(
                r#"read -r line; echo "got $line in $PWD for $CLAUDE_PROJECT_DIR"; echo oops >&2; exit 2"#,
                Duration::from_secs(30),
            ),
            &json!({ "tool_name": "Bash" }),
            dir.path(),
            Path::new("/the/project"),
        )
        .await;
        assert_eq!(ran.exit_code, Some(2));
        let cwd = dir.path().display().to_string();
        assert_eq!(
            ran.stdout,
            format!("got {{\"tool_name\":\"Bash\"}} in {cwd} for /the/project\n")
        );
        assert_eq!(ran.stderr, "oops\n");
        assert_eq!(ran.failure, None);
    }

    #[tokio::test]
    async fn a_hook_that_leaves_a_child_holding_its_output_answers_when_it_exits() {
        let dir = tempfile::tempdir().unwrap();
        let ran = run(
            &hook("echo answered; sleep 30 & exit 0", Duration::from_secs(20)),
            &json!({}),
            dir.path(),
            dir.path(),
        )
        .await;
        assert_eq!((ran.exit_code, ran.failure), (Some(0), None));
        assert_eq!(ran.stdout, "answered\n");
    }

    #[tokio::test]
    async fn a_hook_past_its_timeout_is_killed_with_what_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("child.pid");
        let command = format!(
            "sh -c 'echo $$ > {}; exec sleep 30' & sleep 30",
            pid_file.display()
        );
        let ran = run(
            &hook(&command, Duration::from_secs(1)),
            &json!({}),
            dir.path(),
            dir.path(),
        )
        .await;
        assert_eq!(ran.exit_code, None);
        assert!(ran.failure.unwrap().contains("timed out"));
        // Its background child went with it (dead, or a zombie waiting to
        // be reaped by init).
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let stat = format!("/proc/{}/stat", pid.trim());
        let alive = || {
            std::fs::read_to_string(&stat).is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| !r.trim_start().starts_with('Z'))
            })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while alive() {
            assert!(
                std::time::Instant::now() < deadline,
                "a child of the hook survived"
            );
            tokio::task::yield_now().await;
        }
    }
}
