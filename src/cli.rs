//! The command line: flags, configuration, one session, and the exit code. Output
//! goes to writers the caller passes (main passes stdout and stderr).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use clap::Parser;

use crate::error::ConfigError;
#[cfg(feature = "test-support")]
use crate::faults::FaultPlan;
use crate::models::Models;
use crate::protocol::{Event, EventKind, Outcome};
use crate::roles::catalog::{self, Catalog};
use crate::roles::watch::{self, Reload, RoleWatcher};
use crate::runtime::{Handle, Runtime, RuntimeConfig};
use crate::session::{DEFAULT_MAX_TURNS, SessionSpec};
use crate::task::{self, Caller, Task, TaskEnv};
use crate::tools::ToolRegistry;
use crate::tools::permissions::{Approver, PermissionMode};
use crate::ui::display::Display;
pub use crate::ui::display::Progress;

mod providers;

/// Exit codes (DESIGN §8).
pub mod exit {
    /// The task finished.
    pub const DONE: u8 = 0;
    /// The task failed.
    pub const FAILED: u8 = 1;
    /// Bad usage or configuration.
    pub const USAGE: u8 = 2;
    /// Cancelled by the user.
    pub const CANCELLED: u8 = 130;
}

/// Run a task with an LLM agent in a repository.
#[derive(Debug, Parser)]
#[command(name = "orchestrate", version, about)]
pub struct Cli {
    /// What to do instead of running a task.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The task, in plain words.
    pub task: Option<String>,
    /// Work in DIR instead of the current directory.
    #[arg(short = 'C', value_name = "DIR", global = true)]
    pub workspace: Option<PathBuf>,
    /// A directory of role files searched last (later roles replace earlier ones).
    #[arg(long, value_name = "DIR", global = true)]
    pub agents_dir: Option<PathBuf>,
    /// openai, anthropic, replay, or a provider named in orchestrate.toml (default:
    /// openai for --base-url; else the file's; else by the keys set:
    /// ANTHROPIC_API_KEY, then OPENAI_API_KEY / OPENAI_BASE_URL).
    #[arg(long, value_name = "NAME")]
    pub provider: Option<String>,
    /// The provider's API root: with /v1 for OpenAI-compatible servers, the bare host
    /// for Anthropic [env: OPENAI_BASE_URL, ANTHROPIC_BASE_URL].
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Model id or alias [env: ORCHESTRATE_MODEL].
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// Record every provider request and its raw response to this JSONL cassette.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Answer every provider request from this cassette, with no network.
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// Print one JSON event per line instead of the answer.
    #[arg(long)]
    pub json: bool,
    /// What tools may do without asking: default (asks for edits and commands),
    /// acceptEdits (asks for commands), plan (read-only), bypassPermissions.
    #[arg(long, value_name = "MODE", default_value = "default", value_parser = parse_mode)]
    pub permission_mode: PermissionMode,
    /// Run this role instead of the orchestrator.
    #[arg(long, value_name = "NAME", default_value = "orchestrator")]
    pub agent: String,
    /// Sub-agents running at once at each level across the run; the rest wait in order.
    #[arg(long, value_name = "N", default_value_t = task::DEFAULT_MAX_PARALLEL)]
    pub max_parallel: usize,
    /// Levels of sub-agents below the lead (0: no sub-agents).
    #[arg(long, value_name = "N", default_value_t = task::DEFAULT_MAX_DEPTH)]
    pub max_depth: u32,
    /// Print only the final answer.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Model turns allowed before the run fails (a role's maxTurns wins).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_TURNS)]
    pub max_turns: u32,
    /// Requests made at most for one model turn.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub max_attempts: u32,
    /// Seconds without a streamed event before a stream counts as stalled.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub idle_timeout: u64,
    /// First retry backoff in milliseconds (doubles each attempt).
    #[arg(long, value_name = "MS", default_value_t = 500, hide = true)]
    pub retry_base_ms: u64,
    /// Supervision drill: the session panics when it reaches this turn…
    /// (only in builds with the `test-support` feature, which the tests enable)
    #[cfg(feature = "test-support")]
    #[arg(long, value_name = "TURN", hide = true)]
    pub inject_panic_at_turn: Option<u32>,
    /// …this many times (restarts included).
    #[cfg(feature = "test-support")]
    #[arg(long, value_name = "N", default_value_t = 1, hide = true)]
    pub inject_panics: u32,
}

/// Subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Inspect the agent roles: built-in, the user's, the workspace's.
    Agents {
        /// What to do with them.
        #[command(subcommand)]
        action: AgentsAction,
    },
}

