//! One command's life: the shell started through `group`, its output read into the
//! cap until the shell exits, the call times out or is cancelled, then the whole group
//! killed, what is left of the output drained, and the end reported after the output
//! (`exit code N`, the signal, the timeout). It does not check the input (the tool)
//! nor hold the processes' plumbing (`group`).

use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use rustix::process::Signal;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::time::Instant;

use super::confine::Confinement;
use super::group::start;
use super::output::CappedOutput;
use crate::error::ToolError;
use crate::tools::ToolContext;
use crate::tools::live::{Chunk, Live};

/// How long the output is still read once the group has been killed: only a process
/// that left the group (`setsid`) of a shell started without the launcher, or one
/// the kernel cannot kill at once, can hold the pipe open past that.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// The same for a cancelled call, which must end with its run.
const CANCEL_DRAIN: Duration = Duration::from_millis(500);
const READ_CHUNK: usize = 64 * 1024;

/// How the wait for the command ended.
enum End {
    Exited(std::io::Result<ExitStatus>),
    TimedOut,
    Cancelled,
}

pub(super) async fn run(
    confinement: &Confinement,
    command: &str,
    timeout: Duration,
    ctx: &ToolContext,
) -> Result<String, ToolError> {
    if let Some(why) = &confinement.refused {
        return Err(ToolError::Failed(why.clone()));
    }
    let workspace = &ctx.workspace;
    if !workspace.is_dir() {
        return Err(ToolError::Failed(format!(
            "the workspace {} is not a directory",
            workspace.display()
        )));
    }
    let (reader, writer) = std::io::pipe()
        .map_err(|e| ToolError::Failed(format!("cannot create the output pipe: {e}")))?;
    let started = start(confinement, command, ctx, &writer).await;
    // Only the child may hold the write end now, so the pipe reaches end-of-file when
    // the last process of the command is gone.
    drop(writer);
    let mut group =
        started.map_err(|e| ToolError::Failed(format!("cannot start the shell: {e}")))?;
    let mut reader = pipe::Receiver::from_owned_fd(OwnedFd::from(reader))
        .map_err(|e| ToolError::Failed(format!("cannot read the output pipe: {e}")))?;

    let mut output = CappedOutput::default();
    // The output as it comes goes to whoever watches the session's events.
    let mut live = ctx.events.as_ref().map(|_| Live::default());
    let tell = |chunk: Option<Chunk>| {
        if let (Some(Chunk { text, truncated }), Some(events)) = (chunk, &ctx.events) {
            events.publish(crate::protocol::EventKind::ToolOutput {
                call_id: ctx.call_id.clone(),
                text,
                truncated,
            });
        }
    };
    let mut buf = vec![0; READ_CHUNK];
    let mut eof = false;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    // One timer for the live output, set again only when what waits becomes
    // due at another time (once an event): a timer made at every read would
    // cost more than the reads.
    let flush = tokio::time::sleep(timeout);
    tokio::pin!(flush);
    let mut armed = None;
    let end = loop {
        let due = live.as_ref().and_then(Live::due);
        if let Some(at) = due.filter(|at| armed != Some(*at)) {
            flush.as_mut().reset(at);
        }
        armed = due;
        tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => break End::Cancelled,
            () = &mut deadline => break End::TimedOut,
            () = &mut flush, if armed.is_some() => {
                tell(live.as_mut().and_then(|l| l.flush(Instant::now())));
            }
            read = reader.read(&mut buf), if !eof => match read {
                Ok(0) => eof = true,
                Ok(n) => {
                    output.push(&buf[..n]);
                    tell(live.as_mut().and_then(|l| l.push(&buf[..n], Instant::now())));
                }
                Err(e) => {
                    tracing::warn!("reading the output of a Bash call: {e}");
                    eof = true;
                }
            },
            status = group.child.wait() => break End::Exited(status),
        }
    };
    group.kill();
    // A cancelled call hands back what it read within a shorter wait: the run
    // that cancelled it is ending.
    let grace = match end {
        End::Cancelled => CANCEL_DRAIN,
        End::Exited(_) | End::TimedOut => DRAIN_GRACE,
    };
    let drained = tokio::time::timeout(grace, async {
        while !eof {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => {
                    output.push(&buf[..n]);
                    tell(
                        live.as_mut()
                            .and_then(|l| l.push(&buf[..n], Instant::now())),
                    );
                }
            }
        }
    })
    .await;
    // What was read after the last event goes out before the call ends.
    tell(live.as_mut().and_then(|l| l.finish(Instant::now())));
    if matches!(end, End::TimedOut | End::Cancelled) {
        // Reaps the killed shell; should it hang (a process stuck in the kernel),
        // dropping the child leaves it to tokio's orphan reaper.
        let _ = tokio::time::timeout(grace, group.child.wait()).await;
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
        End::Cancelled if text.is_empty() => Err(ToolError::Cancelled),
        End::Cancelled => {
            push_line(
                &mut text,
                "the command and every process it started were killed",
            );
            Err(ToolError::CancelledWith(text))
        }
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
