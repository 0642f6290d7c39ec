//! The shell's processes and their environment. Started directly (a program using
//! the library), the shell leads a process group of its own, and the whole group
//! (background children included) is killed with SIGKILL when the command ends,
//! times out, is cancelled or is abandoned (the runner drops the call's future).
//! Started through the `launcher` (the `orchestrate` binary), the launcher leads the
//! group and holds the read end of a lifeline pipe: closing the write end (on the
//! same occasions, or when the orchestrator dies) makes it kill every process the
//! command started, those that left the group with `setsid` included.
//!
//! The child's environment has no provider key (`keys::is_key_variable`, with the
//! configured `api_key_env` names) nor the key handoff's descriptor variable, and
//! has git's safe config (`git::environment`: no program the repository names,
//! no terminal prompt, because the command shares the orchestrator's terminal and
//! a password prompt there would stall it until its timeout). It does
//! not read the output nor decide when the command ends (`command`).

use std::ffi::OsString;
use std::io::PipeWriter;
use std::path::Path;
use std::process::Stdio;

use rustix::io::Errno;
use rustix::process::{Pid, Signal, kill_process_group};
use tokio::process::{Child, Command};

use super::confine::Confinement;
use crate::keys::{HANDOFF_FD_VAR, is_key_variable};
use crate::tools::ToolContext;

/// The child's environment: `parent` without provider keys (the built-in ones and
/// `configured`) or the handoff's variable, plus git's safe config
/// (`git::environment`).
pub fn child_env(
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    configured: &[String],
) -> Vec<(OsString, OsString)> {
    let kept: Vec<(OsString, OsString)> = parent
        .into_iter()
        .filter(|(name, _)| !is_key_variable(name, configured) && name != HANDOFF_FD_VAR)
        .collect();
    let git = crate::git::environment(&kept);
    let mut env: Vec<(OsString, OsString)> = kept
        .into_iter()
        .filter(|(name, _)| !git.iter().any(|(set, _)| set == name))
        .collect();
    env.extend(git);
    env
}

/// Starts `command` in the call's workspace as `confinement` says (the call's
/// private places hidden from it), stdout and stderr both on `out`, in a process
/// group of its own.
pub(super) async fn start(
    confinement: &Confinement,
    command: &str,
    ctx: &ToolContext,
    out: &PipeWriter,
) -> std::io::Result<ShellGroup> {
    let workspace = &ctx.workspace;
    let env = child_env(std::env::vars_os(), &confinement.key_variables);
    let Some(launch) = &confinement.launch else {
        let child = match spawn("bash", command, workspace, out, &env) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                spawn("sh", command, workspace, out, &env)?
            }
            other => other?,
        };
        return ShellGroup::new(child, None);
    };
    let (lifeline_end, lifeline) = std::io::pipe()?;
    // Never killed on drop: the launcher must live to kill what the command left.
    let child = Command::new(super::launcher::executable())
        .args(
            launch
                .spec(
                    command,
                    workspace,
                    ctx.checkout.as_ref().map(|c| c.root.as_path()),
                    &ctx.private,
                )
                .args("run"),
        )
        .current_dir(workspace)
        .env_clear()
        .envs(env)
        .stdin(lifeline_end)
        .stdout(out.try_clone()?)
        .stderr(out.try_clone()?)
        .process_group(0)
        .spawn()?;
    let group = ShellGroup::new(child, Some(lifeline))?;
    if launch.user_namespace {
        // The launcher stops once its namespaces are made, for its id maps.
        let pid = group.pgid.as_raw_pid() as u32;
        tokio::task::spawn_blocking(move || super::launcher::continue_mapped(pid))
            .await
            .map_err(std::io::Error::other)?
            .map_err(std::io::Error::other)?;
    }
    Ok(group)
}

/// Starts `shell -c command` in its own process group.
fn spawn(
    shell: &str,
    command: &str,
    workspace: &Path,
    out: &PipeWriter,
    env: &[(OsString, OsString)],
) -> std::io::Result<Child> {
    // The command (and the pipe ends it holds) is dropped on return.
    Command::new(shell)
        .arg("-c")
        .arg(command)
        .current_dir(workspace)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out.try_clone()?)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
}

/// The shell (or its launcher) and its process group, whose processes are all killed
/// when this is dropped while still `live`: the runner drops a call's future on
/// cancel and on its own timeout.
pub(super) struct ShellGroup {
    pub(super) child: Child,
    pgid: Pid,
    /// The launcher's lifeline; `None` for a shell started directly.
    lifeline: Option<PipeWriter>,
    pub(super) live: bool,
}

impl ShellGroup {
    fn new(child: Child, lifeline: Option<PipeWriter>) -> std::io::Result<Self> {
        // A child is only reaped when waited for, so right after spawn its pid is known.
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw)
            .ok_or_else(|| std::io::Error::other("the shell has no process id"))?;
        Ok(Self {
            child,
            pgid,
            lifeline,
            live: true,
        })
    }

    /// Kills every process of the command: through the launcher, by closing its
    /// lifeline (killing the launcher would leave it no time to); else the group.
    pub(super) fn kill(&mut self) {
        if self.lifeline.take().is_some() {
            return;
        }
        match kill_process_group(self.pgid, Signal::KILL) {
            Ok(()) | Err(Errno::SRCH) => {}
            Err(e) => tracing::warn!("cannot kill process group {}: {e}", self.pgid.as_raw_pid()),
        }
    }
}

impl Drop for ShellGroup {
    fn drop(&mut self) {
        if self.live {
            self.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_key_variables_and_the_handoff_are_removed_too() {
        let parent = [
            ("PATH", "/usr/bin"),
            ("MY_LLM_TOKEN", "t-1"),
            ("ORCHESTRATE_KEYS_FD", "3"),
            ("my_llm_token", "kept: names are matched exactly"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let kept = [
            ("PATH", "/usr/bin"),
            ("my_llm_token", "kept: names are matched exactly"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let mut expected = kept.to_vec();
        expected.extend(crate::git::environment(&kept));
        assert_eq!(child_env(parent, &["MY_LLM_TOKEN".to_owned()]), expected);
    }

    #[test]
    fn provider_keys_are_removed_from_the_environment() {
        let parent = [
            ("PATH", "/usr/bin"),
            ("OPENAI_API_KEY", "sk-1"),
            ("anthropic_api_key", "sk-2"),
            ("ANTHROPIC_AUTH_TOKEN", "t"),
            ("OPENAI_BASE_URL", "http://localhost/v1"),
            ("GIT_TERMINAL_PROMPT", "1"),
            ("API_KEY_FILE", "kept"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let kept = [
            ("PATH", "/usr/bin"),
            ("OPENAI_BASE_URL", "http://localhost/v1"),
            ("API_KEY_FILE", "kept"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let mut expected = kept.to_vec();
        // Git's safe config, a prompt turned off included (not the parent's "1").
        expected.extend(crate::git::environment(&kept));
        let env = child_env(parent, &[]);
        assert_eq!(env, expected);
        assert!(env.contains(&("GIT_TERMINAL_PROMPT".into(), "0".into())));
    }
}
