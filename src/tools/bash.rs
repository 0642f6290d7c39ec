//! The `Bash` tool: runs one shell command in the workspace, compatible with Claude
//! Code's tool of the same name. This file holds what the model sees (the input, its
//! timeout limits, the description) and the tests that drive whole calls; the
//! command's life is in `command`, its processes and their environment in `group`,
//! the output's cap in `output`, the policy commands run under in `confine`, and the
//! process that confines them (the `orchestrate` binary in a hidden mode) in
//! `launcher`.
//!
//! It does not decide whether the command may run (permission modes) nor whether it
//! may run beside other calls (the scheduler, from [`Tool::concurrency`]).

mod command;
mod confine;
mod edits;
pub(crate) mod group;
pub mod launcher;
mod output;
mod protect;

use std::time::Duration;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use self::confine::{Confinement, Launch, SandboxMode};
pub use self::edits::Trees;
pub use self::group::child_env;
use super::{Concurrency, Tool, ToolContext};
use crate::error::ToolError;

/// Timeout when the model gives none.
const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// The longest timeout; larger values are lowered to it.
const MAX_TIMEOUT_MS: u64 = 600_000;

const DESCRIPTION: &str = "\
Runs a shell command with `bash -c` (`sh -c` where bash is missing) and returns its output.

- Working directory: the workspace root, for every call; `cd` and variables do not carry over to the next call.
- Stdin is /dev/null: commands that ask questions get end-of-file, so pass flags such as `--yes`.
- `timeout` is in milliseconds: default 120000 (2 minutes), at most 600000 (10 minutes); a larger value is lowered to 600000. On timeout the command and every process it started are killed and you get the output so far.
- stdout and stderr come back interleaved in the order they were written, as one text. Past 30000 characters the middle is elided: you get the first and the last 15000 characters and a line saying how many were left out. Redirect to a file and read it in parts when you need all of it.
- A non-zero exit is an error result: the output, then `exit code N` (or the signal that killed the shell).
- Every process the command starts, background ones (`&`) included, is killed when the command ends: this tool cannot leave a server running.
- Provider API keys are not in the command's environment.
- The command may be sandboxed: writing outside the workspace and the temporary directory then fails with `Permission denied`. Do not try to work around it; say what you could not do.
- Prefer the Read, Edit, Write, Glob and Grep tools to cat, sed, find and grep.
- `description`: say in 5-10 words what the command does, for the person watching.";

/// The `Bash` tool. By default its commands start directly, unconfined; the
/// `orchestrate` binary gives it a [`Confinement`] through [`Bash::confined`].
#[derive(Clone, Debug, Default)]
pub struct Bash {
    confinement: std::sync::Arc<Confinement>,
}

impl Bash {
    /// A `Bash` whose commands run under `confinement`.
    pub fn confined(confinement: Confinement) -> Self {
        Self {
            confinement: std::sync::Arc::new(confinement),
        }
    }
}

/// The input of a `Bash` call, as Claude Code's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BashInput {
    /// The command to run with `bash -c`.
    pub command: String,
    /// Timeout in milliseconds: default 120000, at most 600000 (larger values are lowered to 600000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// What the command does, in 5-10 words, for the person watching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl BashInput {
    /// The timeout this call runs with, after the default and the clamp.
    pub fn timeout(&self) -> Result<Duration, ToolError> {
        match self.timeout {
            Some(0) => Err(ToolError::InvalidInput(
                "timeout must be at least 1 millisecond".into(),
            )),
            Some(ms) => Ok(Duration::from_millis(ms.min(MAX_TIMEOUT_MS))),
            None => Ok(Duration::from_millis(DEFAULT_TIMEOUT_MS)),
        }
    }
}

