//! The `Bash` tool: runs one shell command in the workspace, compatible with Claude
//! Code's tool of the same name.
//!
//! It owns the life of the command's processes: the shell starts in a process group of
//! its own, and when the command ends, times out, is cancelled or is abandoned (the
//! runner drops the call's future), the whole group gets SIGKILL, background children
//! included. It also owns the output's cap, and the child's environment, from which the
//! provider credentials the orchestrator itself runs with are removed: every variable
//! whose name ends in `_API_KEY` (any case), and `ANTHROPIC_AUTH_TOKEN`,
//! `CLAUDE_CODE_OAUTH_TOKEN`, `AWS_BEARER_TOKEN_BEDROCK`, `AZURE_OPENAI_AD_TOKEN` and
//! `OPENAI_ADMIN_KEY`. `GIT_TERMINAL_PROMPT=0` is set, because the command shares the
//! orchestrator's terminal and a password prompt there would stall it until its timeout.
//!
//! It does not decide whether the command may run (permission modes) nor whether it
//! may run beside other calls (the scheduler, from [`Tool::concurrency`]).

use std::ffi::OsString;
use std::io::PipeWriter;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use futures::future::BoxFuture;
use rustix::io::Errno;
use rustix::process::{Pid, Signal, kill_process_group};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};

use super::{Concurrency, Tool, ToolContext};
use crate::error::ToolError;

/// Timeout when the model gives none.
const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// The longest timeout; larger values are lowered to it.
const MAX_TIMEOUT_MS: u64 = 600_000;
/// Characters of output kept: the first and the last half of it.
const OUTPUT_CAP: usize = 30_000;
const HEAD_CHARS: usize = OUTPUT_CAP / 2;
const TAIL_CHARS: usize = OUTPUT_CAP - HEAD_CHARS;
/// How long the output is still read once the group has been killed: only a process
/// that left the group (`setsid`) can hold the pipe open past that.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
const READ_CHUNK: usize = 64 * 1024;
/// Provider credentials removed from the child's environment besides `*_API_KEY`.
const NAMED_SECRETS: [&str; 5] = [
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
    "AZURE_OPENAI_AD_TOKEN",
    "OPENAI_ADMIN_KEY",
];

const DESCRIPTION: &str = "\
Runs a shell command with `bash -c` (`sh -c` where bash is missing) and returns its output.

- Working directory: the workspace root, for every call; `cd` and variables do not carry over to the next call.
- Stdin is /dev/null: commands that ask questions get end-of-file, so pass flags such as `--yes`.
- `timeout` is in milliseconds: default 120000 (2 minutes), at most 600000 (10 minutes); a larger value is lowered to 600000. On timeout the command and every process it started are killed and you get the output so far.
- stdout and stderr come back interleaved in the order they were written, as one text. Past 30000 characters the middle is elided: you get the first and the last 15000 characters and a line saying how many were left out. Redirect to a file and read it in parts when you need all of it.
- A non-zero exit is an error result: the output, then `exit code N` (or the signal that killed the shell).
- Every process the command starts, background ones (`&`) included, is killed when the command ends: this tool cannot leave a server running.
- Provider API keys are not in the command's environment.
- Prefer the Read, Edit, Write, Glob and Grep tools to cat, sed, find and grep.
- `description`: say in 5-10 words what the command does, for the person watching.";

/// The `Bash` tool.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bash;

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
            run(&input.command, timeout, ctx).await
        })
    }
}

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

/// How the wait for the command ended.
enum End {
    Exited(std::io::Result<ExitStatus>),
    TimedOut,
    Cancelled,
}

