//! What the run machine asks to be done: the [`Effect`]s a Session carries out, in
//! order.

use std::time::Duration;

use crate::conversation::ToolCall;
use crate::journal::Record;
use crate::llm::ChatRequest;
use crate::protocol::EventKind;

/// What the machine asks to be done, in order.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Effect {
    /// Append these records to the session's journal, together (not yet durable).
    Journal(Vec<Record>),
    /// Make everything journaled so far durable; answer [`super::Input::Synced`].
    Sync,
    /// Make everything journaled so far durable without waiting for it, within
    /// a second or with the session's next [`Effect::Sync`] (whichever comes
    /// first). Nothing answers; a failure is that next sync's answer.
    SyncInBackground,
    /// Publish this event as the session.
    Publish(EventKind),
    /// Narrow the session's calls to what this allows, from now on (its
    /// record is journaled with it).
    Narrow(crate::tools::narrowing::Narrow),
    /// Start a model turn: stream this request; it ends with
    /// [`super::Input::TurnFinished`] for `stream`.
    StartStream {
        /// The stream's id.
        stream: u64,
        /// What to send.
        request: ChatRequest,
        /// Publish no deltas: a compaction's summary is not the agent speaking.
        quiet: bool,
    },
    /// Stream with the spec's fallback model's provider from now on.
    FallBack,
    /// The conversation is about to be compacted: run the PreCompact hooks,
    /// without waiting for them.
    PreCompact,
    /// Run the Stop hooks (SubagentStop for a sub-agent) of a run about to
    /// end; `active`: an earlier run of them kept it going. They answer with
    /// [`super::Input::StopHooked`], at once when there are none.
    StopHooks {
        /// The run (the prompt that started it), which the answer names.
        run: u64,
        /// `stop_hook_active`.
        active: bool,
    },
    /// Follow background sub-agent `task` again, which the Task call `call`
    /// of the run being resumed started and whose result the run has not had:
    /// the call is made again as resumed, and returns once the sub-agent is
    /// followed (found, resumed or started).
    Reattach {
        /// The Task call.
        call: ToolCall,
        /// Its task id.
        task: crate::protocol::SessionId,
    },
    /// Stop reading stream `stream`; it ends with a cancelled turn.
    CancelStream {
        /// Which stream.
        stream: u64,
    },
    /// Send [`super::Input::RetryDue`] for `stream` after `delay`.
    RetryAfter {
        /// The id the next stream will have.
        stream: u64,
        /// How long to wait.
        delay: Duration,
    },
    /// Run one tool call; it ends with [`super::Input::ToolDone`].
    StartTool {
        /// Its tool turn.
        turn: u64,
        /// Its position in the turn.
        index: usize,
        /// The call.
        call: ToolCall,
        /// An earlier incarnation of the session had started it.
        resumed: bool,
    },
    /// Cancel every running call of tool turn `turn`.
    CancelTools {
        /// Which tool turn.
        turn: u64,
    },
    /// Take the oldest queued prompt; answer [`super::Input::Taken`].
    TakeOne,
    /// Take the queued prompts that join the run in progress (one a slash
    /// command narrows waits for a run of its own, with those after it);
    /// answer [`super::Input::Taken`].
    TakeAll,
    /// Take the queued steers (messages for the run in progress); answer
    /// [`super::Input::Taken`].
    TakeSteers,
    /// Count the queued prompts stamped up to `seq`; answer [`super::Input::Waiting`].
    CountWaiting {
        /// The stamp.
        seq: u64,
    },
    /// Add a turn's spending to the run's shared meter.
    Charge {
        /// Its tokens.
        usage: crate::conversation::Usage,
        /// Their cost in USD, when known.
        cost: Option<f64>,
    },
    /// Send [`super::Input::TimeUp`] for run `run` after `after`.
    Alarm {
        /// The prompt that started the run.
        run: u64,
        /// How long from now.
        after: Duration,
    },
    /// Tell the queue that the cancel stamped `seq` has been acted on.
    CancelDone {
        /// The cancel's stamp.
        seq: u64,
    },
    /// Come back with [`super::Input::PullQueue`] after the messages already waiting.
    PullLater,
    /// The session ends.
    Stop,
    /// Panic here, as a [`crate::faults::FaultPlan`] asks.
    #[cfg(feature = "test-support")]
    Crash(crate::faults::FaultPoint),
}
