//! The public boundary: ids, the [`Event`]s every consumer sees, and the
//! [`Outcome`] a run ends with.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::conversation::Usage;

mod changes;

pub use self::changes::{Changes, Checkout};

/// Identifies one session (conversation). Time-ordered (UUIDv7), so journal file
/// names sort by creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(uuid::Uuid);

impl SessionId {
    /// A fresh id.
    pub fn new() -> Self {
        Self(uuid::Uuid::now_v7())
    }

    /// When the session was created, in milliseconds since the Unix epoch (the
    /// id is a UUIDv7, which begins with the time); 0 for an id of another kind.
    pub fn timestamp_millis(&self) -> u64 {
        self.0.get_timestamp().map_or(0, |t| {
            let (secs, nanos) = t.to_unix();
            secs * 1000 + u64::from(nanos / 1_000_000)
        })
    }
}

/// How the result of a Task call that started a background sub-agent begins:
/// this, then its task id (the sub-agent's session id).
pub const STARTED_IN_BACKGROUND: &str = "started in background: task_id ";

/// The task id a Task call's result names when it started a background
/// sub-agent (its first line).
pub(crate) fn background_task(result: &str) -> Option<SessionId> {
    let first = result.lines().next()?;
    first
        .strip_prefix(STARTED_IN_BACKGROUND)?
        .trim()
        .parse()
        .ok()
}

impl Default for SessionId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::str::FromStr for SessionId {
    type Err = uuid::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.parse()?))
    }
}

/// Counters for one run (a prompt and everything it caused).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunStats {
    /// Model turns made.
    pub turns: u32,
    /// Tool calls run.
    pub tool_calls: u32,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// Tokens used, summed over the turns.
    pub usage: Usage,
    /// What the tokens cost in USD, sub-agents' included; `None` (`null`) when a
    /// price is unknown.
    #[serde(default)]
    pub cost_usd: Option<f64>,
}

impl RunStats {
    /// Adds spending: the tokens, and their cost (unknown from then on when this
    /// cost is unknown).
    pub fn charge(&mut self, usage: &Usage, cost: Option<f64>) {
        self.usage.add(usage);
        self.cost_usd = add_costs(self.cost_usd, cost);
    }
}

/// Two costs in USD together; unknown when either is.
pub fn add_costs(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    a.zip(b).map(|(a, b)| a + b)
}

/// Where an item stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started.
    Pending,
    /// Being worked on (one at a time).
    InProgress,
    /// Done.
    Completed,
}

/// One item of the list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Todo {
    /// What is to be done, in the imperative ("Run the tests").
    pub content: String,
    /// Where it stands.
    pub status: TodoStatus,
    /// The same while it is being done ("Running the tests").
    #[serde(
        default,
        rename = "activeForm",
        skip_serializing_if = "Option::is_none"
    )]
    pub active_form: Option<String>,
    /// An id the model gives it (Claude Code's older schema).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// How a run ended. Every run ends with exactly one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// The model gave its final answer (`completed`; journals written before
    /// the outcomes were named so say `finished`).
    #[serde(rename = "completed", alias = "finished")]
    Completed {
        /// The final answer.
        text: String,
        /// True when the answer was cut by the output token limit.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        truncated: bool,
        /// The run's counters.
        stats: RunStats,
    },
    /// The run could not finish.
    Failed {
        /// Why, in a word (`auth`, `rate_limit`, `overloaded`,
        /// `model_not_found`, `crash`, `check`, …).
        class: String,
        /// One line saying what failed and why.
        message: String,
        /// The model whose request failed, when a model's did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// The last text the model produced, if any.
        partial: String,
        /// The run's counters.
        stats: RunStats,
    },
    /// The run was cancelled.
    Cancelled {
        /// What the model had said when the cancel came.
        partial: String,
        /// The run's counters.
        stats: RunStats,
    },
    /// The run's time (`--timeout`, a role's `timeout`) ran out: what streamed or
    /// ran was cut off.
    TimedOut {
        /// What the model had said by then.
        partial: String,
        /// The run's counters.
        stats: RunStats,
    },
    /// The run was stopped at a turn boundary before the model had finished
    /// (`partial`: a turn limit, a budget, `stop`; `stopped` in journals
    /// written before the outcomes were named so).
    #[serde(rename = "partial", alias = "stopped")]
    Partial {
        /// Why (`requested`: someone asked for it).
        reason: String,
        /// What the model had said by then.
        partial: String,
        /// The run's counters.
        stats: RunStats,
    },
}

