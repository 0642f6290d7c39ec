//! The `Task` tool: delegates a piece of work to a sub-agent. The sub-agent is a
//! session of its own, started with a role from the catalog, tools no wider than
//! its caller's, and a permission mode no wider than its caller's; its final answer
//! (or its failure, with its partial output) is the tool's result.
//!
//! Task is concurrency-safe, so several Task calls of one turn run in parallel; a
//! run-wide semaphore caps how many sub-agents run at once, the rest wait in FIFO
//! order. At the depth limit, Task is not offered to the sub-agent.
//!
//! Task starts sessions through a [`Launcher`], which the runtime's handle
//! implements: Task knows what a session is, not the actors that run one.

mod background;

pub use self::background::{TaskOutput, TaskStop};

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::error::{SessionError, ToolError};
use crate::isolation::{Isolate, Policy};
use crate::memory::Memory;
use crate::models::{Model, Models};
use crate::protocol::{Changes, EventKind, Outcome, STARTED_IN_BACKGROUND, SessionId};
use crate::roles::ModelChoice;
use crate::roles::catalog::Catalog;
use crate::session::budget::RunMeter;
use crate::session::{DEFAULT_MAX_TURNS, SessionSpec};
use crate::tools::permissions::PermissionMode;
use crate::tools::{Concurrency, Tool, ToolContext, ToolRegistry};

/// Sub-agents running at once across a run, by default.
pub const DEFAULT_MAX_PARALLEL: usize = 8;
/// Levels of sub-agents below the lead, by default.
pub const DEFAULT_MAX_DEPTH: u32 = 2;

/// Input of `Task`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskInput {
    /// A short (3-5 word) description of the task, shown to the person.
    pub description: String,
    /// The full task for the sub-agent. It sees nothing of your conversation: say
    /// everything it needs (goal, files, constraints) and what to report back.
    pub prompt: String,
    /// The role to run, by name.
    pub subagent_type: String,
    /// A shell command that must exit 0 before the sub-agent's work counts as
    /// done (run in its workspace when it answers; on failure it is shown the
    /// output and tries again). Overrides the role's `check`.
    #[serde(default)]
    pub check: Option<String>,
    /// How many times the check may run (default: the role's, else 3).
    #[serde(default)]
    pub check_attempts: Option<u32>,
    /// Seconds the sub-agent may run (its role's `timeout` too, whichever is
    /// shorter); then it ends `timed_out` with its work so far.
    #[serde(default)]
    pub timeout: Option<u64>,
    /// Run it in the background: the call returns at once with its task id,
    /// you go on, and its result joins this conversation when it ends (read
    /// it sooner with TaskOutput, stop it with TaskStop). You do not end before
    /// its result has come.
    #[serde(default)]
    pub run_in_background: bool,
    /// The agent_id of an earlier sub-agent of this run (its result's last
    /// line gives it): that sub-agent goes on, its conversation kept, with
    /// `prompt` as a follow-up (say what to do next, not the whole task
    /// again). `subagent_type` must be its role. It works in your tree.
    #[serde(default)]
    pub resume: Option<String>,
}

/// Attempts at a check, by default.
pub const DEFAULT_CHECK_ATTEMPTS: u32 = 3;

/// How long one run of a check may take.
pub const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// A check that gates a sub-agent's work: run when it answers as done.
#[derive(Clone, Debug)]
pub struct Check {
    /// The shell command; exit 0 passes.
    pub command: String,
    /// How many times it may run.
    pub attempts: u32,
    /// The Bash tool it runs with.
    pub bash: Arc<dyn crate::tools::Tool>,
}

/// How a sub-agent's check went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Checked {
    /// Whether it passed.
    pub passed: bool,
    /// The attempt it passed at, or the attempts it failed.
    pub attempt: u32,
    /// Attempts allowed.
    pub attempts: u32,
}

