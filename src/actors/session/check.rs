//! A check run for the session (a Task input's or a role's `check`): a Bash
//! command in the session's own workspace, through its own permission gate
//! (its mode, its rules, a person's yes where the mode asks), in a task of its
//! own so that the session's mailbox is never held up; the answer goes back
//! to whoever asked.

use std::sync::Arc;
use std::time::Duration;

use ractor::RpcReplyPort;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::SessionState;
use crate::error::ToolError;
use crate::tools::Tool;

/// How a check ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CheckRun {
    /// Its exit code; `None` when it did not run to an exit (refused, timed
    /// out, killed by a signal).
    pub(crate) exit: Option<i32>,
    /// Its output (what Bash gives a model: the tail of a long output), or
    /// why it was refused.
    pub(crate) output: String,
    /// The permission gate refused it: it never ran.
    pub(crate) refused: bool,
}

/// The exit code a Bash error result ends with (`exit code N`).
fn exit_code(text: &str) -> Option<i32> {
    text.lines()
        .last()?
        .strip_prefix("exit code ")?
        .trim()
        .parse()
        .ok()
}

impl SessionState {
    /// Runs `command` with `bash` as this session would run it, within
    /// `timeout`, answering `reply`.
    pub(super) fn run_check(
        &self,
        command: &str,
        bash: Arc<dyn Tool>,
        timeout: Duration,
        cancel: CancellationToken,
        reply: RpcReplyPort<CheckRun>,
    ) {
        // A check that writes in the shared tree is a change like any.
        let call_id = format!("check-{}", crate::protocol::SessionId::new());
        let mut ctx = self.tool_context(call_id, cancel.clone(), false);
        // A check is its caller's, not the agent's: what the agent narrowed
        // itself to since (a skill it loaded) does not narrow it; what its
        // caller was narrowed by does.
        ctx.narrowing = Arc::new(crate::tools::narrowing::Narrowing::new(
            self.spec.narrowing.clone(),
        ));
        let gate = self.gate();
        let input = json!({
            "command": command,
            "timeout": timeout.as_millis().min(u128::from(u64::MAX)) as u64,
        });
        tokio::spawn(async move {
            let asked = tokio::select! {
                () = cancel.cancelled() => Err(ToolError::Cancelled),
                asked = gate.check(&ctx, "Bash", false, &input, None) => asked,
            };
            if let (Ok(()), Some(checkpoints)) = (&asked, &ctx.checkpoints) {
                checkpoints.before_first_change().await;
            }
            let call = async {
                tokio::select! {
                    () = cancel.cancelled() => Err(ToolError::Cancelled),
                    ran = bash.call(input, &ctx) => ran,
                }
            };
            let run = match asked {
                Err(refused) => CheckRun {
                    exit: None,
                    output: refused.to_string(),
                    refused: true,
                },
                Ok(()) => match call.await {
                    Ok(output) => CheckRun {
                        exit: Some(0),
                        output,
                        refused: false,
                    },
                    Err(ToolError::Failed(output)) => CheckRun {
                        exit: exit_code(&output),
                        output,
                        refused: false,
                    },
                    Err(other) => CheckRun {
                        exit: None,
                        output: other.to_string(),
                        refused: false,
                    },
                },
            };
            let _ = reply.send(run);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_code_is_the_last_line_of_a_bash_error() {
        assert_eq!(exit_code("FAILED 2 tests\nexit code 101"), Some(101));
        assert_eq!(exit_code("killed\nkilled by signal 9"), None);
        assert_eq!(exit_code(""), None);
    }
}