async fn run(command: &str, timeout: Duration, ctx: &ToolContext) -> Result<String, ToolError> {
    let workspace = &ctx.workspace;
    if !workspace.is_dir() {
        return Err(ToolError::Failed(format!(
            "the workspace {} is not a directory",
            workspace.display()
        )));
    }
    let (reader, writer) = std::io::pipe()
        .map_err(|e| ToolError::Failed(format!("cannot create the output pipe: {e}")))?;
    let spawned = match spawn("bash", command, workspace, &writer) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            spawn("sh", command, workspace, &writer)
        }
        other => other,
    };
    // Only the child may hold the write end now, so the pipe reaches end-of-file when
    // the last process of the command is gone.
    drop(writer);
    let child = spawned.map_err(|e| ToolError::Failed(format!("cannot start the shell: {e}")))?;
    let mut group = ShellGroup::new(child)?;
    let mut reader = pipe::Receiver::from_owned_fd(OwnedFd::from(reader))
        .map_err(|e| ToolError::Failed(format!("cannot read the output pipe: {e}")))?;

    let mut output = CappedOutput::default();
    let mut buf = vec![0; READ_CHUNK];
    let mut eof = false;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let end = loop {
        tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => break End::Cancelled,
            () = &mut deadline => break End::TimedOut,
            read = reader.read(&mut buf), if !eof => match read {
                Ok(0) => eof = true,
                Ok(n) => output.push(&buf[..n]),
                Err(e) => {
                    tracing::warn!("reading the output of a Bash call: {e}");
                    eof = true;
                }
            },
            status = group.child.wait() => break End::Exited(status),
        }
    };
    group.kill();
    if matches!(end, End::Cancelled) {
        return Err(ToolError::Cancelled);
    }
    let drained = tokio::time::timeout(DRAIN_GRACE, async {
        while !eof {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => output.push(&buf[..n]),
            }
        }
    })
    .await;
    if matches!(end, End::TimedOut) {
        // Reaps the killed shell; should it hang (a process stuck in the kernel),
        // dropping the child leaves it to tokio's orphan reaper.
        let _ = tokio::time::timeout(DRAIN_GRACE, group.child.wait()).await;
    }
    group.live = false;

    let mut text = output.finish();
    if drained.is_err() {
        push_line(
            &mut text,
            "(stopped reading: a process that left the command's process group still holds its output open)",
        );
    }
    match end {
        End::Cancelled => Err(ToolError::Cancelled),
        End::TimedOut => {
            push_line(
                &mut text,
                &format!(
                    "timed out after {} ms; the command and every process it started were killed",
                    timeout.as_millis()
                ),
            );
            Err(ToolError::Failed(text))
        }
        End::Exited(Err(e)) => {
            push_line(&mut text, &format!("cannot wait for the shell: {e}"));
            Err(ToolError::Failed(text))
        }
        End::Exited(Ok(status)) if status.success() => {
            if text.is_empty() {
                text.push_str("(no output)");
            }
            Ok(text)
        }
        End::Exited(Ok(status)) => {
            let how = match (status.code(), status.signal()) {
                (Some(code), _) => format!("exit code {code}"),
                (None, Some(signal)) => match signal_name(signal) {
                    Some(name) => format!("killed by {name} (signal {signal})"),
                    None => format!("killed by signal {signal}"),
                },
                (None, None) => format!("ended abnormally: {status}"),
            };
            push_line(&mut text, &how);
            Err(ToolError::Failed(text))
        }
    }
}