impl Checked {
    /// The Task result's line: `check: passed (attempt 2 of 3)`,
    /// `check: failed (3 attempts)`.
    pub fn line(&self) -> String {
        match self.passed {
            true => format!(
                "check: passed (attempt {} of {})",
                self.attempt, self.attempts
            ),
            false if self.attempt == 1 => "check: failed (1 attempt)".to_owned(),
            false => format!("check: failed ({} attempts)", self.attempt),
        }
    }
}

/// A Task call's prompt, for its sub-agent.
#[derive(Debug)]
pub struct Delegation {
    /// The sub-agent's session; its `parent` and `tool_call_id` name the call.
    pub spec: SessionSpec,
    /// The prompt.
    pub prompt: String,
    /// Cancels the sub-agent, and nothing else does.
    pub cancel: CancellationToken,
    /// An earlier incarnation of its caller started the call: the sub-agent
    /// that start began, if there is one (its recorded result when it
    /// finished), is found again rather than a new one started.
    pub resumed: bool,
    /// A new sub-agent works in a private checkout of this tree, its work
    /// brought back when it ends.
    pub isolate: Option<Isolate>,
    /// What must pass before its work counts.
    pub check: Option<Check>,
    /// The session id a new sub-agent gets (a background one's task id);
    /// `None`: a fresh one.
    pub id: Option<SessionId>,
    /// An earlier sub-agent of run `run` that goes on with the prompt as a
    /// follow-up, instead of a new one.
    pub continues: Option<Continue>,
    /// Its slot among the run's sub-agents, given back when it reaches its
    /// outcome (before its work is merged, and whenever its result is read).
    pub slot: Option<tokio::sync::OwnedSemaphorePermit>,
    /// Where its role says it may run, when the run has workers.
    pub placement: crate::roles::Placement,
    /// The worker tags its role names.
    pub placement_tags: Vec<String>,
}

/// An earlier sub-agent that a Task call continues.
#[derive(Clone, Copy, Debug)]
pub struct Continue {
    /// The sub-agent.
    pub agent: SessionId,
    /// The run it must belong to: its caller's.
    pub run: SessionId,
}

/// A sub-agent to run in the background.
#[derive(Debug)]
pub struct Job {
    /// Its delegation; its `id` is its task id.
    pub delegation: Delegation,
    /// The slots it waits for, as a Task call's sub-agent does.
    pub slots: Arc<Semaphore>,
    /// Publishes as its caller (its wait for a slot).
    pub events: Option<crate::events::Publisher>,
}

/// Runs Task calls in sub-agents ([`crate::Handle`] is one).
pub trait Launcher: Send + Sync + std::fmt::Debug + 'static {
    /// Runs a delegation's prompt in its sub-agent (see [`Delegation`]).
    /// Returns the sub-agent's outcome, `None` if it went away without one.
    fn delegate(&self, delegation: Delegation) -> BoxFuture<'_, Result<Delegated, SessionError>>;

    /// Starts `job` in the background and returns its task id once its
    /// caller's run counts it (that run does not end before its result has
    /// come). A resumed job's task id is the sub-agent its call had started,
    /// when there is one.
    fn background(&self, job: Job) -> BoxFuture<'_, Result<SessionId, SessionError>>;

    /// What background sub-agent `task` of `caller` came to: its result once
    /// it has ended, waiting up to `wait` for it; else its state and
    /// progress so far.
    /// What it spent goes to `spent` (the `TaskOutput` call's), once.
    fn output(
        &self,
        caller: SessionId,
        task: SessionId,
        wait: Option<std::time::Duration>,
        spent: crate::tools::Spent,
    ) -> BoxFuture<'_, Result<String, ToolError>>;

    /// Stops background sub-agent `task` of `caller` as `stop` does: it ends
    /// `partial` at its next turn boundary, and its result comes as usual.
    fn stop(&self, caller: SessionId, task: SessionId) -> Result<String, ToolError>;
}

/// What a delegation came to.
#[derive(Clone, Debug, Default)]
pub struct Delegated {
    /// The sub-agent's outcome; `None` if it went away without one.
    pub outcome: Option<Outcome>,
    /// What became of its changes, when it worked in a private checkout.
    pub changes: Option<Changes>,
    /// How its check went, when it had one.
    pub check: Option<Checked>,
    /// The sub-agent (its agent_id, which `resume` continues).
    pub session: Option<SessionId>,
}

