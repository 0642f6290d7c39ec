//! What a session is ([`SessionSpec`]) and everything it decides, with no IO and no
//! actors: the run machine, what a model turn means, where a journal
//! leaves off, and the order of prompts and cancels. The actor that carries the
//! decisions out is [`crate::actors`]'s Session; it only turns messages into the
//! machine's inputs and the machine's effects into IO.

pub mod budget;
pub(crate) mod compaction;
pub(crate) mod machine;
pub(crate) mod narrowed;
pub(crate) mod queue;
pub(crate) mod repeats;
pub(crate) mod resume;
pub(crate) mod turn;

use std::sync::Arc;

use crate::conversation::Message;
use crate::llm::Provider;
use crate::model_info::ModelInfo;
use crate::protocol::SessionId;
use crate::tools::ToolRegistry;
use crate::tools::permissions::PermissionMode;

/// The default limit on model turns per run.
pub const DEFAULT_MAX_TURNS: u32 = 50;

/// What a session is: its role, model, prompt and tools.
#[derive(Clone, Debug)]
pub struct SessionSpec {
    /// The role's name, shown in events.
    pub agent: String,
    /// The model id.
    pub model: String,
    /// The system prompt (shared: a fan-out's sub-agents of one role hold one copy
    /// of it and of the project's memory in it).
    pub system_prompt: Arc<str>,
    /// The tools offered.
    pub tools: ToolRegistry,
    /// Model turns allowed per run: the run stops (`budget: turns`) when they are
    /// spent.
    pub max_turns: u32,
    /// The role's own budget for each run.
    pub budget: budget::Budget,
    /// The whole run's budget, shared by every session of the run.
    pub meter: Option<Arc<budget::RunMeter>>,
    /// The model's window, output limit and prices.
    pub model_info: ModelInfo,
    /// The share of the window a request may fill before the session compacts.
    pub compact_at: f64,
    /// The model that writes compaction summaries (the `small` alias, when it is
    /// on the session's provider); `None`: the session's own.
    pub summary_model: Option<String>,
    /// The summary model's window, when it is known: a summary request must fit
    /// it as well as the session's.
    pub summary_window: Option<u64>,
    /// Messages the conversation starts with (after the system prompt).
    pub history: Vec<Message>,
    /// The parent session, for sub-agents.
    pub parent: Option<SessionId>,
    /// The parent's tool call that spawned this session.
    pub tool_call_id: Option<String>,
    /// Injected faults, for supervision tests.
    #[cfg(feature = "test-support")]
    pub faults: Option<Arc<crate::faults::FaultPlan>>,
    /// What the session's tools may do without asking.
    pub permission_mode: PermissionMode,
    /// When its role allows Bash only through rules (`Bash(git:*)`): the commands
    /// it may run; any other is refused whatever the mode.
    pub bash_rules: Arc<[crate::tools::rules::Rule]>,
    /// Calls its role refuses (`disallowedTools: Bash(rm:*)`), whatever the mode.
    pub deny_rules: Arc<[crate::tools::rules::Rule]>,
    /// Who serves its model; `None`: the runtime's provider.
    pub provider: Option<Arc<dyn Provider>>,
    /// The memory files in its system prompt (`CLAUDE.md`, `AGENTS.md`, …).
    pub memory: Vec<String>,
    /// Its place in the agent tree (`orchestrator/explorer#toolu_02`): the role's
    /// name for a top-level session; a sub-agent's adds its role and the call that
    /// spawned it to its parent's.
    pub place: String,
    /// The private checkout it works in, for an isolated sub-agent: its tools
    /// treat the checkout as the workspace.
    pub checkout: Option<crate::protocol::Checkout>,
    /// The run's checkpoints of its workspace, taken before its first change.
    pub checkpoints: Option<Arc<crate::git::checkpoint::Checkpoints>>,
    /// The model it carries on with, once, when its own does not exist or
    /// stays overloaded (`--fallback-model`, a role's `fallbackModel`).
    pub fallback: Option<Fallback>,
    /// What narrows it from its start (a slash command's `allowed-tools`).
    pub narrowing: Vec<crate::tools::narrowing::Narrow>,
    /// The hooks it runs instead of its runtime's: a worker's task, whose
    /// run's hooks its lead runs. It ends as the sub-agent it is there
    /// (`SubagentStop`).
    pub hooks: Option<Arc<crate::hooks::Hooks>>,
}

/// A model a session falls back to.
#[derive(Clone, Debug)]
pub struct Fallback {
    /// Its id.
    pub model: String,
    /// Who serves it; `None`: the runtime's provider.
    pub provider: Option<Arc<dyn Provider>>,
    /// Its window, output limit and prices.
    pub model_info: ModelInfo,
}

impl SessionSpec {
    /// A session with no tools and default limits.
    pub fn new(
        agent: impl Into<String>,
        model: impl Into<String>,
        system_prompt: impl Into<Arc<str>>,
    ) -> Self {
        let agent = agent.into();
        Self {
            place: agent.clone(),
            agent,
            model: model.into(),
            system_prompt: system_prompt.into(),
            tools: ToolRegistry::new(),
            max_turns: DEFAULT_MAX_TURNS,
            budget: budget::Budget::default(),
            meter: None,
            model_info: ModelInfo::default(),
            compact_at: crate::config::DEFAULT_COMPACT_AT,
            summary_model: None,
            summary_window: None,
            history: Vec::new(),
            parent: None,
            tool_call_id: None,
            #[cfg(feature = "test-support")]
            faults: None,
            permission_mode: PermissionMode::Default,
            bash_rules: Arc::from([]),
            deny_rules: Arc::from([]),
            memory: Vec::new(),
            provider: None,
            checkout: None,
            checkpoints: None,
            fallback: None,
            narrowing: Vec::new(),
            hooks: None,
        }
    }
}
