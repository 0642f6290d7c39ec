//! The command line: flags, configuration, one session, and the exit code. Output
//! goes to writers the caller passes (main passes stdout and stderr).
//!
//! `flags` holds what the command line accepts, `setup` and `providers` what the
//! flags and the configuration files become, `run` the running of a task, `agents`
//! the `agents` subcommand, and [`exit`] the exit codes. This file only dispatches.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use crate::tools::permissions::Approver;
pub use crate::ui::display::Progress;

mod agents;
pub mod exit;
mod flags;
mod providers;
mod run;
mod setup;

pub use self::flags::{AgentsAction, Cli, Command};

/// Runs the CLI to its exit code. `interrupt` resolves on each Ctrl-C.
pub async fn run<I>(
    cli: Cli,
    approver: Arc<dyn Approver>,
    progress: Progress,
    env: impl Fn(&str) -> Option<String>,
    interrupt: I,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> ExitCode
where
    I: FnMut() -> futures::future::BoxFuture<'static, ()>,
{
    if let Some(Command::Agents { action }) = &cli.command {
        return agents::run(&cli, action, &env, out, err);
    }
    run::task(cli, approver, progress, env, interrupt, out, err).await
}