/// What every Task tool of a run shares.
#[derive(Debug)]
pub struct TaskEnv {
    /// Starts the sub-agents' sessions.
    launcher: Arc<dyn Launcher>,
    /// The roles, reloaded when their files change.
    catalog: Arc<RwLock<Catalog>>,
    /// Slots for running sub-agents, one pool per level (FIFO when full). Each
    /// level has its own pool so that sub-agents waiting on their own sub-agents
    /// can never hold every slot their children need.
    slots: Vec<Arc<Semaphore>>,
    /// Levels of sub-agents allowed below the lead.
    max_depth: u32,
    /// Every tool a session of this run may be offered (without Task).
    tools: ToolRegistry,
    /// Model aliases and providers; without them a role's `model:` is an id on
    /// its caller's provider.
    models: Option<Arc<Models>>,
    /// The whole run's budget, which every sub-agent charges.
    meter: Option<Arc<RunMeter>>,
    /// The project's memory, in every sub-agent's system prompt.
    memory: Arc<Memory>,
    /// The run's MCP servers, whose tools a sub-agent's role may use.
    mcp: Option<Arc<crate::mcp::McpHub>>,
    /// Which sub-agents work in a private checkout when their role does not
    /// say.
    isolation: Policy,
    /// The run's checkpoints of its workspace.
    checkpoints: Option<Arc<crate::git::checkpoint::Checkpoints>>,
    /// The run's fallback model (`--fallback-model`), for roles that name none.
    fallback: Option<String>,
    /// The run's skills, of which a role's `skills` select the ones it sees.
    skills: Option<Arc<crate::skills::Skills>>,
    /// Sub-agents' system prompts (a role's prompt with the memory), one per role
    /// prompt: ten thousand sub-agents of a role share one copy, not ten thousand
    /// copies of the project's memory.
    prompts: Mutex<HashMap<String, Arc<str>>>,
}

impl TaskEnv {
    /// The shared state of a run's Task tools: at most `max_parallel` sub-agents of
    /// each level run at once, and at most `max_depth` levels below the lead.
    pub fn new(
        launcher: impl Launcher,
        catalog: Arc<RwLock<Catalog>>,
        max_parallel: usize,
        max_depth: u32,
        tools: ToolRegistry,
    ) -> Self {
        let slots = (0..max_depth.max(1))
            .map(|_| Arc::new(Semaphore::new(max_parallel.max(1))))
            .collect();
        Self {
            launcher: Arc::new(launcher),
            catalog,
            slots,
            max_depth,
            tools,
            models: None,
            meter: None,
            memory: Arc::default(),
            mcp: None,
            isolation: Policy::default(),
            checkpoints: None,
            fallback: None,
            skills: None,
            prompts: Mutex::default(),
        }
    }

    /// Sub-agents take the run's checkpoints of its workspace before they
    /// change it.
    pub fn with_checkpoints(
        mut self,
        checkpoints: Option<Arc<crate::git::checkpoint::Checkpoints>>,
    ) -> Self {
        self.checkpoints = checkpoints;
        self
    }

    /// Sub-agents see the skills of `skills` their roles select.
    pub fn with_skills(mut self, skills: Arc<crate::skills::Skills>) -> Self {
        self.skills = Some(skills);
        self
    }

    /// Sub-agents whose role names no `fallbackModel` fall back to `model`.
    pub fn with_fallback(mut self, model: Option<String>) -> Self {
        self.fallback = model;
        self
    }

    /// Sub-agents whose role does not say work in a private checkout as
    /// `policy` says.
    pub fn with_isolation(mut self, policy: Policy) -> Self {
        self.isolation = policy;
        self
    }

    /// The system prompt of a sub-agent whose role's prompt is `role_prompt`: that
    /// and the memory, made once and shared.
    fn system_prompt(&self, role_prompt: &str) -> Arc<str> {
        let mut prompts = self
            .prompts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(prompt) = prompts.get(role_prompt) {
            return prompt.clone();
        }
        let prompt: Arc<str> = self.memory.apply(role_prompt).into();
        prompts.insert(role_prompt.to_owned(), prompt.clone());
        prompt
    }

