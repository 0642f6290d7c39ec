//! `orchestrate ps | steer | stop | kill`: requests to the workspace's live runs
//! over their control sockets ([`crate::control`]). Each request has a 2 s
//! deadline; no live run, or no agent of that name, is a one-line error and exit 1.

use std::io::Write;
use std::process::ExitCode;

use super::exit;
use super::flags::Cli;
use super::setup;
pub(super) use crate::control::Op;
use crate::control::{live_sockets, request};
use crate::protocol::SessionId;
use crate::state::SocketPath;

/// Prints the live tree of every live run of the workspace (`full`: each
/// question waiting whole).
pub(super) async fn ps(
    cli: &Cli,
    full: bool,
    env: &impl Fn(&str) -> Option<String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> ExitCode {
    let Some(sockets) = sockets(cli, env, err).await else {
        return ExitCode::from(exit::FAILED);
    };
    let mut code = exit::DONE;
    for (run, socket) in &sockets {
        match request(socket, &Op::Ps { full }).await {
            Ok(reply) if reply.ok => {
                let _ = write!(out, "run {run}\n{}", reply.text);
            }
            Ok(reply) => {
                let _ = writeln!(err, "orchestrate: run {run}: {}", reply.text);
                code = exit::FAILED;
            }
            Err(e) => {
                let _ = writeln!(err, "orchestrate: run {run}: {e}");
                code = exit::FAILED;
            }
        }
    }
    ExitCode::from(code)
}

/// Sends `op` to the live run that has the agent it names.
pub(super) async fn send(
    cli: &Cli,
    env: &impl Fn(&str) -> Option<String>,
    op: Op,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> ExitCode {
    let Some(sockets) = sockets(cli, env, err).await else {
        return ExitCode::from(exit::FAILED);
    };
    let mut why = Vec::new();
    for (run, socket) in &sockets {
        // With several live runs, each refusal says which run it is from.
        let run = match sockets.len() {
            1 => String::new(),
            _ => format!("run {run}: "),
        };
        match request(socket, &op).await {
            Ok(reply) if reply.ok => {
                let _ = writeln!(out, "{}", reply.text);
                return ExitCode::from(exit::DONE);
            }
            Ok(reply) => why.push(format!("{run}{}", reply.text)),
            Err(e) => why.push(format!("{run}{e}")),
        }
    }
    let _ = writeln!(err, "orchestrate: {}", why.join("; "));
    ExitCode::from(exit::FAILED)
}

/// The control sockets of the workspace's live runs, or `None` (said) when there
/// is none.
async fn sockets(
    cli: &Cli,
    env: &impl Fn(&str) -> Option<String>,
    err: &mut dyn Write,
) -> Option<Vec<(SessionId, SocketPath)>> {
    let (workspace, state) = setup::state_or_say(cli, env, err)?;
    let sockets = live_sockets(&state).await;
    if sockets.is_empty() {
        let _ = writeln!(
            err,
            "orchestrate: no live run in {} (start one with `orchestrate \"task\"`)",
            workspace.display()
        );
        return None;
    }
    Some(sockets)
}