impl Tool for Bash {
    fn name(&self) -> &str {
        "Bash"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn input_schema(&self) -> Value {
        super::schema::<BashInput>()
    }

    fn read_only(&self) -> bool {
        false
    }

    fn ends_on_cancel(&self) -> bool {
        true
    }

    fn concurrency(&self, _input: &Value) -> Concurrency {
        Concurrency::Unsafe {
            resources: vec!["*".into()],
        }
    }

    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let input: BashInput = super::parse(input)?;
            if input.command.trim().is_empty() {
                return Err(ToolError::InvalidInput("the command is empty".into()));
            }
            let timeout = input.timeout()?;
            let seeing = edits::begin(ctx).await;
            let ran = command::run(&self.confinement, &input.command, timeout, ctx).await;
            if let Some(seeing) = seeing {
                for change in seeing.end().await {
                    ctx.changes.add(change);
                }
            }
            ran
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Instant;

    use serde_json::json;

    use rustix::process::Signal;

    use super::output::{HEAD_CHARS, OUTPUT_CAP, TAIL_CHARS};
    use super::*;
    use crate::protocol::SessionId;

    const DEADLINE: Duration = Duration::from_secs(10);

    fn workspace() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext::new(dir.path().canonicalize().unwrap(), SessionId::new());
        (dir, ctx)
    }

    async fn bash(ctx: &ToolContext, input: Value) -> Result<String, ToolError> {
        Bash::default().call(input, ctx).await
    }