/// `orchestrate agents …`
#[derive(Debug, clap::Subcommand)]
pub enum AgentsAction {
    /// List every role with where it comes from.
    List,
    /// Show one role: its settings and its prompt.
    Show {
        /// The role's name.
        name: String,
    },
    /// Check every role file; exits 1 and lists every problem if there is one.
    Check,
}

/// Runs the CLI to its exit code. `interrupt` resolves on each Ctrl-C.
pub async fn run<I>(
    cli: Cli,
    approver: Arc<dyn Approver>,
    progress: Progress,
    env: impl Fn(&str) -> Option<String>,
    mut interrupt: I,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> ExitCode
where
    I: FnMut() -> futures::future::BoxFuture<'static, ()>,
{
    if let Some(Command::Agents { action }) = &cli.command {
        return agents(&cli, action, &env, out, err);
    }
    if cli.task.as_deref().is_none_or(|t| t.trim().is_empty()) {
        let _ = writeln!(
            err,
            "orchestrate: no task given: run `orchestrate \"what to do\"` (or `orchestrate --help`)"
        );
        return ExitCode::from(exit::USAGE);
    }
    let setup = match setup(&cli, &env, approver) {
        Ok(setup) => setup,
        Err(e) => {
            let _ = writeln!(err, "orchestrate: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let (config, plan) = setup;
    // A broken role file is never skipped in silence, nor an ignored field.
    for problem in &plan.catalog.problems {
        let _ = writeln!(err, "orchestrate: warning: {problem}");
    }
    for warning in &plan.catalog.warnings {
        let _ = writeln!(err, "orchestrate: warning: {warning}");
    }
    for note in plan
        .catalog
        .roles()
        .filter_map(|r| plan.models.inherit_note(r))
    {
        let _ = writeln!(err, "orchestrate: warning: {note}");
    }
    let runtime = match Runtime::start(config).await {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = writeln!(err, "orchestrate: {e}");
            return ExitCode::from(exit::FAILED);
        }
    };
    let no_color = env("NO_COLOR").is_some_and(|v| !v.is_empty());
    let colors: std::collections::HashMap<String, String> = if no_color {
        std::collections::HashMap::new()
    } else {
        plan.catalog
            .roles()
            .filter_map(|r| Some((r.name.clone(), r.color.clone()?)))
            .collect()
    };
    let (spec, mut watcher) = match lead_spec(&cli, plan, runtime.handle()) {
        Ok(lead) => lead,
        Err(e) => {
            let _ = writeln!(err, "orchestrate: {e}");
            runtime.shutdown().await;
            return ExitCode::from(exit::USAGE);
        }
    };
    // Role files that break (or gain ignored fields) during the run are shown as
    // they are found.
    let mut events = runtime.subscribe();
    let id = match runtime.start_session(spec).await {
        Ok(id) => id,
        Err(e) => {
            let _ = writeln!(err, "orchestrate: {e}");
            runtime.shutdown().await;
            return ExitCode::from(exit::FAILED);
        }
    };
    let prompt = runtime.prompt(id, cli.task.clone().unwrap_or_default());
    let mut interrupts = 0;
    let mut ctrl_c = interrupt();
    let mode = if cli.json || cli.quiet {
        Progress::Off
    } else {
        progress
    };
    let mut display = Display::new(mode, colors);
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    // Sessions that started and have not ended yet: sub-agents cancelled with the
    // lead end a moment after it, and their ends are worth showing.
    let mut open = std::collections::HashSet::new();
    let outcome = loop {
        tokio::select! {
            event = events.recv() => {
                let Some(event) = event else { break None };
                if cli.json {
                    print_json(out, &event);
                }
                display.show(&event, err);
                track(&mut open, &event);
                if event.session == id && let Some(outcome) = event.kind.answer_to(prompt) {
                    break Some(outcome.clone());
                }
            }
            _ = tick.tick() => display.refresh(),
            Some(reload) = reloaded(watcher.as_mut()) => display.reloaded(&reload, err),
            () = &mut ctrl_c => {
                interrupts += 1;
                if interrupts > 1 {
                    // Exit now, but not before what is journaled reaches the disk.
                    let _ = tokio::time::timeout(Duration::from_secs(1), runtime.sync_journals()).await;
                    let _ = writeln!(err, "orchestrate: interrupted");
                    return ExitCode::from(exit::CANCELLED);
                }
                runtime.cancel(id);
                ctrl_c = interrupt();
            }
        }
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while !open.is_empty() {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(event)) => {
                if cli.json {
                    print_json(out, &event);
                }
                display.show(&event, err);
                track(&mut open, &event);
            }
            Ok(None) | Err(_) => break,
        }
    }
    runtime.shutdown().await;
    display.finish(err);
    report(cli.json, outcome, out, err)
}

/// The watcher's next report; never, without a watcher.
async fn reloaded(watcher: Option<&mut RoleWatcher>) -> Option<Reload> {
    match watcher {
        Some(watcher) => watcher.reloaded().await,
        None => std::future::pending().await,
    }
}

/// Keeps the set of sessions that started and have not ended.
fn track(open: &mut std::collections::HashSet<crate::protocol::SessionId>, event: &Event) {
    if matches!(event.kind, EventKind::SessionStarted { .. }) {
        open.insert(event.session);
    } else if matches!(event.kind, EventKind::Terminal { .. }) {
        open.remove(&event.session);
    }
}

fn setup(
    cli: &Cli,
    env: &impl Fn(&str) -> Option<String>,
    approver: Arc<dyn Approver>,
) -> Result<(RuntimeConfig, Plan), ConfigError> {
    let workspace = workspace(cli)?;
    let models = providers::models(cli, &workspace, env)?;
    let mut config = RuntimeConfig::new(workspace, models.default_provider());
    config.approver = approver;
    config.retry.max_attempts = cli.max_attempts.max(1);
    config.retry.base_delay = Duration::from_millis(cli.retry_base_ms);
    let (dirs, catalog) = roles(cli, &config.workspace, env);
    // A role naming an alias nobody declared would fail at its first spawn.
    if let Some(error) = catalog
        .roles()
        .find_map(|role| models.for_role(role, &models.lead()).err())
    {
        return Err(error);
    }
    Ok((
        config,
        Plan {
            models: Arc::new(models),
            catalog,
            dirs,
        },
    ))
}

/// What the run needs once the runtime is up.
struct Plan {
    models: Arc<Models>,
    catalog: Catalog,
    /// Where the roles came from, watched for changes during the run.
    dirs: Vec<PathBuf>,
}

/// The lead's session: its role, its tools (with Task, when delegation is allowed),
/// and the run-wide sub-agent settings.
fn lead_spec(
    cli: &Cli,
    plan: Plan,
    handle: Handle,
) -> Result<(SessionSpec, Option<RoleWatcher>), String> {
    let Some(role) = plan.catalog.get(&cli.agent).cloned() else {
        let names: Vec<&str> = plan.catalog.roles().map(|r| r.name.as_str()).collect();
        return Err(format!(
            "no role named {:?} (roles: {}); see `orchestrate agents list`",
            cli.agent,
            names.join(", ")
        ));
    };
    let model = plan
        .models
        .for_role(&role, &plan.models.lead())
        .map_err(|e| e.to_string())?;
    let permission_mode = role
        .permission_mode
        .unwrap_or(cli.permission_mode)
        .narrowed_by(cli.permission_mode);
    let standard = ToolRegistry::standard();
    let mut offered: Vec<&str> = standard.names();
    offered.push("Task");
    let allowed = role.allowed_tools(&offered);
    let mut tools = standard.only(&allowed);
    let mut watcher = None;
    if cli.max_depth > 0 && allowed.contains(&"Task") {
        let catalog = Arc::new(RwLock::new(plan.catalog));
        // A role edited during the run is used by its next spawn.
        match watch::watch(&plan.dirs, catalog.clone()) {
            Ok(w) => watcher = Some(w),
            Err(e) => tracing::warn!(error = %e, "roles will not be reloaded during this run"),
        }
        let env = Arc::new(
            TaskEnv::new(
                handle,
                catalog,
                cli.max_parallel,
                cli.max_depth,
                ToolRegistry::standard(),
            )
            .with_models(plan.models.clone()),
        );
        let caller = Caller {
            depth: 0,
            model: model.clone(),
            permission_mode,
            tools: allowed.iter().map(|t| (*t).to_owned()).collect(),
            place: role.name.clone(),
        };
        tools = tools.with(Task::new(env, caller));
    }
    let mut spec = SessionSpec::new(role.name.clone(), model.id, role.prompt.clone());
    spec.provider = model.provider;
    spec.tools = tools;
    spec.max_turns = role.max_turns.unwrap_or(cli.max_turns).max(1);
    spec.permission_mode = permission_mode;
    #[cfg(feature = "test-support")]
    {
        spec.faults = cli
            .inject_panic_at_turn
            .map(|turn| FaultPlan::panic_at(turn, cli.inject_panics));
    }
    Ok((spec, watcher))
}

fn workspace(cli: &Cli) -> Result<PathBuf, ConfigError> {
    if let Some(dir) = &cli.agents_dir
        && !dir.is_dir()
    {
        return Err(ConfigError::AgentsDir {
            path: dir.display().to_string(),
            reason: "not a directory".into(),
        });
    }
    let dir = match &cli.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().map_err(|e| ConfigError::Workspace {
            path: ".".into(),
            reason: e.to_string(),
        })?,
    };
    let dir = dir.canonicalize().map_err(|e| ConfigError::Workspace {
        path: dir.display().to_string(),
        reason: e.to_string(),
    })?;
    if !dir.is_dir() {
        return Err(ConfigError::Workspace {
            path: dir.display().to_string(),
            reason: "not a directory".into(),
        });
    }
    Ok(dir)
}

/// The role folders searched for `workspace` (with `--agents-dir` and `$HOME`),
/// and the roles found in them.
fn roles(
    cli: &Cli,
    workspace: &Path,
    env: &impl Fn(&str) -> Option<String>,
) -> (Vec<PathBuf>, Catalog) {
    let home = env("HOME").map(PathBuf::from);
    let dirs = catalog::search_dirs(workspace, home.as_deref(), cli.agents_dir.as_deref());
    let catalog = Catalog::load(&dirs);
    (dirs, catalog)
}

/// `orchestrate agents list | show NAME | check`.
fn agents(
    cli: &Cli,
    action: &AgentsAction,
    env: &impl Fn(&str) -> Option<String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> ExitCode {
    let workspace = match workspace(cli) {
        Ok(dir) => dir,
        Err(e) => {
            let _ = writeln!(err, "orchestrate: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let (_, catalog) = roles(cli, &workspace, env);
    match action {
        AgentsAction::List => {
            for role in catalog.roles() {
                let summary = role
                    .description
                    .split(". ")
                    .next()
                    .unwrap_or(&role.description);
                let _ = writeln!(
                    out,
                    "{:<14} {}  [{}]",
                    role.name,
                    summary.trim_end_matches('.'),
                    role.source
                );
            }
            for problem in &catalog.problems {
                let _ = writeln!(err, "orchestrate: {problem}");
            }
            ExitCode::from(if catalog.problems.is_empty() {
                exit::DONE
            } else {
                exit::FAILED
            })
        }
        AgentsAction::Show { name } => match catalog.get(name) {
            Some(role) => {
                let _ = write!(out, "{}", crate::ui::role_card(role));
                ExitCode::from(exit::DONE)
            }
            None => {
                let names: Vec<&str> = catalog.roles().map(|r| r.name.as_str()).collect();
                let _ = writeln!(
                    err,
                    "orchestrate: no role named {name:?} (roles: {})",
                    names.join(", ")
                );
                ExitCode::from(exit::FAILED)
            }
        },
        AgentsAction::Check => {
            for warning in &catalog.warnings {
                let _ = writeln!(out, "warning: {warning}");
            }
            for problem in &catalog.problems {
                let _ = writeln!(out, "{problem}");
            }
            let roles = catalog.roles().count();
            if catalog.problems.is_empty() {
                let _ = writeln!(out, "{roles} roles, no problems");
                ExitCode::from(exit::DONE)
            } else {
                let n = catalog.problems.len();
                let _ = writeln!(
                    out,
                    "{n} problem{} in the role files",
                    if n == 1 { "" } else { "s" }
                );
                ExitCode::from(exit::FAILED)
            }
        }
    }
}

fn parse_mode(value: &str) -> Result<PermissionMode, String> {
    value.parse()
}

fn print_json(out: &mut dyn Write, event: &Event) {
    if let Ok(line) = serde_json::to_string(event) {
        // A closed pipe (`| head`) is not an error worth reporting.
        let _ = writeln!(out, "{line}");
    }
}

fn report(
    json: bool,
    outcome: Option<Outcome>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> ExitCode {
    match outcome {
        Some(Outcome::Finished {
            text, truncated, ..
        }) => {
            if !json {
                let _ = writeln!(out, "{text}");
            }
            if truncated {
                let _ = writeln!(
                    err,
                    "orchestrate: the answer was cut at the model's output limit"
                );
            }
            let _ = out.flush();
            ExitCode::from(exit::DONE)
        }
        Some(Outcome::Failed {
            message, partial, ..
        }) => {
            if !json && !partial.is_empty() {
                let _ = writeln!(out, "{partial}");
            }
            let _ = writeln!(err, "orchestrate: {message}");
            ExitCode::from(exit::FAILED)
        }
        Some(Outcome::Cancelled { partial, .. }) => {
            if !json && !partial.is_empty() {
                let _ = writeln!(out, "{partial}");
            }
            let _ = writeln!(err, "orchestrate: cancelled");
            ExitCode::from(exit::CANCELLED)
        }
        None => {
            let _ = writeln!(err, "orchestrate: the session ended without a result");
            ExitCode::from(exit::FAILED)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    #[test]
    fn the_help_text() {
        let help = Cli::command().term_width(100).render_help().to_string();
        insta::assert_snapshot!(help);
    }
}