/// Starts `shell -c command` in its own process group, stdout and stderr both on `out`.
fn spawn(shell: &str, command: &str, workspace: &Path, out: &PipeWriter) -> std::io::Result<Child> {
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
struct ShellGroup {
    child: Child,
    pgid: Pid,
    live: bool,
}

impl ShellGroup {
    fn new(child: Child) -> Result<Self, ToolError> {
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

    fn kill(&self) {
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

fn push_line(text: &mut String, line: &str) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(line);
}

fn signal_name(raw: i32) -> Option<&'static str> {
    const NAMES: [(Signal, &str); 15] = [
        (Signal::HUP, "SIGHUP"),
        (Signal::INT, "SIGINT"),
        (Signal::QUIT, "SIGQUIT"),
        (Signal::ILL, "SIGILL"),
        (Signal::TRAP, "SIGTRAP"),
        (Signal::ABORT, "SIGABRT"),
        (Signal::BUS, "SIGBUS"),
        (Signal::FPE, "SIGFPE"),
        (Signal::KILL, "SIGKILL"),
        (Signal::USR1, "SIGUSR1"),
        (Signal::SEGV, "SIGSEGV"),
        (Signal::USR2, "SIGUSR2"),
        (Signal::PIPE, "SIGPIPE"),
        (Signal::ALARM, "SIGALRM"),
        (Signal::TERM, "SIGTERM"),
    ];
    NAMES
        .iter()
        .find(|(signal, _)| signal.as_raw() == raw)
        .map(|(_, name)| *name)
}

/// Output decoded as UTF-8 (invalid bytes become U+FFFD) and capped: the first
/// [`HEAD_CHARS`] characters are kept, and of the rest only the last [`TAIL_CHARS`],
/// held in a buffer trimmed whenever it reaches twice that, so memory stays bounded
/// whatever the command writes.
#[derive(Debug, Default)]
struct CappedOutput {
    head: String,
    head_chars: usize,
    tail: String,
    tail_chars: usize,
    elided: usize,
    /// The start of a character split across reads (at most 3 bytes).
    partial: Vec<u8>,
}

impl CappedOutput {
    fn push(&mut self, bytes: &[u8]) {
        let joined;
        let mut rest = if self.partial.is_empty() {
            bytes
        } else {
            joined = [std::mem::take(&mut self.partial).as_slice(), bytes].concat();
            joined.as_slice()
        };
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    self.push_str(text);
                    return;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    self.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(len) => {
                            self.push_str("\u{FFFD}");
                            rest = &after[len..];
                        }
                        None => {
                            self.partial = after.to_vec();
                            return;
                        }
                    }
                }
            }
        }
    }

    fn push_str(&mut self, mut text: &str) {
        if self.head_chars < HEAD_CHARS {
            let room = HEAD_CHARS - self.head_chars;
            let split = text.char_indices().nth(room).map_or(text.len(), |(i, _)| i);
            let (head, rest) = text.split_at(split);
            self.head.push_str(head);
            self.head_chars += head.chars().count();
            text = rest;
        }
        if text.is_empty() {
            return;
        }
        self.tail.push_str(text);
        self.tail_chars += text.chars().count();
        if self.tail_chars >= 2 * TAIL_CHARS {
            self.trim_tail();
        }
    }

    fn trim_tail(&mut self) {
        let extra = self.tail_chars.saturating_sub(TAIL_CHARS);
        if extra == 0 {
            return;
        }
        let split = self
            .tail
            .char_indices()
            .nth(extra)
            .map_or(self.tail.len(), |(i, _)| i);
        self.tail.drain(..split);
        self.tail_chars -= extra;
        self.elided += extra;
    }

    /// The text: all of it, or the head, the elision line and the tail.
    fn finish(mut self) -> String {
        if !self.partial.is_empty() {
            self.partial.clear();
            self.push_str("\u{FFFD}");
        }
        self.trim_tail();
        let mut text = self.head;
        if self.elided > 0 {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!("... [{} characters elided] ...\n", self.elided));
        }
        text.push_str(&self.tail);
        text
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Instant;

    use serde_json::json;

    use super::*;
    use crate::protocol::SessionId;

    const DEADLINE: Duration = Duration::from_secs(10);

    fn workspace() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext::new(dir.path().canonicalize().unwrap(), SessionId::new());
        (dir, ctx)
    }

    async fn bash(ctx: &ToolContext, input: Value) -> Result<String, ToolError> {
        Bash.call(input, ctx).await
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
            Bash.call(
                json!({"command": "echo $$ > pid; sleep 100 & sleep 100; wait"}),
                &ctx,
            )
            .await
        });
        let pgid = wait_for_pid_file(dir.path().join("pid")).await;
        assert_group_running(pgid);
        cancel.cancel();
        let result = tokio::time::timeout(DEADLINE, call).await.unwrap().unwrap();
        assert!(matches!(result, Err(ToolError::Cancelled)), "{result:?}");
        assert_group_gone(pgid).await;
    }

    #[tokio::test]
    async fn an_abandoned_call_kills_the_whole_group() {
        let (dir, ctx) = workspace();
        let call = tokio::spawn(async move {
            Bash.call(
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
    fn output_under_the_cap_is_whole() {
        let mut out = CappedOutput::default();
        let text = "é".repeat(OUTPUT_CAP);
        for chunk in text.as_bytes().chunks(7) {
            out.push(chunk);
        }
        assert_eq!(out.finish(), text);
    }

    #[test]
    fn characters_split_across_reads_and_invalid_bytes_decode() {
        let mut out = CappedOutput::default();
        let snow = "☃".as_bytes();
        out.push(&snow[..1]);
        out.push(&snow[1..]);
        out.push(b"a\xffb");
        out.push(&snow[..2]);
        assert_eq!(out.finish(), "☃a\u{FFFD}b\u{FFFD}");
    }

    #[test]
    fn output_over_the_cap_counts_characters_not_bytes() {
        let mut out = CappedOutput::default();
        out.push("é".repeat(HEAD_CHARS).as_bytes());
        out.push("ü".repeat(10).as_bytes());
        out.push("ö".repeat(TAIL_CHARS).as_bytes());
        assert_eq!(
            out.finish(),
            format!(
                "{}\n... [10 characters elided] ...\n{}",
                "é".repeat(HEAD_CHARS),
                "ö".repeat(TAIL_CHARS)
            )
        );
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
        let expected = [
            ("PATH", "/usr/bin"),
            ("OPENAI_BASE_URL", "http://localhost/v1"),
            ("API_KEY_FILE", "kept"),
            ("GIT_TERMINAL_PROMPT", "0"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        assert_eq!(child_env(parent), expected);
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
        let schema = Bash.input_schema();
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