impl Outcome {
    /// The run's counters.
    pub fn stats(&self) -> &RunStats {
        match self {
            Self::Completed { stats, .. }
            | Self::Failed { stats, .. }
            | Self::Cancelled { stats, .. }
            | Self::TimedOut { stats, .. }
            | Self::Partial { stats, .. } => stats,
        }
    }

    /// This outcome, of a run whose end could not be kept (its journal failed):
    /// failed with `error`, with what the run had said and counted. A failure
    /// stays as it was.
    pub(crate) fn unkept(self, error: &crate::error::SessionError) -> Self {
        match self {
            Self::Failed { .. } => self,
            Self::Completed { text, stats, .. } => Self::failed(error, text, stats),
            Self::Cancelled { partial, stats }
            | Self::TimedOut { partial, stats }
            | Self::Partial { partial, stats, .. } => Self::failed(error, partial, stats),
        }
    }

    /// A run that failed with `error`, having said `partial`.
    pub(crate) fn failed(
        error: &crate::error::SessionError,
        partial: String,
        stats: RunStats,
    ) -> Self {
        Self::Failed {
            class: error.kind().to_owned(),
            message: error.to_string(),
            model: None,
            partial,
            stats,
        }
    }
}

/// One thing that happened, stamped with where it happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The runtime's sequence number, increasing.
    pub seq: u64,
    /// The session it concerns.
    pub session: SessionId,
    /// The session's parent, for sub-agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<SessionId>,
    /// The role running the session.
    pub agent: String,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// One tool call of one session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRef {
    /// The session.
    pub session: SessionId,
    /// Its role.
    pub agent: String,
    /// The call's id.
    pub call_id: String,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// A session began (or began again after a restart).
    SessionStarted {
        /// The model it talks to.
        model: String,
        /// True when it was rebuilt from its journal.
        resumed: bool,
        /// The memory files in its system prompt.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        memory: Vec<String>,
    },
    /// A prompt arrived while the session was busy and waits in its queue.
    PromptQueued {
        /// Prompts now waiting.
        waiting: usize,
    },
    /// A model request began.
    TurnStarted {
        /// The turn within the run, from 1.
        turn: u32,
        /// The attempt for this turn, from 1.
        attempt: u32,
    },
    /// Streamed answer text (progress: may be coalesced).
    TextDelta {
        /// The new text.
        text: String,
    },
    /// Streamed reasoning (progress: may be coalesced).
    ReasoningDelta {
        /// The new reasoning.
        text: String,
    },
    /// A model turn completed.
    TurnFinished {
        /// The turn within the run.
        turn: u32,
        /// The turn's visible text.
        text: String,
        /// How many tool calls it made.
        tool_calls: usize,
        /// Tokens it used.
        usage: Usage,
        /// What they cost in USD; `null` when the model's price is unknown.
        #[serde(default)]
        cost_usd: Option<f64>,
    },
    /// A tool call began.
    ToolStarted {
        /// The call's id.
        call_id: String,
        /// The tool.
        name: String,
        /// The arguments as the model wrote them.
        arguments: String,
    },
    /// A sub-agent asked for by a Task call starts waiting for a free slot
    /// (`waiting: true`), or got one after waiting (`waiting: false`).
    SubagentQueued {
        /// The Task call.
        call_id: String,
        /// The sub-agent's role.
        role: String,
        /// Whether it now waits.
        waiting: bool,
    },
    /// A tool call waits for a person's yes.
    AwaitingPermission {
        /// The tool.
        tool: String,
    },
    /// A person is asked whether a call may run: the question, as it is put.
    PermissionRequested {
        /// The call's id.
        call_id: String,
        /// The question's id, unique in the run.
        question_id: String,
        /// The tool.
        tool: String,
        /// What the call would do: the command, or the file and its change.
        summary: String,
    },
    /// A question was answered, or abandoned: what the answer was and who or
    /// what gave it.
    PermissionAnswered {
        /// The question's id, as `permission_requested` gave it.
        question_id: String,
        /// `yes`, `no` or `always`.
        answer: String,
        /// Who or what answered: `terminal` (the person at the run's
        /// terminal), `approve` (`orchestrate approve` from another terminal),
        /// `program` or `http` (the approver of the user's configuration),
        /// `nobody` (no one could be asked), `timeout` (nobody answered in
        /// time), `always` or `refusal` (another question's answer covered
        /// it), `cancelled` (the call was cancelled while it waited).
        by: String,
        /// The question whose answer covered this one (`by` is `always` or
        /// `refusal`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        covered_by: Option<String>,
    },
    /// A tool call changed a file.
    FileChanged {
        /// The call's id.
        call_id: String,
        /// The file, relative to the workspace.
        path: String,
        /// The change as a unified diff.
        diff: String,
        /// The file did not exist before: the diff is its whole content (which
        /// the call's arguments hold, so its result does not repeat it).
        #[serde(default)]
        created: bool,
        /// The diff is held whole elsewhere in the session's journal (the
        /// call's result, or for a created file its arguments), so the
        /// journal's copy of this event leaves it out. Not serialized.
        #[serde(skip)]
        held: bool,
        /// Every call that was running in the same folder when the change
        /// was seen, this one included, when there were several (a Bash
        /// command's change is found by comparing its folder before and
        /// after, and another agent's command may have made it); empty
        /// otherwise.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        calls: Vec<CallRef>,
        /// A Bash command changed this many files, more than are told one by
        /// one: `path` is the folder that holds them all and `diff` is empty.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count: Option<usize>,
    },
    /// The run's first prompt got a title (`titles = true`), written by a
    /// model in the background; what that cost counts in the run's.
    Titled {
        /// The title.
        title: String,
        /// The tokens the title took.
        usage: crate::conversation::Usage,
        /// What they cost; `None` when the price is unknown.
        cost_usd: Option<f64>,
    },
    /// A running call's output since its previous `tool_output` event (a
    /// Bash call's, or an MCP call's progress notifications: the first at
    /// once, later ones at most every 100 ms), for the person; what the model
    /// gets at the end is its result.
    ToolOutput {
        /// The call's id.
        call_id: String,
        /// The output since the previous event of this call.
        text: String,
        /// Output past the cap of one event was left out.
        truncated: bool,
    },
    /// A tool call ended.
    ToolFinished {
        /// The call's id.
        call_id: String,
        /// The tool.
        name: String,
        /// Whether it failed.
        is_error: bool,
        /// The start of its output.
        preview: String,
    },
    /// A model turn failed and will be tried again.
    Retrying {
        /// The attempt that failed, from 1.
        attempt: u32,
        /// Attempts allowed.
        max_attempts: u32,
        /// Milliseconds until the next attempt.
        delay_ms: u64,
        /// Why.
        reason: String,
    },
    /// The agent's todo list, whole, after a `TodoWrite` call.
    Todos {
        /// The items.
        todos: Vec<Todo>,
    },
    /// The conversation was compacted to fit the model's window.
    Compacted {
        /// Tokens freed, estimated.
        freed_tokens: u64,
        /// Old tool results elided.
        elided: usize,
        /// Older turns were replaced by a summary.
        summarized: bool,
    },
    /// The model request waits out its provider's rate-limit cooldown, which
    /// every session using that endpoint shares.
    RateLimited {
        /// Milliseconds until requests may go again.
        delay_ms: u64,
    },
    /// A hook ran.
    HookRan {
        /// The event it ran at (`PreToolUse`, `Stop`, …).
        event: String,
        /// Its command.
        command: String,
        /// Its exit code (`None`: killed, timed out, or never started).
        exit_code: Option<i32>,
        /// What it decided: `continue`, `block`, `allow`, `ask`, `stop`, `error`.
        decision: String,
        /// Why it blocked or stopped, as the agent (or the person) is told.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// Its failure, or its message for the person.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        notice: Option<String>,
    },
    /// The agent gave its final answer and waits for its background
    /// sub-agents' results before its run ends.
    BackgroundWait {
        /// Background sub-agents still running.
        running: usize,
    },
    /// The session's model does not exist or stayed overloaded: it carries on
    /// with its fallback model, in the same conversation, from here on.
    ModelFallback {
        /// The model it used.
        from: String,
        /// The model it uses now.
        to: String,
        /// Why: `model_not_found` or `overloaded`.
        reason: String,
    },
    /// The session crashed and its supervisor restarted it.
    Restarted {
        /// Restarts inside the current intensity window.
        restarts: u32,
        /// The crash.
        reason: String,
    },
    /// The sub-agent works in a private checkout of its parent's repository.
    Isolated {
        /// Where it works.
        path: String,
        /// The snapshot commit of its parent's tree it started from.
        base: String,
        /// What the checkout lacks (submodules, LFS files), one line each.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        lacks: Vec<String>,
    },
    /// The sub-agent wanted a private checkout and shares its parent's tree.
    Shared {
        /// Why it could not have one.
        reason: String,
    },
    /// The sub-agent's changes were merged into its parent's tree.
    Merged {
        /// The files, from the top of the work tree.
        files: Vec<String>,
        /// Lines added.
        added: usize,
        /// Lines removed.
        removed: usize,
    },
    /// The sub-agent's changes conflict with its parent's tree: none were
    /// written, and they are kept on `branch`.
    Conflicted {
        /// The files in conflict.
        files: Vec<String>,
        /// The branch that holds the work.
        branch: String,
    },
    /// The sub-agent answered as done: its check runs now.
    Checking {
        /// Which attempt, from 1.
        attempt: u32,
        /// Attempts allowed.
        attempts: u32,
    },
    /// The sub-agent's check ran.
    Checked {
        /// Which attempt, from 1.
        attempt: u32,
        /// Attempts allowed.
        attempts: u32,
        /// Its exit code; `null` when it did not exit (refused, timed out).
        exit_code: Option<i32>,
        /// Whether it passed.
        passed: bool,
    },
    /// Bringing the sub-agent's work back failed: nothing was merged, and its
    /// checkout is kept where it is.
    Unmerged {
        /// What failed.
        reason: String,
        /// The checkout.
        checkout: String,
    },
    /// The sub-agent did not finish its work (it failed or was cancelled):
    /// its changes were not merged, and are kept on `branch`.
    Kept {
        /// The branch that holds the work.
        branch: String,
    },
    /// A run ended (or, with no `prompts`, the whole session did).
    Terminal {
        /// The prompts the run answered, by the ids [`crate::Handle::prompt`]
        /// returned: the one that started it and any that joined it. Empty when the
        /// session itself ended (its crashes escalated, or it never existed), which
        /// ends every run of it.
        prompts: Vec<u64>,
        /// How it ended.
        #[serde(flatten)]
        outcome: Outcome,
    },
}