    /// Sub-agents get the tools of `hub`'s servers their roles allow.
    pub fn with_mcp(mut self, hub: Arc<crate::mcp::McpHub>) -> Self {
        self.mcp = Some(hub);
        self
    }

    /// Task calls go through `launcher` instead (one that places some on
    /// other machines); `None` keeps the one it has.
    pub fn with_launcher(mut self, launcher: Option<Arc<dyn Launcher>>) -> Self {
        if let Some(launcher) = launcher {
            self.launcher = launcher;
        }
        self
    }

    /// Resolves roles' `model:` values through `models` (aliases, providers).
    pub fn with_models(mut self, models: Arc<Models>) -> Self {
        self.models = Some(models);
        self
    }

    /// Sub-agents get `memory` in their system prompts.
    pub fn with_memory(mut self, memory: Arc<Memory>) -> Self {
        self.memory = memory;
        self
    }

    /// Sub-agents charge `meter`, the whole run's budget.
    pub fn with_meter(mut self, meter: Option<Arc<RunMeter>>) -> Self {
        self.meter = meter;
        self
    }
}

/// The caller of a Task tool: what its sub-agents inherit and may not exceed.
#[derive(Clone, Debug)]
pub struct Caller {
    /// Its depth: 0 for the lead.
    pub depth: u32,
    /// Its model (for roles that `inherit`, and whose provider roles that name only
    /// an id keep).
    pub model: Model,
    /// Its permission mode, which bounds its sub-agents'.
    pub permission_mode: PermissionMode,
    /// Its place in the agent tree (see [`SessionSpec::place`]).
    pub place: String,
}

/// The Task tool of one caller.
#[derive(Debug)]
pub struct Task {
    env: Arc<TaskEnv>,
    caller: Caller,
}

impl Task {
    /// The Task tool for `caller`.
    pub fn new(env: Arc<TaskEnv>, caller: Caller) -> Self {
        Self { env, caller }
    }

