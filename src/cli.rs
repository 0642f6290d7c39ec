//! The command line: flags, configuration, one session, and the exit code. Output
//! goes to writers the caller passes (main passes stdout and stderr).
//!
//! `flags` holds what the command line accepts, `setup` and `providers` what the
//! flags and the configuration files become, `run` the running of a task (new or
//! resumed), `resume` which run to resume, `sessions` the runs on record, `control`
//! the commands to a live run (`ps`, `steer`, `stop`, `kill`), `agents` the `agents`
//! subcommand, and [`exit`] the exit codes. This file only dispatches.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use crate::tools::permissions::Approver;
pub use crate::ui::display::Progress;

mod agents;
mod control;
pub mod exit;
mod flags;
mod providers;
mod resume;
mod run;
mod sessions;
mod setup;

pub use self::flags::{AgentsAction, Cli, Command, SessionsAction};

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
    match &cli.command {
        Some(Command::Agents { action }) => agents::run(&cli, action, &env, out, err),
        Some(Command::Sessions { action }) => sessions::run(&cli, action.as_ref(), out, err),
        Some(Command::Resume { id, prompt }) => {
            let (id, prompt) = (id.clone(), prompt.clone());
            resume::resume(
                cli, id, prompt, approver, progress, env, interrupt, out, err,
            )
            .await
        }
        Some(Command::Ps) => control::ps(&cli, out, err).await,
        Some(Command::Steer { agent, message }) => {
            let op = control::Op::Steer {
                agent: agent.clone(),
                message: message.clone(),
            };
            control::send(&cli, op, out, err).await
        }
        Some(Command::Stop { agent }) => {
            let op = control::Op::Stop {
                agent: agent.clone(),
            };
            control::send(&cli, op, out, err).await
        }
        Some(Command::Kill { agent }) => {
            let op = control::Op::Kill {
                agent: agent.clone(),
            };
            control::send(&cli, op, out, err).await
        }
        None => match cli.continue_with.clone() {
            Some(prompt) => {
                resume::resume(
                    cli,
                    None,
                    Some(prompt),
                    approver,
                    progress,
                    env,
                    interrupt,
                    out,
                    err,
                )
                .await
            }
            None => run::task(cli, approver, progress, env, interrupt, out, err).await,
        },
    }
}
