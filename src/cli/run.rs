//! Running one task, or resuming a run: the runtime started, the lead session built
//! and prompted (or resumed from its journal), the run's lock held, its events
//! shown until it answers (Ctrl-C cancels it, a second Ctrl-C exits), and the
//! outcome reported as the answer and an exit code. It does not parse flags nor
//! read configuration (`flags`, `setup`), nor find runs (`resume`).

use std::process::ExitCode;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::flags::Cli;
use super::setup;
use super::shown::{Drained, Shown, ends_run, prompts_of, report};
use super::{Io, exit};
use crate::control::Control;
#[cfg(feature = "test-support")]
use crate::faults::FaultPlan;
use crate::git::checkpoint::Checkpoints;
use crate::protocol::SessionId;
use crate::roles::watch::{self, Reload, RoleWatcher};
use crate::runs::lock::RunLock;
use crate::runtime::{Handle, Runtime};
use crate::session::SessionSpec;
use crate::session::budget::{Budget, RunMeter};
use crate::setup::Setup;
use crate::task::{Caller, TaskEnv};
use crate::ui::display::{Display, Progress};

/// How often the progress shows the events that arrived since its last frame.
const FRAME: Duration = Duration::from_millis(50);

/// The most events one frame shows; a longer backlog is shown over the next
/// rounds at once, with Ctrl-C and the run's end heard between them.
const FRAME_EVENTS: usize = 1024;

/// Which lead a run drives.
#[derive(Debug)]
pub(super) enum Lead {
    /// A new run of this task.
    New(String),
    /// A run resumed from its journal, with a follow-up prompt or not.
    Resume {
        /// The run (its lead session's id).
        run: SessionId,
        /// The lead's role.
        role: String,
        /// The follow-up.
        prompt: Option<String>,
        /// What the run had spent, when it is carried on (not followed up):
        /// its budget is what is left.
        carried: Option<crate::runs::spent::Spent>,
    },
}

impl Lead {
    /// The same run, asked `prompt` instead.
    fn asking(self, prompt: String) -> Self {
        match self {
            Self::New(_) => Self::New(prompt),
            Self::Resume {
                run, role, carried, ..
            } => Self::Resume {
                run,
                role,
                prompt: Some(prompt),
                carried,
            },
        }
    }
}

