//! The `orchestrate` binary: harden the process (the launcher's mode, no dumps,
//! the keys out of the environment block), parse flags, set up tracing, run, map to
//! an exit code.

use std::process::ExitCode;

use clap::Parser;
use futures::FutureExt;
use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::sync::Arc;

use indicatif::{MultiProgress, ProgressDrawTarget};
use orchestrate::cli::{self, Cli};
use orchestrate::keys::{self, Keys, Taken};
use orchestrate::tools::bash::launcher;
use orchestrate::tools::permissions::{Approver, DenyAll};
use orchestrate::ui::TerminalApprover;

// Sessions allocate many small, short-lived buffers (SSE events, JSON chunks,
// messages); mimalloc serves them measurably faster than the system allocator
// (README, Performance).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Re-executed as a Bash command's launcher: that, and nothing else. First, while
    // the process has a single thread.
    if let Some(launched) = launcher::run_if_asked() {
        return launched.finish(&mut std::io::stdout(), &mut std::io::stderr());
    }
    // Not dumpable: a process without privileges over this one (a Bash command in a
    // user namespace of its own, or one of another user) cannot read its memory,
    // descriptors or environment.
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    // No transparent huge pages: mimalloc asks for them, and a 2 MiB page is
    // resident as soon as one byte of it is touched, which at a thousand agents
    // held a third of the process's memory for nothing (README, Performance).
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    // A socket and a journal per live sub-agent: the usual soft limit of 1 024
    // descriptors would stop a fan-out near five hundred.
    let _ = cli::raise_open_files_limit();
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let keys = match keys::take_from_environment(&keys::configured_names(home.as_deref())) {
        Taken::Held(keys) => keys,
        Taken::Failed(keys, why) => {
            eprintln!("orchestrate: warning: {why}");
            keys
        }
    };
    launcher::enable();
    // A child subreaper: whatever an agent's command or an MCP server starts, even
    // through a double fork, stays a descendant of this process, which is how the
    // control socket tells the run's own processes from the person's.
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("orchestrate: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(keys))
}

async fn run(keys: Keys) -> ExitCode {
    let args = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    // A panic inside an actor is a supervision event, not something to show a person:
    // it goes to the log (RUST_LOG) and the supervisor decides what happens next.
    // A panic on the main thread is a bug in the command itself: say so in one line.
    std::panic::set_hook(Box::new(|info| {
        tracing::error!(%info, "panic");
        if std::thread::current().name() == Some("main") {
            eprintln!("orchestrate: internal error: {info}");
        }
    }));
    let interrupt = || {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
        .boxed()
    };
    // A person at a terminal is asked about edits and commands; anywhere else
    // (a pipe, CI) those calls are refused with a message naming the flag to pass.
    let terminal = std::io::stderr().is_terminal();
    let live = terminal.then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
    // With no task on a terminal, the session is interactive: what the person
    // types while no question is on screen is a prompt, a paste one prompt.
    let interactive = args.task.is_none() && args.command.is_none() && args.continue_with.is_none();
    let mut prompts = None;
    let mut names = None;
    let approver: Arc<dyn Approver> = if std::io::stdin().is_terminal()
        && terminal
        && let Ok(input) = std::io::stdin().as_fd().try_clone_to_owned()
    {
        let asking = TerminalApprover::new(Box::new(std::io::stderr()), input, live.clone());
        if interactive {
            prompts = asking.prompts();
        }
        names = Some(asking.names());
        Arc::new(asking)
    } else {
        Arc::new(DenyAll)
    };
    // Pasted text comes marked, so that its lines are one prompt.
    let pasting = prompts.is_some();
    if pasting {
        eprint!("{PASTE_ON}");
    }
    let progress = match live {
        Some(multi) => cli::Progress::Live(multi),
        None => cli::Progress::Plain,
    };
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    let code = cli::run(
        args,
        approver,
        progress,
        |k| keys.get(k).or_else(|| std::env::var(k).ok()),
        cli::Person {
            interrupt,
            prompts,
            names,
        },
        &mut out,
        &mut err,
    )
    .await;
    if pasting {
        eprint!("{PASTE_OFF}");
    }
    code
}

/// A terminal's bracketed paste, on and off.
const PASTE_ON: &str = "\x1b[?2004h";
const PASTE_OFF: &str = "\x1b[?2004l";