    /// The session spec of a sub-agent of role `name` started by call
    /// `call_id` of `parent`, which `narrowing` narrows (its caller's), and
    /// whether it works in a private checkout; or why there is none.
    fn child_spec(
        &self,
        name: &str,
        (parent, call_id): (SessionId, &str),
        narrowing: Vec<crate::tools::narrowing::Narrow>,
    ) -> Result<(SessionSpec, crate::isolation::Wanted), ToolError> {
        let catalog = self
            .env
            .catalog
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(role) = catalog.get(name) else {
            let known: Vec<&str> = catalog.roles().map(|r| r.name.as_str()).collect();
            return Err(ToolError::InvalidInput(format!(
                "no role named {name:?}; subagent_type must be one of: {}",
                known.join(", ")
            )));
        };
        let depth = self.caller.depth + 1;
        let place = format!("{}/{}#{call_id}", self.caller.place, role.name);
        // Its own role's tools, not its caller's (as in Claude Code): a lead that
        // only delegates still has workers that read and write.
        let mut offered: Vec<&str> = self.env.tools.names();
        offered.push("Task");
        let mut allowed = role.allowed_tools(&offered);
        // What narrows its caller narrows it: only what that allows is offered.
        allowed.retain(|tool| crate::tools::narrowing::offered(&narrowing, tool));
        let isolated = crate::isolation::wanted(self.env.isolation, role.isolation, &allowed);
        let mut tools = self.env.tools.only(&allowed);
        tools = with_skills(tools, self.env.skills.as_ref(), role.skills.as_deref());
        if let Some(hub) = &self.env.mcp {
            tools = tools.with_source(Arc::new(mcp_tools(hub, role, &narrowing)));
        }
        let model = match (&role.model, &self.env.models) {
            (ModelChoice::Named(_), Some(models)) => models
                .for_role(role, &self.caller.model)
                .map_err(|e| ToolError::InvalidInput(e.to_string()))?,
            (ModelChoice::Named(id), None) => Model {
                provider: self.caller.model.provider.clone(),
                id: id.clone(),
            },
            (ModelChoice::Inherit, _) => self.caller.model.clone(),
        };
        let permission_mode = role
            .permission_mode
            .unwrap_or(self.caller.permission_mode)
            .narrowed_by(self.caller.permission_mode);
        if depth < self.env.max_depth && allowed.contains(&"Task") {
            let caller = Caller {
                depth,
                model: model.clone(),
                permission_mode,
                place: place.clone(),
            };
            tools = with_task_tools(tools, &self.env, caller);
        }
        let fallback = match (
            role.fallback_model.as_ref().or(self.env.fallback.as_ref()),
            &self.env.models,
        ) {
            (Some(name), Some(models)) => Some(
                models
                    .fallback(name, &model, &role.source)
                    .map_err(|e| ToolError::InvalidInput(e.to_string()))?,
            ),
            (Some(name), None) => Some(crate::session::Fallback {
                model: name.clone(),
                provider: model.provider.clone(),
                model_info: crate::model_info::builtin(name).unwrap_or_default(),
            }),
            (None, _) => None,
        }
        .filter(|f| f.model != model.id);
        let prompt = self.env.system_prompt(&role.prompt);
        let mut spec = SessionSpec::new(role.name.clone(), model.id, prompt);
        spec.memory = self.env.memory.names();
        spec.provider = model.provider;
        spec.place = place;
        spec.tools = tools;
        spec.max_turns = role.max_turns.unwrap_or(DEFAULT_MAX_TURNS);
        spec.bash_rules = role.bash_rules.as_slice().into();
        spec.deny_rules = role.deny_rules.as_slice().into();
        spec.budget = role.budget;
        spec.meter = self.env.meter.clone();
        spec.checkpoints = self.env.checkpoints.clone();
        spec.fallback = fallback;
        spec.narrowing = narrowing;
        match &self.env.models {
            Some(models) => models.describe(&mut spec),
            None => spec.model_info = crate::model_info::builtin(&spec.model).unwrap_or_default(),
        }
        spec.permission_mode = permission_mode;
        spec.parent = Some(parent);
        spec.tool_call_id = Some(call_id.to_owned());
        Ok((spec, isolated))
    }

    /// Where role `name`'s sub-agents may run, and the worker tags it names.
    fn placement(&self, name: &str) -> (crate::roles::Placement, Vec<String>) {
        let catalog = self
            .env
            .catalog
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        catalog.get(name).map_or_else(Default::default, |role| {
            (role.runs_where(), role.placement_tags.clone())
        })
    }

    /// The check of a call's sub-agent: the call's, else its role's.
    fn check(&self, input: &TaskInput) -> Result<Option<Check>, ToolError> {
        let catalog = self
            .env
            .catalog
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let role = catalog.get(&input.subagent_type);
        let command = input
            .check
            .clone()
            .filter(|c| !c.trim().is_empty())
            .or_else(|| role.and_then(|r| r.check.clone()));
        let Some(command) = command else {
            return Ok(None);
        };
        let attempts = input
            .check_attempts
            .or_else(|| role.and_then(|r| r.check_attempts))
            .unwrap_or(DEFAULT_CHECK_ATTEMPTS);
        if !(1..=100).contains(&attempts) {
            return Err(ToolError::InvalidInput(format!(
                "check_attempts must be from 1 to 100, not {attempts}"
            )));
        }
        let bash = self.env.tools.get("Bash").ok_or_else(|| {
            ToolError::InvalidInput(
                "a check needs the Bash tool, which this run does not have".into(),
            )
        })?;
        Ok(Some(Check {
            command,
            attempts,
            bash,
        }))
    }

