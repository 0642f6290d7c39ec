//! Opening an interactive session (`orchestrate` with no task at a
//! terminal): the prompt line until the first task, then the run driver,
//! which takes every line after (`interactive`).

use std::path::PathBuf;
use std::process::ExitCode;

use super::Io;
use super::flags::Cli;

/// Opens an interactive session: the prompt line until the first task (a
/// built-in command answered meanwhile), then the run, which takes every line
/// after. Ctrl-D, Ctrl-C or `/exit` before a task end it with nothing run.
pub(super) async fn session<E, I>(cli: Cli, mut io: Io<'_, E, I>) -> ExitCode
where
    E: Fn(&str) -> Option<String>,
    I: FnMut() -> futures::future::BoxFuture<'static, ()>,
{
    let Some((workspace, state)) = super::setup::state_or_say(&cli, &io.env, io.err) else {
        return ExitCode::from(super::exit::USAGE);
    };
    // What is typed before the first task is kept too (the run keeps that
    // task), its folder made and checked first, as a run makes it.
    let history = (state.prepare().ok())
        .map(|()| super::interactive::History::new(state.dir().join("history")));
    let home = (io.env)("HOME").map(PathBuf::from);
    for name in super::interactive::BUILTINS {
        if let Ok(Some(command)) = crate::commands::find(&workspace, home.as_deref(), name) {
            let _ = writeln!(
                io.err,
                "orchestrate: warning: {}: the built-in /{name} comes first; this command is not used",
                command.source.display()
            );
        }
    }
    let _ = writeln!(
        io.err,
        "orchestrate: type a task, then follow-ups; /help for more, Ctrl-D to quit"
    );
    let mut interrupted = (io.interrupt)();
    loop {
        let _ = write!(io.err, "{}", super::interactive::MARK);
        let _ = io.err.flush();
        let Some(prompts) = io.prompts.as_mut() else {
            return ExitCode::from(super::exit::USAGE);
        };
        let line = tokio::select! {
            line = prompts.recv() => line,
            () = &mut interrupted => None,
        };
        let Some(line) = line else {
            let _ = writeln!(io.err);
            return ExitCode::from(super::exit::DONE);
        };
        let read = super::interactive::read(&line);
        let keep = |line: &str| {
            if let Some(history) = &history {
                history.keep(line);
            }
        };
        if !matches!(read, super::interactive::Line::Prompt(_)) {
            keep(&line);
        }
        let said = match read {
            super::interactive::Line::Exit => return ExitCode::from(super::exit::DONE),
            super::interactive::Line::Nothing => continue,
            super::interactive::Line::Prompt(task) => {
                // A command file that cannot be read is said, and the prompt
                // line comes back, as it does for a follow-up.
                let named = crate::commands::split(&task)
                    .map(|(name, _)| crate::commands::find(&workspace, home.as_deref(), name));
                if let Some(Err(e)) = named {
                    keep(&line);
                    let _ = writeln!(io.err, "orchestrate: {e}");
                    continue;
                }
                return super::run::drive(cli, super::run::Lead::New(task), io).await;
            }
            super::interactive::Line::Help => {
                super::interactive::help(&crate::commands::list(&workspace, home.as_deref()))
            }
            super::interactive::Line::Bad(why) => format!("{why}\n"),
            super::interactive::Line::Agents
            | super::interactive::Line::Ps
            | super::interactive::Line::Cost
            | super::interactive::Line::Rewind(_) => {
                "nothing has run yet: type a task first\n".to_owned()
            }
        };
        let _ = write!(io.err, "{said}");
    }
}