    /// Processes of group `pgid` that are not zombies (a zombie runs nothing; reaping
    /// orphans is init's job, not ours).
    fn live_members(pgid: i32) -> Vec<i32> {
        let mut live = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // After the command name in parentheses: state, ppid, pgrp, …
            let Some((_, after)) = stat.rsplit_once(')') else {
                continue;
            };
            let fields: Vec<&str> = after.split_whitespace().collect();
            if fields[0] != "Z" && fields[2].parse::<i32>().unwrap() == pgid {
                live.push(pid);
            }
        }
        live
    }

    /// The command's shell leads a process group of its own: what makes
    /// [`assert_group_gone`] mean something (were the group never
    /// made, no process would have the shell's pid as its group, and "gone" would
    /// hold from the start).
    fn assert_group_running(pgid: i32) {
        assert!(
            !live_members(pgid).is_empty(),
            "no process is in group {pgid}: the shell does not lead a group of its own"
        );
    }

    async fn assert_group_gone(pgid: i32) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let live = live_members(pgid);
            if live.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "processes {live:?} of group {pgid} are still running"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn wait_for_pid_file(path: PathBuf) -> i32 {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Ok(text) = std::fs::read_to_string(&path)
                && let Ok(pid) = text.trim().parse()
            {
                return pid;
            }
            assert!(Instant::now() < deadline, "the command never wrote its pid");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn failure(result: Result<String, ToolError>) -> String {
        match result {
            Err(ToolError::Failed(text)) => text,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn runs_in_the_workspace() {
        let (_dir, ctx) = workspace();
        let out = bash(&ctx, json!({"command": "pwd"})).await.unwrap();
        assert_eq!(out, format!("{}\n", ctx.workspace.display()));
    }

    #[tokio::test]
    async fn stdout_and_stderr_are_interleaved_in_order() {
        let (_dir, ctx) = workspace();
        let out = bash(&ctx, json!({"command": "echo a; echo b >&2; echo c"}))
            .await
            .unwrap();
        assert_eq!(out, "a\nb\nc\n");
    }

    #[tokio::test]
    async fn stdin_is_empty_and_silence_is_said() {
        let (_dir, ctx) = workspace();
        let out = bash(&ctx, json!({"command": "cat"})).await.unwrap();
        assert_eq!(out, "(no output)");
    }

    #[tokio::test]
    async fn a_non_zero_exit_reports_the_code_and_the_output() {
        let (_dir, ctx) = workspace();
        let result = bash(&ctx, json!({"command": "echo out; echo err >&2; exit 3"})).await;
        assert_eq!(failure(result), "out\nerr\nexit code 3");
    }

    #[tokio::test]
    async fn a_shell_killed_by_a_signal_names_it() {
        let (_dir, ctx) = workspace();
        let result = bash(&ctx, json!({"command": "echo before; kill -TERM $$"})).await;
        assert_eq!(
            failure(result),
            format!(
                "before\nkilled by SIGTERM (signal {})",
                Signal::TERM.as_raw()
            )
        );
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_group_and_keeps_the_output() {
        let (_dir, ctx) = workspace();
        let started = Instant::now();
        let result = bash(
            &ctx,
            json!({"command": "echo $$; sleep 100 & sleep 100; wait", "timeout": 300}),
        )
        .await;
        assert!(started.elapsed() < DEADLINE, "took {:?}", started.elapsed());
        let text = failure(result);
        let (pid, status) = text.split_once('\n').unwrap();
        assert_eq!(
            status,
            "timed out after 300 ms; the command and every process it started were killed"
        );
        assert_group_gone(pid.parse().unwrap()).await;
    }

    #[tokio::test]
    async fn a_cancel_kills_the_whole_group() {
        let (dir, ctx) = workspace();
        let cancel = ctx.cancel.clone();
        let call = tokio::spawn(async move {
            Bash::default()
                .call(
                    json!({"command": "echo started; echo $$ > pid; sleep 100 & sleep 100; wait"}),
                    &ctx,
                )
                .await
        });
        let pgid = wait_for_pid_file(dir.path().join("pid")).await;
        assert_group_running(pgid);
        cancel.cancel();
        let result = tokio::time::timeout(DEADLINE, call).await.unwrap().unwrap();
        // What it had written is handed back.
        let Err(ToolError::CancelledWith(output)) = &result else {
            panic!("{result:?}")
        };
        assert!(output.starts_with("started\n"), "{output}");
        assert_group_gone(pgid).await;
    }

    #[tokio::test]
    async fn an_abandoned_call_kills_the_whole_group() {
        let (dir, ctx) = workspace();
        let call = tokio::spawn(async move {
            Bash::default()
                .call(
                    json!({"command": "echo $$ > pid; sleep 100 & sleep 100; wait"}),
                    &ctx,
                )
                .await
        });
        let pgid = wait_for_pid_file(dir.path().join("pid")).await;
        assert_group_running(pgid);
        call.abort();
        assert!(call.await.unwrap_err().is_cancelled());
        assert_group_gone(pgid).await;
    }

    #[tokio::test]
    async fn background_children_die_with_the_command() {
        let (_dir, ctx) = workspace();
        let started = Instant::now();
        let out = bash(&ctx, json!({"command": "sleep 100 & echo $$"}))
            .await
            .unwrap();
        assert!(started.elapsed() < DEADLINE, "took {:?}", started.elapsed());
        assert_group_gone(out.trim().parse().unwrap()).await;
    }

    #[tokio::test]
    async fn ten_megabytes_of_output_keep_the_head_and_the_tail() {
        let (_dir, ctx) = workspace();
        let command = r"echo START; head -c 10000000 /dev/zero | tr '\0' x; echo; echo END";
        let out = bash(&ctx, json!({"command": command})).await.unwrap();
        let total = "START\n".len() + 10_000_000 + "\nEND\n".len();
        let expected = format!(
            "START\n{}\n... [{} characters elided] ...\n{}\nEND\n",
            "x".repeat(HEAD_CHARS - "START\n".len()),
            total - OUTPUT_CAP,
            "x".repeat(TAIL_CHARS - "\nEND\n".len()),
        );
        assert_eq!(out, expected);
    }

    #[test]
    fn timeouts_default_and_clamp() {
        let input = |timeout| BashInput {
            command: "true".into(),
            timeout,
            description: None,
        };
        assert_eq!(input(None).timeout().unwrap(), Duration::from_secs(120));
        assert_eq!(
            input(Some(300)).timeout().unwrap(),
            Duration::from_millis(300)
        );
        assert_eq!(
            input(Some(10_000_000)).timeout().unwrap(),
            Duration::from_secs(600)
        );
        assert!(matches!(
            input(Some(0)).timeout(),
            Err(ToolError::InvalidInput(_))
        ));
    }

    #[tokio::test]
    async fn bad_input_is_refused() {
        let (_dir, ctx) = workspace();
        for input in [
            json!({}),
            json!({"command": "  "}),
            json!({"command": "true", "timeout": -1}),
        ] {
            let result = bash(&ctx, input.clone()).await;
            assert!(
                matches!(result, Err(ToolError::InvalidInput(_))),
                "{input}: {result:?}"
            );
        }
    }

    #[test]
    fn the_schema_describes_the_input() {
        let schema = Bash::default().input_schema();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["command"]));
        let properties = schema["properties"].as_object().unwrap();
        let mut names: Vec<&str> = properties.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["command", "description", "timeout"]);
        assert!(
            properties["timeout"]["description"]
                .as_str()
                .unwrap()
                .contains("600000")
        );
    }
}