    fn roles_summary(&self) -> String {
        let catalog = self
            .env
            .catalog
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        catalog
            .roles()
            .map(|r| format!("- {}: {}", r.name, r.description))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Tool for Task {
    fn name(&self) -> &str {
        "Task"
    }

    fn description(&self) -> &str {
        "Delegates a piece of work to a sub-agent with its own role, tools and context, and \
         returns its final report. Issue several Task calls in the same turn to run \
         independent pieces in parallel. The sub-agent sees nothing of your conversation: \
         give it a complete, self-contained prompt. Roles (`subagent_type`) are listed in the \
         input schema."
    }

    fn input_schema(&self) -> Value {
        let mut schema = crate::tools::schema::<TaskInput>();
        if let Some(field) = schema.pointer_mut("/properties/subagent_type") {
            field["description"] =
                Value::String(format!("The role to run. Roles:\n{}", self.roles_summary()));
        }
        schema
    }

    fn read_only(&self) -> bool {
        false
    }

    fn concurrency(&self, _input: &Value) -> Concurrency {
        Concurrency::Safe
    }

    fn bounds_itself(&self) -> bool {
        true
    }

    fn resumable(&self) -> bool {
        true
    }

    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let input: TaskInput = crate::tools::parse(input)?;
            if input.prompt.trim().is_empty() {
                return Err(ToolError::InvalidInput(
                    "prompt is empty: say what the sub-agent should do and report".into(),
                ));
            }
            let by = (ctx.session, ctx.call_id.as_str());
            let narrowing = ctx.narrowing.snapshot();
            let (mut spec, isolated) = self.child_spec(&input.subagent_type, by, narrowing)?;
            if let Some(secs) = input.timeout {
                if secs == 0 {
                    return Err(ToolError::InvalidInput(
                        "timeout must be at least 1 second".into(),
                    ));
                }
                let asked = std::time::Duration::from_secs(secs);
                spec.budget.timeout = Some(spec.budget.timeout.map_or(asked, |t| t.min(asked)));
            }
            // A sub-agent of an isolated one shares its parent's checkout,
            // which is private already.
            let (mut spec, wanted) = (spec, isolated);
            let isolate = match &ctx.checkout {
                // A sub-agent of an isolated one works in its parent's
                // checkout, which is private already.
                Some(checkout) => {
                    spec.checkout = Some(crate::protocol::Checkout {
                        workdir: ctx.workspace.clone(),
                        borrowed: true,
                        ..(**checkout).clone()
                    });
                    None
                }
                // A continued sub-agent works in its caller's tree: its own
                // checkout went when its work was brought back.
                None if input.resume.is_some() => None,
                None => Some(Isolate {
                    from: ctx.workspace.clone(),
                    run: ctx.run,
                    files: ctx.files.clone(),
                    private: ctx.private.clone(),
                    wanted,
                    checkpoints: ctx.checkpoints.clone(),
                }),
            };
            let agent = spec.agent.clone();
            let level = (self.caller.depth as usize).min(self.env.slots.len() - 1);
            let slots = &self.env.slots[level];
            let check = self.check(&input)?;
            let continues = match input.resume.as_deref().map(str::trim) {
                None | Some("") => None,
                Some(id) => Some(Continue {
                    agent: id.parse().map_err(|_| {
                        ToolError::InvalidInput(format!(
                            "resume {id:?} is not an agent_id; give the one an earlier Task result ended with"
                        ))
                    })?,
                    run: ctx.run,
                }),
            };
            if input.run_in_background {
                // A resumed caller following it again gives it its task id.
                let (placement, placement_tags) = self.placement(&input.subagent_type);
                let delegation = Delegation {
                    placement,
                    placement_tags,
                    spec,
                    prompt: input.prompt,
                    cancel: CancellationToken::new(),
                    resumed: ctx.resumed || ctx.reattach.is_some(),
                    isolate,
                    check,
                    id: Some(
                        continues.map_or_else(|| ctx.reattach.unwrap_or_default(), |c| c.agent),
                    ),
                    continues,
                    slot: None,
                };
                let job = Job {
                    delegation,
                    slots: slots.clone(),
                    events: ctx.events.clone(),
                };
                let task = (self.env.launcher.background(job).await).map_err(|e| {
                    ToolError::Failed(format!("the sub-agent could not start: {e}"))
                })?;
                return Ok(format!(
                    "{STARTED_IN_BACKGROUND}{task}\nThe {agent} sub-agent works in the background. Its \
                     result joins this conversation when it ends; TaskOutput with this task_id reads it \
                     sooner, TaskStop stops it. Go on with other work meanwhile."
                ));
            }
            let slot = wait_for_slot(slots, ctx.events.as_ref(), &ctx.call_id, &agent).await?;
            let (placement, placement_tags) = self.placement(&input.subagent_type);
            let delegation = Delegation {
                placement,
                placement_tags,
                spec,
                prompt: input.prompt,
                cancel: ctx.cancel.clone(),
                resumed: ctx.resumed,
                isolate,
                check,
                id: None,
                continues,
                slot: Some(slot),
            };
            let delegated = (self.env.launcher.delegate(delegation).await)
                .map_err(|e| ToolError::Failed(format!("the sub-agent could not start: {e}")))?;
            if let Some(outcome) = &delegated.outcome {
                ctx.spent.add(outcome.stats());
            }
            report(&agent, delegated)
        })
    }
}