impl EventKind {
    /// The outcome this event gives the prompt `prompt`: a terminal event that names
    /// it, or one that ends the whole session.
    pub fn answer_to(&self, prompt: u64) -> Option<&Outcome> {
        match self {
            Self::Terminal { prompts, outcome }
                if prompts.is_empty() || prompts.contains(&prompt) =>
            {
                Some(outcome)
            }
            _ => None,
        }
    }

    /// Progress events may be dropped or coalesced under back-pressure; lifecycle
    /// events never are.
    pub fn is_progress(&self) -> bool {
        match self {
            Self::TextDelta { .. } | Self::ReasoningDelta { .. } | Self::ToolOutput { .. } => true,
            Self::SessionStarted { .. }
            | Self::PromptQueued { .. }
            | Self::TurnStarted { .. }
            | Self::TurnFinished { .. }
            | Self::ToolStarted { .. }
            | Self::SubagentQueued { .. }
            | Self::AwaitingPermission { .. }
            | Self::PermissionRequested { .. }
            | Self::PermissionAnswered { .. }
            | Self::FileChanged { .. }
            | Self::ToolFinished { .. }
            | Self::Retrying { .. }
            | Self::RateLimited { .. }
            | Self::ModelFallback { .. }
            | Self::BackgroundWait { .. }
            | Self::HookRan { .. }
            | Self::Titled { .. }
            | Self::Compacted { .. }
            | Self::Todos { .. }
            | Self::Restarted { .. }
            | Self::Isolated { .. }
            | Self::Shared { .. }
            | Self::Merged { .. }
            | Self::Conflicted { .. }
            | Self::Kept { .. }
            | Self::Unmerged { .. }
            | Self::Checking { .. }
            | Self::Checked { .. }
            | Self::Terminal { .. } => false,
        }
    }
}
