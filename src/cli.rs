//! The command line: flags, configuration, one session, and the exit code. Output
//! goes to writers the caller passes (main passes stdout and stderr).
//!
//! `flags` holds what the command line accepts, `setup` what the flags and every
//! configuration source become (through [`crate::setup`]; `trust` asks the person
//! what only they may allow), `run` the running of a task (new or resumed), `resume` which run to resume, `sessions` the runs on record, `control`
//! the commands to a live run (`ps`, `steer`, `stop`, `kill`), `agents` the `agents`
//! subcommand, `descriptors` the process's limit on open files, and [`exit`] the
//! exit codes. This file only dispatches, through
//! writers that show every escape sequence as text ([`crate::ui::escape`]).

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

pub use self::descriptors::{CEILING as OPEN_FILES_CEILING, raise_open_files_limit};
use crate::tools::permissions::Approver;
pub use crate::ui::display::Progress;
use crate::ui::escape::Escaped;

mod agents;
mod control;
mod descriptors;
pub mod exit;
mod flags;
mod hooks;
mod interactive;
mod mcp;
mod open;
#[cfg(feature = "nats")]
mod remote;
mod resume;
mod rewind;
mod run;
mod sessions;
mod setup;
mod shown;
mod slash;
mod title;
mod trust;
#[cfg(feature = "nats")]
mod worker;

pub use self::flags::{AgentsAction, Cli, Command, McpAction, SessionsAction};

/// What a run needs besides its flags: who answers permission questions, how
/// progress is shown, the environment, Ctrl-C (`interrupt` resolves on each), and
/// where output goes.
pub(crate) struct Io<'a, E, I> {
    pub(crate) approver: Arc<dyn Approver>,
    pub(crate) progress: Progress,
    pub(crate) env: E,
    pub(crate) interrupt: I,
    pub(crate) out: &'a mut dyn Write,
    pub(crate) err: &'a mut dyn Write,
    /// The person's prompts at a terminal, for an interactive session.
    pub(crate) prompts: Option<Prompts>,
    /// Where the display records the labels the questions name.
    pub(crate) names: Option<crate::ui::Names>,
}

/// The lines a person types at the terminal, a paste as one (see
/// [`crate::ui::TerminalApprover::prompts`]); closed by Ctrl-D.
pub type Prompts = tokio::sync::mpsc::UnboundedReceiver<String>;

/// What the person does at the terminal: each Ctrl-C (`interrupt` resolves
/// on the next), and the lines they type (an interactive session's prompts,
/// when there is a terminal).
#[derive(Debug)]
pub struct Person<I> {
    /// Resolves on the next Ctrl-C.
    pub interrupt: I,
    /// Their prompts.
    pub prompts: Option<Prompts>,
    /// Where the live tree's labels go, for the questions put to them
    /// ([`crate::ui::TerminalApprover::names`]).
    pub names: Option<crate::ui::Names>,
}

/// Runs the CLI to its exit code. What the `person` types opens an
/// interactive session when no task is given.
pub async fn run<I>(
    cli: Cli,
    approver: Arc<dyn Approver>,
    progress: Progress,
    env: impl Fn(&str) -> Option<String>,
    person: Person<I>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> ExitCode
where
    I: FnMut() -> futures::future::BoxFuture<'static, ()>,
{
    // Whatever a model, a tool, a server or a file put in the text printed here,
    // it reaches the terminal as text, never as a command.
    let (mut out, mut err) = (Escaped::new(out), Escaped::new(err));
    let (out, err): (&mut dyn Write, &mut dyn Write) = (&mut out, &mut err);
    #[cfg(feature = "nats")]
    if matches!(cli.command, Some(Command::Worker { .. })) {
        return worker::run(cli, &env, err).await;
    }
    let op = match &cli.command {
        Some(Command::Agents { action }) => return agents::run(&cli, action, &env, out, err),
        Some(Command::Sessions { action }) => {
            return sessions::run(&cli, action.as_ref(), &env, out, err);
        }
        Some(Command::Ps { full }) => return control::ps(&cli, *full, &env, out, err).await,
        Some(Command::Rewind { id, to, force }) => {
            return rewind::run(&cli, id.as_deref(), *to, *force, &env, out, err);
        }
        Some(Command::Mcp { action }) => {
            return mcp::run(&cli, action, &env, approver, out, err).await;
        }
        Some(Command::Steer { agent, message }) => Some(control::Op::Steer {
            agent: agent.clone(),
            message: message.clone(),
        }),
        Some(Command::Stop { agent }) => Some(control::Op::Stop {
            agent: agent.clone(),
        }),
        Some(Command::Kill { agent }) => Some(control::Op::Kill {
            agent: agent.clone(),
        }),
        Some(Command::Approve { agent, answer, id }) => Some(control::Op::Approve {
            agent: agent.clone(),
            answer: answer.clone(),
            id: id.clone(),
        }),
        Some(Command::Resume { .. }) | None => None,
        #[cfg(feature = "nats")]
        Some(Command::Worker { .. }) => None,
    };
    if let Some(op) = op {
        return control::send(&cli, &env, op, out, err).await;
    }
    let io = Io {
        approver,
        progress,
        env,
        interrupt: person.interrupt,
        out,
        err,
        prompts: person.prompts,
        names: person.names,
    };
    match (&cli.command, cli.continue_with.clone()) {
        (Some(Command::Resume { id, prompt }), _) => {
            let (id, prompt) = (id.clone(), prompt.clone());
            resume::resume(cli, id, prompt, io).await
        }
        (_, Some(prompt)) => resume::resume(cli, None, Some(prompt), io).await,
        // At a terminal, with no task: an interactive session.
        (_, None)
            if io.prompts.is_some() && cli.task.as_ref().is_none_or(|t| t.trim().is_empty()) =>
        {
            open::session(cli, io).await
        }
        (_, None) => run::task(cli, io).await,
    }
}
