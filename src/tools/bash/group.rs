//! The shell's processes: the shell started in a process group of its own, and the
//! whole group (background children included) killed with SIGKILL when the command
//! ends, times out, is cancelled or is abandoned (the runner drops the call's future).
//! Also the child's environment, from which the provider credentials the
//! orchestrator itself runs with are removed: every variable whose name ends in
//! `_API_KEY` (any case), and `ANTHROPIC_AUTH_TOKEN`, `CLAUDE_CODE_OAUTH_TOKEN`,
//! `AWS_BEARER_TOKEN_BEDROCK`, `AZURE_OPENAI_AD_TOKEN` and `OPENAI_ADMIN_KEY`.
//! `GIT_TERMINAL_PROMPT=0` is set, because the command shares the orchestrator's
//! terminal and a password prompt there would stall it until its timeout. It does not
//! read the output nor decide when the command ends (`command`).

use std::ffi::OsString;
use std::io::PipeWriter;
use std::path::Path;
use std::process::Stdio;

use rustix::io::Errno;
use rustix::process::{Pid, Signal, kill_process_group};
use tokio::process::{Child, Command};

use crate::error::ToolError;

/// Provider credentials removed from the child's environment besides `*_API_KEY`.
const NAMED_SECRETS: [&str; 5] = [
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
    "AZURE_OPENAI_AD_TOKEN",
    "OPENAI_ADMIN_KEY",
];

/// The child's environment: `parent` without provider credentials, plus
/// `GIT_TERMINAL_PROMPT=0`.
pub fn child_env(
    parent: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    parent
        .into_iter()
        .filter(|(name, _)| {
            let upper = name.to_string_lossy().to_ascii_uppercase();
            !upper.ends_with("_API_KEY")
                && !NAMED_SECRETS.contains(&upper.as_str())
                && upper != "GIT_TERMINAL_PROMPT"
        })
        .chain([("GIT_TERMINAL_PROMPT".into(), "0".into())])
        .collect()
}

/// Starts `shell -c command` in its own process group, stdout and stderr both on `out`.
pub(super) fn spawn(
    shell: &str,
    command: &str,
    workspace: &Path,
    out: &PipeWriter,
) -> std::io::Result<Child> {
    // The command (and the pipe ends it holds) is dropped on return.
    Command::new(shell)
        .arg("-c")
        .arg(command)
        .current_dir(workspace)
        .env_clear()
        .envs(child_env(std::env::vars_os()))
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out.try_clone()?)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
}

/// The shell and its process group, which is killed whole when this is dropped while
/// still `live`: the runner drops a call's future on cancel and on its own timeout.
pub(super) struct ShellGroup {
    pub(super) child: Child,
    pgid: Pid,
    pub(super) live: bool,
}

impl ShellGroup {
    pub(super) fn new(child: Child) -> Result<Self, ToolError> {
        // A child is only reaped when waited for, so right after spawn its pid is known.
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw)
            .ok_or_else(|| ToolError::Failed("the shell has no process id".into()))?;
        Ok(Self {
            child,
            pgid,
            live: true,
        })
    }

    pub(super) fn kill(&self) {
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
        let expected = [
            ("PATH", "/usr/bin"),
            ("OPENAI_BASE_URL", "http://localhost/v1"),
            ("API_KEY_FILE", "kept"),
            ("GIT_TERMINAL_PROMPT", "0"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        assert_eq!(child_env(parent), expected);
    }
}