/// The MCP tools of `hub` that `role` may use, as `narrowing` leaves them.
pub fn mcp_tools(
    hub: &Arc<crate::mcp::McpHub>,
    role: &crate::roles::Role,
    narrowing: &[crate::tools::narrowing::Narrow],
) -> crate::mcp::McpTools {
    crate::mcp::tools_for(
        hub,
        &role.name,
        role.tools.as_deref(),
        &role.disallowed_tools,
    )
    .narrowed(crate::tools::narrowing::mcp_entries(narrowing))
}

/// `tools` whose `Skill` (when they have it) sees the skills `selected` names
/// (every one for `None`).
pub fn with_skills(
    tools: ToolRegistry,
    skills: Option<&Arc<crate::skills::Skills>>,
    selected: Option<&[String]>,
) -> ToolRegistry {
    match (skills, selected, tools.get("Skill")) {
        (Some(skills), Some(selected), Some(_)) => {
            let seen = Arc::new(skills.select(Some(selected)));
            tools.with(crate::tools::skill::Skill::new(seen))
        }
        _ => tools,
    }
}

/// `tools` with Task for `caller`, and the tools that follow its background
/// sub-agents.
pub fn with_task_tools(tools: ToolRegistry, env: &Arc<TaskEnv>, caller: Caller) -> ToolRegistry {
    tools
        .with(Task::new(env.clone(), caller))
        .with(TaskOutput::new(env.clone()))
        .with(TaskStop::new(env.clone()))
}

/// Waits in FIFO order for one of `slots` (shown as queued through `events`
/// while it waits, for Task call `call_id` of role `role`); a cancel drops
/// the wait.
pub async fn wait_for_slot(
    slots: &Arc<Semaphore>,
    events: Option<&crate::events::Publisher>,
    call_id: &str,
    role: &str,
) -> Result<tokio::sync::OwnedSemaphorePermit, ToolError> {
    if let Ok(slot) = slots.clone().try_acquire_owned() {
        return Ok(slot);
    }
    let queued = |waiting| EventKind::SubagentQueued {
        call_id: call_id.to_owned(),
        role: role.to_owned(),
        waiting,
    };
    if let Some(events) = events {
        events.publish(queued(true));
    }
    let slot = slots.clone().acquire_owned().await;
    if let Some(events) = events {
        events.publish(queued(false));
    }
    slot.map_err(|_| ToolError::Failed("the run is shutting down".into()))
}