/// Runs the task the flags name to its exit code.
pub(super) async fn task<E, I>(cli: Cli, io: Io<'_, E, I>) -> ExitCode
where
    E: Fn(&str) -> Option<String>,
    I: FnMut() -> futures::future::BoxFuture<'static, ()>,
{
    let Some(task) = cli.task.clone().filter(|t| !t.trim().is_empty()) else {
        let _ = writeln!(
            io.err,
            "orchestrate: no task given: run `orchestrate \"what to do\"` (or `orchestrate --help`)"
        );
        return ExitCode::from(exit::USAGE);
    };
    drive(cli, Lead::New(task), io).await
}

/// Drives a run to its end and reports it.
pub(super) async fn drive<E, I>(cli: Cli, lead: Lead, io: Io<'_, E, I>) -> ExitCode
where
    E: Fn(&str) -> Option<String>,
    I: FnMut() -> futures::future::BoxFuture<'static, ()>,
{
    let Io {
        approver,
        progress,
        env,
        mut interrupt,
        out,
        err,
        prompts,
        names,
    } = io;
    let setup = match setup::prepare(&cli, &env, approver).await {
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
    for warning in plan.catalog.warnings.iter().chain(&plan.notes) {
        let _ = writeln!(err, "orchestrate: warning: {warning}");
    }
    for note in plan.sandbox_notes.iter().chain(&plan.memory.warnings) {
        let _ = writeln!(err, "orchestrate: warning: {note}");
    }
    for note in plan
        .catalog
        .roles()
        .filter_map(|r| plan.models.inherit_note(r))
    {
        let _ = writeln!(err, "orchestrate: warning: {note}");
    }
    if !matches!(lead, Lead::Resume { .. }) {
        super::setup::warn_of_old_state(&config.workspace, err);
    }
    let state = plan.state.clone();
    // Before anything is written there (the run's lock), the state folder is
    // made and checked: one that is a symlink or another user's is refused.
    if let Err(e) = state.prepare() {
        let _ = writeln!(err, "orchestrate: journal: {e}");
        return ExitCode::from(exit::FAILED);
    }
    // A resumed run is refused before anything starts if another process runs it.
    let mut lock = match &lead {
        Lead::Resume { run, .. } => match RunLock::acquire(&state, *run) {
            Ok(lock) => Some(lock),
            Err(e) => {
                let _ = writeln!(err, "orchestrate: {e}");
                return ExitCode::from(exit::USAGE);
            }
        },
        Lead::New(_) => None,
    };
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
    let role = match &lead {
        Lead::New(_) => cli.agent.clone(),
        Lead::Resume { role, .. } => role.clone(),
    };
    // The lead's first request offers the MCP servers' tools: wait for each
    // server to start or fail (each within its own time limit).
    let mcp = runtime.mcp();
    mcp.settled().await;
    for config in mcp.configs() {
        if let Some(crate::mcp::State::Failed { reason }) = mcp.state(&config.name) {
            let _ = writeln!(
                err,
                "orchestrate: warning: MCP server {:?} did not start: {reason}; the run goes on without it",
                config.name
            );
        }
    }
    let carried = match &lead {
        Lead::Resume { carried, .. } => carried.clone(),
        Lead::New(_) => None,
    };
    // Before the run's first change, and before each merge into it, the
    // workspace is checkpointed (in a git repository).
    let checkpoints = Arc::new(Checkpoints::new(
        plan.workspace
            .canonicalize()
            .unwrap_or_else(|_| plan.workspace.clone()),
        state.scratch(),
        state
            .private()
            .into_iter()
            .map(|p| p.canonicalize().unwrap_or(p))
            .collect(),
        state.dir().join("checkpoints"),
    ));
    checkpoints.locate().await;
    // A task (or a follow-up) that names a slash command runs the command.
    // An interactive session keeps what the person typed first in its history.
    let typed_first = match &lead {
        Lead::New(task) if prompts.is_some() => Some(task.clone()),
        _ => None,
    };
    let asked = match &lead {
        Lead::New(task) => Some(task.clone()),
        Lead::Resume { prompt, .. } => prompt.clone(),
    };
    let (lead, slash) = match asked {
        Some(task) => {
            let home = env("HOME").map(std::path::PathBuf::from);
            let found = super::slash::slash(
                &task,
                &plan.workspace,
                home.as_deref(),
                cli.trust_workspace,
                err,
            )
            .await;
            match found {
                Ok(Some(slash)) => (lead.asking(slash.prompt.clone()), Some(slash)),
                Ok(None) => (lead, None),
                Err(e) => {
                    let _ = writeln!(err, "orchestrate: {e}");
                    runtime.shutdown().await;
                    return ExitCode::from(exit::USAGE);
                }
            }
        }
        None => (lead, None),
    };
    let lead = (lead, checkpoints.clone());
    let hooks = plan.hooks.clone();
    let workspace = plan.workspace.clone();
    let workspace_for_lines = plan.workspace.clone();
    // A title for the run's first prompt, when the person's own file asks
    // for one; never in a replay.
    // Of the task as given (a command's body), not of what hooks add to it.
    let titling = match &lead.0 {
        Lead::New(task) if plan.titles && cli.replay.is_none() && cli.record.is_none() => {
            Some((plan.models.clone(), task.clone()))
        }
        _ => None,
    };
    let roles: Vec<(String, String)> = (plan.catalog.roles())
        .map(|r| (r.name.clone(), r.description.clone()))
        .collect();
    // The lead's id comes first: the person's prompt goes through its
    // SessionStart and UserPromptSubmit hooks before anything of the run is
    // kept, so that a prompt they refuse leaves no run behind.
    let (lead_id, prompt) = match &lead.0 {
        Lead::New(task) => (SessionId::new(), Some(task.clone())),
        Lead::Resume { run, prompt, .. } => (*run, prompt.clone()),
    };
    #[cfg(feature = "nats")]
    let (launcher, remote) =
        match super::remote::launcher(&cli, &env, &plan, runtime.handle(), lead_id).await {
            Ok(Some((launcher, remote, note))) => {
                if let Some(note) = note {
                    let _ = writeln!(err, "orchestrate: {note}");
                }
                (Some(launcher), Some(remote))
            }
            Ok(None) => (None, None),
            Err(e) => {
                let _ = writeln!(err, "orchestrate: {e}");
                runtime.shutdown().await;
                return ExitCode::from(exit::FAILED);
            }
        };
    #[cfg(not(feature = "nats"))]
    let launcher = None;
    let made = lead_spec(
        &cli,
        &role,
        plan,
        runtime.handle(),
        carried,
        (&lead.1, slash.as_ref(), launcher),
    );
    let (spec, mut watcher) = match made {
        Ok(lead) => lead,
        Err(e) => {
            let _ = writeln!(err, "orchestrate: {e}");
            runtime.shutdown().await;
            return ExitCode::from(exit::USAGE);
        }
    };
    // The `small` model writes the title, else the lead's.
    let titler = titling.map(|(models, task)| match models.small() {
        Some(small) => super::title::Titler {
            provider: small.provider.unwrap_or_else(|| models.default_provider()),
            info: models.info(&small.id),
            model: small.id,
            task,
        },
        None => super::title::Titler {
            provider: spec
                .provider
                .clone()
                .unwrap_or_else(|| models.default_provider()),
            model: spec.model.clone(),
            info: spec.model_info,
            task,
        },
    });
    if cli.max_cost.is_some() && spec.model_info.cost(&Default::default()).is_none() {
        let _ = writeln!(
            err,
            "orchestrate: warning: --max-cost: no price is known for model {:?}, so its cost is not counted; give it one with [model_info.{:?}] in ~/.config/orchestrate/config.toml",
            spec.model, spec.model
        );
    }
    // Role files that break (or gain ignored fields) during the run are shown as
    // they are found.
    let mut events = runtime.subscribe();
    let control_events = runtime.subscribe();
    let (lead, checkpoints) = lead;
    if let Lead::Resume { run, .. } = &lead {
        checkpoints.set_run(*run);
    }
    let source = match &lead {
        Lead::New(_) => "startup",
        Lead::Resume { .. } => "resume",
    };
    let mode = spec.permission_mode;
    // A message from another terminal goes through the prompt hooks too.
    let prompt_hooks = crate::control::hooked::PromptHooks::new(
        hooks.clone(),
        workspace.clone(),
        mode.name(),
        runtime.handle(),
    );
    let lead_hooks = super::hooks::LeadHooks::new(
        hooks,
        crate::hooks::Place {
            session: lead_id.to_string(),
            cwd: workspace,
            transcript: Some(state.journal(lead_id)),
            permission_mode: mode.name().to_owned(),
        },
        runtime.handle(),
        lead_id,
        &role,
    );
    let prompt = match prompt {
        Some(p) => match lead_hooks.prompt(p, Some(source)).await {
            Ok(p) => Some(p),
            Err(refused) => {
                let _ = writeln!(err, "orchestrate: {refused}");
                lead_hooks.end("prompt_refused").await;
                runtime.shutdown().await;
                return ExitCode::from(exit::FAILED);
            }
        },
        None => None,
    };
    let started = match lead {
        Lead::New(_) => runtime.start_session_as(lead_id, spec).await,
        Lead::Resume { run, .. } => runtime.resume_session(run, spec).await,
    };
    let id = match started {
        Ok(id) => id,
        Err(e) => {
            let _ = writeln!(err, "orchestrate: {e}");
            runtime.shutdown().await;
            return ExitCode::from(exit::FAILED);
        }
    };
    checkpoints.set_run(id);
    lead_hooks.journal();
    if lock.is_none() {
        match RunLock::acquire(&state, id) {
            Ok(taken) => lock = Some(taken),
            Err(e) => tracing::warn!(error = %e, "the run is not locked"),
        }
    }
    // `orchestrate ps | steer | stop | kill` from another terminal reach it here.
    let served = Control::serve_hooked(&state, id, runtime.handle(), control_events, prompt_hooks);
    let control = match served {
        Ok(control) => Some(control),
        Err(e) => {
            tracing::warn!(error = %e, "the run cannot be controlled from another terminal");
            None
        }
    };
    // The lead's terminal events are followed as they come, so the run's end is
    // not a frame late (taken before the prompt; a resumed run that ended while
    // it resumed is found by the next frame); its other events wait for a frame.
    let mut lead_events = runtime.subscribe_session_terminal(id);
    // The run's end: the terminal event answering the prompt, or, for a resumed
    // run with no new prompt, the first terminal event of the lead.
    let title = titler.map(|titler| titler.start(runtime.handle(), id, &role));
    let prompt = prompt.map(|p| runtime.prompt(id, p));
    let mut interrupts = 0;
    let mut ctrl_c = interrupt();
    let mode = if cli.json || cli.quiet {
        Progress::Off
    } else {
        progress
    };
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    // The progress is shown a frame at a time, not event by event: a fan-out's
    // events would each wake this task. `--json` prints each as it comes.
    let mut frame = tokio::time::interval(FRAME);
    frame.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let per_event = cli.json;
    // An interactive session goes on after each answer, for the next line.
    let mut prompts = prompts;
    let mut session = prompts.as_ref().map(|_| super::interactive::Session {
        waiting: prompt.into_iter().collect(),
        history: super::interactive::History::new(state.dir().join("history")),
        interrupted: false,
        mode: mode.clone(),
        colors: colors.clone(),
        names: names.clone(),
    });
    if let (Some(session), Some(first)) = (&session, &typed_first) {
        session.history.keep(first);
    }
    let typed = super::interactive::Typed::new(
        &workspace_for_lines,
        &state,
        cli.trust_workspace,
        env("HOME").map(std::path::PathBuf::from),
        roles,
        runtime.handle(),
        id,
    );
    let mut quit = false;
    let mut shown = Shown {
        display: Display::new(mode, colors).naming(names),
        open: std::collections::HashSet::new(),
        json: cli.json,
        lead: id,
        prompt,
        idle: false,
        run: session.as_ref().map(|_| crate::ui::progress::Board::new()),
        began: std::time::Instant::now(),
        answered: Vec::new(),
    };
    let outcome = loop {
        let ended = tokio::select! {
            event = events.recv(), if per_event => {
                let Some(event) = event else { break None };
                shown.show(&event, out, err)
            }
            // At most a frame's worth at a time, so that Ctrl-C and the run's end
            // are heard between batches of a long backlog.
            _ = frame.tick(), if !per_event => match shown.drain(&mut events, FRAME_EVENTS, out, err) {
                Drained::Ended(outcome) => Some(outcome),
                Drained::More => {
                    frame.reset_immediately();
                    None
                }
                Drained::Empty => None,
            },
            Some(event) = lead_events.recv() => match ends_run(&event.kind, shown.prompt).filter(|_| !shown.idle) {
                // Everything published before the end is waiting to be shown.
                Some(outcome) => match shown.drain(&mut events, usize::MAX, out, err) {
                    Drained::Ended(seen) => Some(seen),
                    Drained::More | Drained::Empty => {
                        shown.answered = prompts_of(&event.kind);
                        Some(outcome.clone())
                    }
                },
                None => None,
            },
            _ = tick.tick() => {
                shown.display.refresh();
                None
            }
            Some(reload) = reloaded(watcher.as_mut()) => {
                shown.display.reloaded(&reload, err);
                None
            }
            line = next_line(prompts.as_mut()) => {
                let Some(session) = session.as_mut() else { continue };
                match line {
                    // Ctrl-D: the terminal is closed.
                    None => {
                        quit = true;
                        break None;
                    }
                    Some(line) => {
                        if typed.line(&line, (session, &lead_hooks), &mut shown, out, err).await {
                            quit = true;
                            break None;
                        }
                        None
                    }
                }
            }
            () = &mut ctrl_c => {
                ctrl_c = interrupt();
                match session.as_mut() {
                    // The first cancels what runs (and what waits); the next quits.
                    Some(session) if !session.waiting.is_empty() && !session.interrupted => {
                        session.interrupted = true;
                        session.waiting.truncate(1);
                        runtime.cancel(id);
                        shown.display.say("orchestrate: cancelling; Ctrl-C again to quit\n", err);
                        None
                    }
                    Some(_) => {
                        quit = true;
                        break None;
                    }
                    None => {
                        interrupts += 1;
                        if interrupts > 1 {
                            // Exit now, but not before what is journaled reaches the disk
                            // and the workspace's state is checkpointed (bounded).
                            let _ = tokio::time::timeout(Duration::from_secs(1), runtime.sync_journals()).await;
                            let _ = tokio::time::timeout(Duration::from_secs(2), checkpoints.at_end()).await;
                            // Nothing of the run is left for a worker to take.
                            #[cfg(feature = "nats")]
                            if let Some(remote) = &remote {
                                let _ = tokio::time::timeout(Duration::from_secs(2), remote.finish()).await;
                            }
                            let _ = writeln!(err, "orchestrate: interrupted");
                            return ExitCode::from(exit::CANCELLED);
                        }
                        runtime.cancel(id);
                        None
                    }
                }
            }
        };
        let Some(outcome) = ended else { continue };
        match session.as_mut() {
            None => break Some(outcome),
            Some(session) => {
                // Each answer's changes are a checkpoint's: `/rewind` between
                // prompts refuses none of them.
                checkpoints.after_answer().await;
                session.answered(outcome, &mut shown, out, err);
            }
        }
    };
    // A title not written by now is not waited for.
    drop(title);
    if quit {
        // What still runs is cancelled, not waited for.
        runtime.cancel(id);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while !shown.open.is_empty() {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(event)) => {
                shown.show(&event, out, err);
            }
            Ok(None) | Err(_) => break,
        }
    }
    lead_hooks.end("other").await;
    lead_hooks.journal();
    // What the SessionEnd hooks told is shown too.
    shown.drain(&mut events, usize::MAX, out, err);
    drop(control);
    runtime.shutdown().await;
    #[cfg(feature = "nats")]
    if let Some(remote) = remote {
        remote.finish().await;
    }
    checkpoints.at_end().await;
    drop(lock);
    shown.display.finish(err);
    if quit {
        return ExitCode::from(exit::DONE);
    }
    report(cli.json, outcome, out, err)
}

/// The next line the person typed; never, outside an interactive session.
async fn next_line(prompts: Option<&mut super::Prompts>) -> Option<String> {
    match prompts {
        Some(prompts) => prompts.recv().await,
        None => std::future::pending().await,
    }
}

/// The watcher's next report; never, without a watcher.
async fn reloaded(watcher: Option<&mut RoleWatcher>) -> Option<Reload> {
    match watcher {
        Some(watcher) => watcher.reloaded().await,
        None => std::future::pending().await,
    }
}

/// The lead's session: its role, its tools (with Task, when delegation is allowed),
/// and the run-wide sub-agent settings.
fn lead_spec(
    cli: &Cli,
    role: &str,
    plan: Setup,
    handle: Handle,
    carried: Option<crate::runs::spent::Spent>,
    (checkpoints, slash, launcher): (
        &Arc<Checkpoints>,
        Option<&super::slash::Slash>,
        Option<Arc<dyn crate::task::Launcher>>,
    ),
) -> Result<(SessionSpec, Option<RoleWatcher>), String> {
    let Some(role) = plan.catalog.get(role).cloned() else {
        let names: Vec<&str> = plan.catalog.roles().map(|r| r.name.as_str()).collect();
        return Err(format!(
            "no role named {role:?} (roles: {}); see `orchestrate agents list`",
            names.join(", ")
        ));
    };
    let model = plan
        .models
        .for_role(&role, &plan.models.lead())
        .map_err(|e| e.to_string())?;
    // A slash command's model is the lead's.
    let model = match slash.and_then(|s| Some((s.model.as_ref()?, &s.source))) {
        Some((name, source)) => plan
            .models
            .resolve(name, &model, source)
            .map_err(|e| e.to_string())?,
        None => model,
    };
    let fallback = match role.fallback_model.as_ref().or(cli.fallback_model.as_ref()) {
        Some(name) => Some(
            plan.models
                .fallback(name, &model, &role.source)
                .map_err(|e| e.to_string())?,
        ),
        None => None,
    }
    .filter(|f| f.model != model.id);
    let permission_mode = role
        .permission_mode
        .unwrap_or(cli.permission_mode)
        .narrowed_by(cli.permission_mode);
    let run_budget = Budget {
        max_cost_usd: cli.max_cost,
        max_tokens: cli.max_tokens,
        timeout: cli.timeout,
    };
    // A run carried on counts what it spent and the time it ran before.
    let meter = (!run_budget.is_unlimited()).then(|| {
        let now = std::time::Instant::now();
        Arc::new(match carried {
            Some(spent) => RunMeter::resumed(
                run_budget,
                now.checked_sub(spent.elapsed).unwrap_or(now),
                spent.stats,
            ),
            None => RunMeter::new(run_budget, now),
        })
    });
    let standard = plan.tools.clone();
    let mut offered: Vec<&str> = standard.names();
    offered.push("Task");
    let mut allowed = role.allowed_tools(&offered);
    // A slash command's `allowed-tools` only narrow the role's: what they
    // allow is offered (`Bash(git:*)` offers Bash), and each call must be
    // one they allow.
    let mut narrowing = Vec::new();
    if let Some(narrow) = slash
        .map(super::slash::Slash::narrow)
        .transpose()?
        .flatten()
    {
        narrowing.push(narrow);
    }
    allowed.retain(|tool| crate::tools::narrowing::offered(&narrowing, tool));
    let mut tools = standard.only(&allowed);
    tools = crate::task::with_skills(tools, Some(&plan.skills), role.skills.as_deref());
    let mcp = handle.mcp();
    let from_mcp = crate::task::mcp_tools(&mcp, &role, &narrowing);
    tools = tools.with_source(Arc::new(from_mcp));
    let mut watcher = None;
    if cli.max_depth > 0 && allowed.contains(&"Task") {
        let catalog = Arc::new(RwLock::new(plan.catalog));
        // A role edited during the run is used by its next spawn.
        match watch::watch(&plan.role_dirs, &plan.workspace, catalog.clone()) {
            Ok(w) => watcher = Some(w),
            Err(e) => tracing::warn!(error = %e, "roles will not be reloaded during this run"),
        }
        let env = Arc::new(
            TaskEnv::new(handle, catalog, cli.max_parallel, cli.max_depth, plan.tools)
                .with_launcher(launcher)
                .with_models(plan.models.clone())
                .with_fallback(cli.fallback_model.clone())
                .with_skills(plan.skills.clone())
                .with_meter(meter.clone())
                .with_memory(plan.memory.clone())
                .with_isolation(cli.isolation)
                .with_checkpoints(Some(checkpoints.clone()))
                .with_mcp(mcp),
        );
        let caller = Caller {
            depth: 0,
            model: model.clone(),
            permission_mode,
            place: role.name.clone(),
        };
        tools = crate::task::with_task_tools(tools, &env, caller);
    }
    let prompt = plan.memory.apply(&role.prompt);
    let mut spec = SessionSpec::new(role.name.clone(), model.id, prompt);
    spec.memory = plan.memory.names();
    spec.provider = model.provider;
    spec.tools = tools;
    spec.max_turns = role.max_turns.unwrap_or(cli.max_turns).max(1);
    spec.bash_rules = role.bash_rules.as_slice().into();
    spec.deny_rules = role.deny_rules.as_slice().into();
    spec.budget = role.budget;
    spec.meter = meter;
    spec.checkpoints = Some(checkpoints.clone());
    plan.models.describe(&mut spec);
    spec.fallback = fallback;
    spec.permission_mode = permission_mode;
    spec.narrowing = narrowing;
    #[cfg(feature = "test-support")]
    {
        spec.faults = cli
            .inject_panic_at_turn
            .map(|turn| FaultPlan::panic_at(turn, cli.inject_panics));
    }
    Ok((spec, watcher))
}
