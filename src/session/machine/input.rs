//! What the run machine is told: the [`Input`]s a Session turns its messages into,
//! and the answers to the machine's questions.

use crate::conversation::{AssistantTurn, ToolResult};
use crate::error::{LlmError, SessionError};
use crate::session::queue::QueuedPrompt;
use crate::tools::{FileChange, Spending};

/// What the machine is told.
#[derive(Debug)]
pub(crate) enum Input {
    /// The session is up. `cancel` and `stop` are what its queue still remembered
    /// (asked for only when the session resumes a run from its journal).
    Started {
        /// The remembered cancel's stamp.
        cancel: Option<u64>,
        /// A stop of the run was asked for.
        stop: bool,
    },
    /// A prompt stamped `seq` was queued: take it when idle.
    Prompt {
        /// Its place in arrival order.
        seq: u64,
    },
    /// Take the next queued prompt, if idle.
    PullQueue,
    /// Cancel the run, if it answers only prompts that came before `seq`.
    Cancel {
        /// The cancel's place in arrival order.
        seq: u64,
    },
    /// End the session once the run in progress (if any) has ended.
    StopWhenIdle,
    /// End the run in progress at its next turn boundary, as stopped, its
    /// partial work kept.
    StopRun,
    /// The time budget of the run started by prompt `run` is up (the answer to
    /// [`super::Effect::Alarm`], whenever it comes).
    TimeUp {
        /// The prompt that started the run.
        run: u64,
    },
    /// The run's shared budget ([`crate::session::budget::RunMeter`]) is spent,
    /// by this session or another: what streams is cut now, and the run stops at
    /// the boundary after what runs.
    BudgetSpent {
        /// Which budget ([`crate::session::budget::COST`], …).
        reason: &'static str,
    },
    /// A model turn's stream ended.
    TurnFinished {
        /// Which stream.
        stream: u64,
        /// The assembled turn, or why there is none.
        result: Result<AssistantTurn, LlmError>,
    },
    /// The backoff before another attempt is over.
    RetryDue {
        /// The stream id reserved for the attempt.
        stream: u64,
    },
    /// A tool call ended.
    ToolDone(ToolDone),
    /// The Stop (or SubagentStop) hooks of a run about to end ran: why they
    /// block its end, if they do.
    StopHooked {
        /// The run they ran for (the prompt that started it).
        run: u64,
        /// Their reason, told to the model.
        block: Option<String>,
    },
    /// The answer to [`super::Effect::Sync`].
    Synced(Result<(), String>),
    /// The answer to [`super::Effect::TakeOne`] (at most one prompt) or
    /// [`super::Effect::TakeAll`].
    Taken(Vec<QueuedPrompt>),
    /// The answer to [`super::Effect::TakeSteers`]: the steers, and how many
    /// of the session's background sub-agents still run.
    Steers {
        /// The steers (and background results), oldest first.
        prompts: Vec<QueuedPrompt>,
        /// Background sub-agents still running.
        background: usize,
    },
    /// The answer to [`super::Effect::CountWaiting`].
    Waiting(usize),
    /// An effect could not be carried out (the journal refused a record, a stream
    /// could not be started): the run in progress fails with this.
    Failed(SessionError),
}

impl Input {
    /// True for the answer to a question effect, which the driver must hand back
    /// before any other input.
    pub(crate) fn is_answer(&self) -> bool {
        match self {
            Self::Synced(_) | Self::Taken(_) | Self::Steers { .. } | Self::Waiting(_) => true,
            Self::Started { .. }
            | Self::Prompt { .. }
            | Self::PullQueue
            | Self::Cancel { .. }
            | Self::StopWhenIdle
            | Self::StopRun
            | Self::TimeUp { .. }
            | Self::BudgetSpent { .. }
            | Self::TurnFinished { .. }
            | Self::RetryDue { .. }
            | Self::ToolDone(_)
            | Self::StopHooked { .. }
            | Self::Failed(_) => false,
        }
    }
}

/// How one tool call ended.
#[derive(Debug)]
pub(crate) struct ToolDone {
    /// Which tool turn.
    pub(crate) turn: u64,
    /// The call's position in its turn.
    pub(crate) index: usize,
    /// Its result.
    pub(crate) result: ToolResult,
    /// The files it changed.
    pub(crate) changes: Vec<FileChange>,
    /// Tokens it spent through sub-agents.
    pub(crate) spent: Spending,
    /// A hook ended the agent (`continue: false`), for this reason: the run
    /// stops once its turn's calls are done.
    pub(crate) stop: Option<String>,
    /// What the call narrowed the session to from then on (a skill loaded).
    pub(crate) narrowed: Option<crate::tools::narrowing::Narrow>,
}