/// A Task call's result for what the delegation to sub-agent `agent` came
/// to: the outcome word first (`completed`, `partial (reason)`, `failed
/// (class)`, `timed_out`), then what became of an isolated sub-agent's
/// changes and how its check went, then its answer or last output.
pub fn report(agent: &str, delegated: Delegated) -> Result<String, ToolError> {
    let Delegated {
        outcome,
        changes,
        check,
        session,
    } = delegated;
    let footer = |stats: &crate::protocol::RunStats| footer(agent, stats, session);
    // What continues it, under a result that has no footer.
    let id = session
        .map(|s| format!("\n\n[{agent}: agent_id {s}]"))
        .unwrap_or_default();
    let mut changes = changes
        .map(|c| format!("{}\n", c.line()))
        .unwrap_or_default();
    if let Some(check) = check {
        changes.push_str(&format!("{}\n", check.line()));
    }
    match outcome {
        Some(Outcome::Completed { text, stats, .. }) => {
            Ok(format!("completed\n{changes}{text}\n\n{}", footer(&stats)))
        }
        Some(Outcome::Failed {
            class,
            mut message,
            partial,
            model,
            ..
        }) => {
            if let Some(model) = model {
                message.push_str(&format!(" (model {model})"));
            }
            let partial = if partial.is_empty() {
                String::new()
            } else {
                format!("\nIts last output:\n{partial}")
            };
            Err(ToolError::Reported(format!(
                "failed ({class})\n{changes}the {agent} sub-agent failed ({class}): {message}{partial}{id}"
            )))
        }
        Some(Outcome::Cancelled { partial, .. }) => Err(ToolError::Reported(format!(
            "cancelled\n{changes}[the {agent} sub-agent was cancelled before it finished; its work so far:]\n{partial}{id}"
        ))),
        // Stopped at a turn boundary: its partial work is the result, and the
        // caller goes on.
        Some(Outcome::Partial {
            reason,
            partial,
            stats,
        }) => Ok(format!(
            "partial ({reason})\n{changes}[the {agent} sub-agent was stopped ({reason}) before it finished; its work so far:]\n{partial}\n\n{}",
            footer(&stats)
        )),
        // Its time ran out (its own `timeout`): like a stop, its partial
        // work is the result.
        Some(Outcome::TimedOut { partial, stats }) => Ok(format!(
            "timed_out\n{changes}[the {agent} sub-agent's time ran out before it finished; its work so far:]\n{partial}\n\n{}",
            footer(&stats)
        )),
        None => Err(ToolError::Failed(format!(
            "the {agent} sub-agent ended without a result"
        ))),
    }
}

/// The line under a sub-agent's result: what it took, and its agent_id.
fn footer(agent: &str, stats: &crate::protocol::RunStats, session: Option<SessionId>) -> String {
    let id = session
        .map(|s| format!("; agent_id {s}"))
        .unwrap_or_default();
    format!(
        "[{agent}: {} turns, {} tool calls, {} tokens, {:.1}s{id}]",
        stats.turns,
        stats.tool_calls,
        stats.usage.total(),
        stats.duration_ms as f64 / 1000.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Nobody;

    impl Launcher for Nobody {
        fn delegate(
            &self,
            _delegation: Delegation,
        ) -> BoxFuture<'_, Result<Delegated, SessionError>> {
            Box::pin(async { Ok(Delegated::default()) })
        }

        fn background(&self, _job: Job) -> BoxFuture<'_, Result<SessionId, SessionError>> {
            Box::pin(async { Ok(SessionId::new()) })
        }

        fn output(
            &self,
            _caller: SessionId,
            _task: SessionId,
            _wait: Option<std::time::Duration>,
            _spent: crate::tools::Spent,
        ) -> BoxFuture<'_, Result<String, ToolError>> {
            Box::pin(async { Ok(String::new()) })
        }

        fn stop(&self, _caller: SessionId, _task: SessionId) -> Result<String, ToolError> {
            Ok(String::new())
        }
    }

    #[test]
    fn sub_agents_of_one_role_share_one_system_prompt_with_the_memory() {
        let memory = Memory {
            text: "## CLAUDE.md\nRules.".into(),
            ..Memory::default()
        };
        let catalog = Arc::new(RwLock::new(Catalog::load(&[])));
        let env =
            TaskEnv::new(Nobody, catalog, 1, 1, ToolRegistry::new()).with_memory(Arc::new(memory));
        let first = env.system_prompt("You work.");
        let second = env.system_prompt("You work.");
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(&*first, "You work.\n\n## CLAUDE.md\nRules.");
        let other = env.system_prompt("You review.");
        assert!(!Arc::ptr_eq(&first, &other));
    }
}
