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

/// Prints the live tree of every live run of the workspace.
pub(super) async fn ps(cli: &Cli, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    let Some(sockets) = sockets(cli, err).await else {
        return ExitCode::from(exit::FAILED);
    };
    let mut code = exit::DONE;
    for socket in &sockets {
        let run = run_of(socket);
        match request(socket, &Op::Ps).await {
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
pub(super) async fn send(cli: &Cli, op: Op, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    let Some(sockets) = sockets(cli, err).await else {
        return ExitCode::from(exit::FAILED);
    };
    let mut why = Vec::new();
    for socket in &sockets {
        // With several live runs, each refusal says which run it is from.
        let run = match sockets.len() {
            1 => String::new(),
            _ => format!("run {}: ", run_of(socket)),
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
async fn sockets(cli: &Cli, err: &mut dyn Write) -> Option<Vec<std::path::PathBuf>> {
    let workspace = match setup::workspace(cli) {
        Ok(workspace) => workspace,
        Err(e) => {
            let _ = writeln!(err, "orchestrate: {e}");
            return None;
        }
    };
    let sockets = live_sockets(&workspace).await;
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

fn run_of(socket: &std::path::Path) -> String {
    socket
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}
