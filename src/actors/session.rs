//! Session: one conversation (DESIGN §2). It holds the transcript, enforces the
//! protocol before every request, spawns one LlmStream per model turn and one
//! ToolRunner per tool call, retries retryable failures with backoff, journals every
//! message, and ends every run with exactly one terminal event.
//!
//! A session is transient under the Orchestrator: after a crash it is started again
//! from its journal and carries on with the turn it was in.

pub(crate) mod llm_stream;
pub(crate) mod resume;
mod tool_phase;
pub(crate) mod tool_runner;
pub(crate) mod turn;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};

use self::llm_stream::{LlmStreamActor, LlmStreamArgs, LlmStreamMsg};
use self::resume::{ActiveRun, Next};
use self::tool_phase::{ToolTurn, on_tool_done, record_effects, start_tools};
use self::turn::Decision;
use crate::actors::prompt_queue::{PromptQueueMsg, QueuedPrompt};
use crate::conversation::Usage;
use crate::conversation::{AssistantTurn, Message, ToolResult, enforce_protocol};
use crate::error::{LlmError, SessionError};
use crate::events::Publisher;
use crate::journal::{Record, journal_path, read_journal};
use crate::llm::ChatRequest;
use crate::llm::retry::AfterFailure;
use crate::protocol::{EventKind, Outcome, RunStats, SessionId};
use crate::runtime::{FaultPoint, SessionEnv, SessionSpec};
use crate::tools::FileChange;

/// Messages of a Session.
#[derive(Debug)]
pub(crate) enum SessionMsg {
    /// A prompt was pushed to the PromptQueue: take it when idle.
    Prompt {
        /// The prompt's place in arrival order.
        seq: u64,
    },
    /// Cancel the current run and drop the prompts queued before this cancel.
    Cancel {
        /// The cancel's place in arrival order.
        seq: u64,
    },
    /// An LlmStream ended.
    TurnFinished {
        /// Which stream.
        stream_id: u64,
        /// The assembled turn, or why there is none.
        result: Result<AssistantTurn, LlmError>,
    },
    /// The backoff before another attempt is over.
    Retry {
        /// The stream id reserved for the new attempt.
        stream_id: u64,
    },
    /// A ToolRunner ended.
    ToolDone {
        /// Which tool turn.
        turn_seq: u64,
        /// The call's position in its turn.
        index: usize,
        /// Its result.
        result: ToolResult,
        /// The files it changed.
        changes: Vec<FileChange>,
        /// Tokens it spent through sub-agents.
        spent: Usage,
    },
    /// Start the next queued prompt, if idle.
    PullQueue,
    /// Stop once the current run (if any) has ended, without taking more prompts.
    StopWhenIdle,
}

/// What a Session is started with.
#[derive(Debug)]
pub(crate) struct SessionArgs {
    pub(crate) id: SessionId,
    pub(crate) spec: Arc<SessionSpec>,
    pub(crate) env: Arc<SessionEnv>,
    pub(crate) queue: ActorRef<PromptQueueMsg>,
    /// For a new session: answered once it has started (its header is queued).
    /// `None` for a restart, which rebuilds the session from its journal.
    pub(crate) ready: Option<RpcReplyPort<Result<SessionId, SessionError>>>,
    /// A Stop arrived while it was down: end with the run it resumes, if any.
    pub(crate) stop_when_idle: bool,
}

/// A Session's state.
#[derive(Debug)]
pub(crate) struct SessionState {
    id: SessionId,
    spec: Arc<SessionSpec>,
    env: Arc<SessionEnv>,
    queue: ActorRef<PromptQueueMsg>,
    publisher: Publisher,
    journal_path: PathBuf,
    transcript: Vec<Message>,
    run: Option<Run>,
    next_id: u64,
    resume: Option<ActiveRun>,
    ready: Option<RpcReplyPort<Result<SessionId, SessionError>>>,
    /// Set by `StopWhenIdle`: the session ends with its current run.
    stopping: bool,
}

#[derive(Debug)]
/// One prompt and everything it caused, until its terminal event.
struct Run {
    /// The prompts it answers: the one that started it, then any that joined.
    prompts: Vec<u64>,
    /// When the run began.
    started: Instant,
    /// Its counters so far.
    stats: RunStats,
    /// The last text the model produced: the partial answer if the run stops early.
    last_text: String,
    /// The stamp of the cancel that ended this run, once one arrived.
    cancelled: Option<u64>,
    /// Where the run is.
    phase: Phase,
}

#[derive(Debug)]
/// Where a run is.
enum Phase {
    /// Between steps (also while a tool turn is being wrapped up).
    Starting,
    /// A model turn is streaming.
    Streaming {
        /// Its LlmStream.
        stream: ActorRef<LlmStreamMsg>,
        /// The stream's id; a `TurnFinished` with another id is stale.
        id: u64,
        /// The attempt, from 1.
        attempt: u32,
    },
    /// Waiting before another attempt.
    Backoff {
        /// The id the next stream will have.
        id: u64,
        /// The attempt that failed.
        attempt: u32,
    },
    /// The turn's tool calls are running.
    Tools(ToolTurn),
}

/// Whether a cancel stamped `cancel` applies to a run answering `prompts`: only if
/// it came after all of them (a prompt sent after a cancel is never cancelled by
/// it).
fn cancels(cancel: u64, prompts: &[u64]) -> bool {
    prompts.iter().all(|p| *p < cancel)
}

impl Run {
    fn new(prompts: Vec<u64>, turns: u32) -> Self {
        Self {
            prompts,
            started: Instant::now(),
            stats: RunStats {
                turns,
                ..RunStats::default()
            },
            last_text: String::new(),
            cancelled: None,
            phase: Phase::Starting,
        }
    }
}

/// The Session actor.
#[derive(Debug)]
pub(crate) struct SessionActor;

impl Actor for SessionActor {
    type Msg = SessionMsg;
    type State = SessionState;
    type Arguments = SessionArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: SessionArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let SessionArgs {
            id,
            spec,
            env,
            queue,
            ready,
            stop_when_idle,
        } = args;
        let resume = ready.is_none();
        let journal_path = journal_path(&env.workspace, id);
        let publisher = Publisher::new(env.bus.clone(), id, spec.parent, &spec.agent);
        let mut state = SessionState {
            id,
            publisher,
            journal_path,
            transcript: Vec::new(),
            run: None,
            next_id: 0,
            resume: None,
            ready,
            stopping: stop_when_idle,
            spec,
            env,
            queue,
        };
        if resume {
            let resumed = resume::resume(&read_journal(&state.journal_path)?);
            state.transcript = resumed.transcript;
            state.resume = resumed.active;
        } else {
            state.journal(&Record::Header {
                session: id,
                agent: state.spec.agent.clone(),
                model: state.spec.model.clone(),
                parent: state.spec.parent,
                tool_call_id: state.spec.tool_call_id.clone(),
            })?;
            for message in state.spec.history.clone() {
                state.record(message)?;
            }
        }
        state.publisher.publish(EventKind::SessionStarted {
            model: state.spec.model.clone(),
            resumed: resume,
        });
        Ok(state)
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let Some(active) = state.resume.take() else {
            // A new session's header is queued, not synced: its first turn
            // boundary (or its first side-effecting tool) syncs it with the
            // turn's records. Waiting here would put the creation of every
            // sub-agent's journal file, serial in the writer, before its first
            // model request. The runtime made the journal directory at start, so
            // a workspace that cannot hold journals has already been refused.
            if let Some(ready) = state.ready.take() {
                let _ = ready.send(Ok(state.id));
            }
            if state.stopping {
                // Told to stop while it was down, and no run to finish.
                myself.stop(Some("stopped".into()));
            } else {
                let _ = myself.cast(SessionMsg::PullQueue);
            }
            return Ok(());
        };
        // A cancel that arrived just before the crash still cancels the run.
        match ractor::call!(state.queue, PromptQueueMsg::TakeCancel) {
            Ok(Some(seq)) if cancels(seq, &active.prompts) => {
                let mut run = Run::new(active.prompts, active.turns);
                run.cancelled = Some(seq);
                state.run = Some(run);
                end_run(&myself, state, |stats| Outcome::Cancelled {
                    partial: String::new(),
                    stats,
                })
                .await;
            }
            Ok(_) | Err(_) => resume_run(&myself, state, active).await,
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SessionMsg::Prompt { seq } => on_prompt(&myself, state, seq).await,
            SessionMsg::Cancel { seq } => on_cancel(&myself, state, seq).await,
            SessionMsg::TurnFinished { stream_id, result } => {
                on_turn_finished(&myself, state, stream_id, result).await
            }
            SessionMsg::Retry { stream_id } => on_retry(&myself, state, stream_id).await,
            SessionMsg::ToolDone {
                turn_seq,
                index,
                result,
                changes,
                spent,
            } => {
                record_effects(state, &result.tool_call_id, changes, &spent);
                on_tool_done(&myself, state, turn_seq, index, result).await
            }
            SessionMsg::PullQueue => pull_queue(&myself, state).await,
            SessionMsg::StopWhenIdle => {
                state.stopping = true;
                if state.run.is_none() {
                    myself.stop(Some("stopped".into()));
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            // Streams and runners report through messages before they stop, so a
            // clean stop needs nothing; it must not stop the session (ractor's default).
            SupervisionEvent::ActorStarted(_) | SupervisionEvent::ProcessGroupChanged(_) => {}
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                tracing::trace!(session = %state.id, child = %cell.get_id(), "child stopped");
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                let id = cell.get_id();
                tracing::warn!(session = %state.id, child = %id, error = %err, "child crashed");
                let phase = state.run.as_ref().map(|r| &r.phase);
                match phase {
                    Some(Phase::Streaming {
                        stream,
                        id: stream_id,
                        ..
                    }) if stream.get_id() == id => {
                        let stream_id = *stream_id;
                        let error = LlmError::Crashed(format!("the stream actor failed: {err}"));
                        on_turn_finished(&myself, state, stream_id, Err(error)).await;
                    }
                    Some(Phase::Tools(turn)) => {
                        if let Some(&index) = turn.running.get(&id) {
                            let seq = turn.seq;
                            let call_id = turn.calls[index].id.clone();
                            let result = ToolResult {
                                tool_call_id: call_id,
                                content: format!("Error: the tool runner crashed: {err}"),
                                is_error: true,
                            };
                            on_tool_done(&myself, state, seq, index, result).await;
                        }
                    }
                    // A child of an earlier turn or phase: its result no longer matters.
                    Some(Phase::Streaming { .. } | Phase::Starting | Phase::Backoff { .. })
                    | None => {}
                }
            }
        }
        Ok(())
    }
}

impl SessionState {
    fn journal(&self, record: &Record) -> Result<(), SessionError> {
        self.env
            .journal
            .append(&self.journal_path, record)
            .map_err(SessionError::Journal)
    }

    /// Journals `marker` and `message` together, then adds the message.
    fn record_after(&mut self, marker: Record, message: Message) -> Result<(), SessionError> {
        let records = [
            marker,
            Record::Message {
                message: message.clone(),
            },
        ];
        self.env
            .journal
            .append_all(&self.journal_path, &records)
            .map_err(SessionError::Journal)?;
        self.transcript.push(message);
        Ok(())
    }

    fn record(&mut self, message: Message) -> Result<(), SessionError> {
        self.journal(&Record::Message {
            message: message.clone(),
        })?;
        self.transcript.push(message);
        Ok(())
    }

    async fn sync(&self) -> Result<(), SessionError> {
        self.env.journal.sync().await.map_err(SessionError::Journal)
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

async fn resume_run(myself: &ActorRef<SessionMsg>, state: &mut SessionState, active: ActiveRun) {
    state.run = Some(Run::new(active.prompts, active.turns));
    match active.next {
        Next::Request => begin_turn(myself, state, 1).await,
        Next::Finish(text) => {
            if let Some(run) = state.run.as_mut() {
                run.last_text = text.clone();
            }
            end_run(myself, state, |stats| Outcome::Finished {
                text,
                truncated: false,
                stats,
            })
            .await;
        }
        Next::Tools(pending) => {
            let tools = &state.spec.tools;
            let (replay, lost) = resume::replay_or_lost(pending, |name| {
                tools.get(name).is_some_and(|t| t.read_only())
            });
            for call in lost {
                if let Err(e) = state.record(Message::Tool(ToolResult::interrupted(&call.id))) {
                    return fail(myself, state, e).await;
                }
            }
            if replay.is_empty() {
                begin_turn(myself, state, 1).await;
            } else {
                start_tools(myself, state, replay).await;
            }
        }
    }
}

/// A prompt was queued for this session: take it now if idle, else say it waits.
async fn on_prompt(myself: &ActorRef<SessionMsg>, state: &mut SessionState, seq: u64) {
    if state.run.is_none() {
        return pull_queue(myself, state).await;
    }
    // Nothing waits when the prompt was already taken (it started the current run).
    if let Ok(waiting) = ractor::call!(state.queue, PromptQueueMsg::Waiting, seq)
        && waiting > 0
    {
        state.publisher.publish(EventKind::PromptQueued { waiting });
    }
}

async fn pull_queue(myself: &ActorRef<SessionMsg>, state: &mut SessionState) {
    if state.run.is_some() {
        return;
    }
    if let Ok(Some(prompt)) = ractor::call!(state.queue, PromptQueueMsg::TakeOne) {
        start_run(myself, state, prompt).await;
    }
}

async fn start_run(myself: &ActorRef<SessionMsg>, state: &mut SessionState, prompt: QueuedPrompt) {
    state.run = Some(Run::new(vec![prompt.seq], 0));
    // Not synced here: the prompt is durable with the first turn boundary's group,
    // and a crashed session still finds it, since the writer outlives sessions.
    let started = Record::RunStarted { prompt: prompt.seq };
    if let Err(e) = state.record_after(started, Message::user(prompt.text)) {
        return fail(myself, state, e).await;
    }
    begin_turn(myself, state, 1).await;
}

async fn begin_turn(myself: &ActorRef<SessionMsg>, state: &mut SessionState, attempt: u32) {
    let max_turns = state.spec.max_turns;
    let Some(run) = state.run.as_mut() else {
        return;
    };
    if attempt == 1 {
        if run.stats.turns >= max_turns {
            return fail(myself, state, SessionError::MaxTurns(max_turns)).await;
        }
        run.stats.turns += 1;
        if let Some(fault) = &state.spec.faults {
            fault.strike(FaultPoint::BeforeTurn(run.stats.turns));
        }
    }
    let turn = run.stats.turns;
    let (messages, repairs) = enforce_protocol(&state.transcript);
    if repairs.inserted + repairs.dropped > 0 {
        tracing::warn!(session = %state.id, ?repairs, "repaired the transcript before the request");
    }
    let mut all = Vec::with_capacity(messages.len() + 1);
    if !state.spec.system_prompt.is_empty() {
        all.push(Message::system(state.spec.system_prompt.clone()));
    }
    all.extend(messages);
    let request = ChatRequest {
        model: state.spec.model.clone(),
        messages: all,
        tools: state.spec.tools.specs(),
        max_tokens: None,
        place: format!("{}/turn {turn}", state.spec.place),
    };
    let id = state.next_id();
    let args = LlmStreamArgs {
        request,
        provider: (state.spec.provider.as_ref())
            .unwrap_or(&state.env.provider)
            .clone(),
        publisher: state.publisher.clone(),
        session: myself.clone(),
        stream_id: id,
    };
    match Actor::spawn_linked(None, LlmStreamActor, args, myself.get_cell()).await {
        Ok((stream, _)) => {
            if let Some(run) = state.run.as_mut() {
                run.phase = Phase::Streaming {
                    stream,
                    id,
                    attempt,
                };
            }
            state
                .publisher
                .publish(EventKind::TurnStarted { turn, attempt });
        }
        Err(e) => fail(myself, state, SessionError::Spawn(e.to_string())).await,
    }
}

async fn on_turn_finished(
    myself: &ActorRef<SessionMsg>,
    state: &mut SessionState,
    stream_id: u64,
    result: Result<AssistantTurn, LlmError>,
) {
    let Some(run) = state.run.as_mut() else {
        return;
    };
    let Phase::Streaming { id, attempt, .. } = run.phase else {
        return;
    };
    if id != stream_id {
        return;
    }
    let error = match result {
        Ok(turn) => match turn::decide(&turn) {
            _ if run.cancelled.is_some() => {
                return record_turn_and_cancel(myself, state, turn).await;
            }
            Decision::RunTools => return on_tool_turn(myself, state, turn).await,
            Decision::Finish { truncated } => {
                return on_final_turn(myself, state, turn, truncated).await;
            }
            Decision::Fail(e) => LlmError::Stream(e),
        },
        Err(LlmError::Cancelled { partial }) => {
            return record_turn_and_cancel(myself, state, *partial).await;
        }
        Err(error) => error,
    };
    // A cancel that crossed a failing stream still ends the run as cancelled.
    if run.cancelled.is_some() {
        return end_cancelled(myself, state).await;
    }
    let policy = state.env.retry;
    match policy.after_failure(error.class(), attempt, rand::random::<f64>()) {
        AfterFailure::Retry(delay) => {
            state.publisher.publish(EventKind::Retrying {
                attempt,
                max_attempts: policy.max_attempts,
                delay_ms: delay.as_millis() as u64,
                reason: error.to_string(),
            });
            tracing::info!(session = %state.id, attempt, ?delay, %error, "retrying the model turn");
            let id = state.next_id();
            if let Some(run) = state.run.as_mut() {
                run.phase = Phase::Backoff { id, attempt };
            }
            myself.send_after(delay, move || SessionMsg::Retry { stream_id: id });
        }
        AfterFailure::Exhausted => {
            let e = SessionError::RetriesExhausted {
                attempts: attempt,
                last: Box::new(error),
            };
            fail(myself, state, e).await;
        }
        AfterFailure::Fatal => fail(myself, state, SessionError::Llm(error)).await,
    }
}

async fn on_retry(myself: &ActorRef<SessionMsg>, state: &mut SessionState, stream_id: u64) {
    let Some(Run {
        phase: Phase::Backoff { id, attempt },
        ..
    }) = state.run
    else {
        return;
    };
    if id == stream_id {
        begin_turn(myself, state, attempt + 1).await;
    }
}

/// Counts a completed turn: usage, the last text, the event, the journal.
fn account(state: &mut SessionState, turn: &AssistantTurn) -> Result<String, SessionError> {
    let Some(run) = state.run.as_mut() else {
        return Ok(String::new());
    };
    let usage = turn.usage.unwrap_or_default();
    run.stats.usage.add(&usage);
    let text = turn.message.answer().to_owned();
    if !text.is_empty() {
        run.last_text = text.clone();
    }
    state.publisher.publish(EventKind::TurnFinished {
        turn: run.stats.turns,
        text: text.clone(),
        tool_calls: turn.message.tool_calls.len(),
        usage,
    });
    if !turn.is_empty() {
        state.record(Message::Assistant(turn.message.clone()))?;
    }
    Ok(text)
}

async fn on_tool_turn(
    myself: &ActorRef<SessionMsg>,
    state: &mut SessionState,
    turn: AssistantTurn,
) {
    if let Err(e) = account(state, &turn) {
        return fail(myself, state, e).await;
    }
    start_tools(myself, state, turn.message.tool_calls).await;
}

async fn on_final_turn(
    myself: &ActorRef<SessionMsg>,
    state: &mut SessionState,
    turn: AssistantTurn,
    truncated: bool,
) {
    match account(state, &turn) {
        // Durable with the terminal record's sync in end_run.
        Ok(text) => {
            end_run(myself, state, |stats| Outcome::Finished {
                text,
                truncated,
                stats,
            })
            .await
        }
        Err(e) => fail(myself, state, e).await,
    }
}

/// The run was cancelled: keep what the model had said (without its tool calls,
/// which will never run) and end the run.
async fn record_turn_and_cancel(
    myself: &ActorRef<SessionMsg>,
    state: &mut SessionState,
    mut turn: AssistantTurn,
) {
    turn.message.tool_calls.clear();
    if let Err(e) = account(state, &turn) {
        tracing::error!(session = %state.id, error = %e, "cannot journal the partial answer");
    }
    end_cancelled(myself, state).await;
}

/// Ends the run as cancelled, its last text as the partial answer.
pub(super) async fn end_cancelled(myself: &ActorRef<SessionMsg>, state: &mut SessionState) {
    let partial = state
        .run
        .as_ref()
        .map(|r| r.last_text.clone())
        .unwrap_or_default();
    end_run(myself, state, |stats| Outcome::Cancelled { partial, stats }).await;
}

async fn on_cancel(myself: &ActorRef<SessionMsg>, state: &mut SessionState, seq: u64) {
    let Some(run) = state.run.as_mut().filter(|r| cancels(seq, &r.prompts)) else {
        let _ = state.queue.cast(PromptQueueMsg::CancelDone(seq));
        return;
    };
    run.cancelled = Some(seq);
    match &run.phase {
        Phase::Streaming { stream, .. } => {
            let _ = stream.cast(LlmStreamMsg::Cancel);
        }
        Phase::Tools(turn) => turn.cancel.cancel(),
        Phase::Backoff { .. } | Phase::Starting => {
            end_cancelled(myself, state).await;
        }
    }
}

async fn fail(myself: &ActorRef<SessionMsg>, state: &mut SessionState, error: SessionError) {
    tracing::warn!(session = %state.id, %error, "run failed");
    let partial = state
        .run
        .as_ref()
        .map(|r| r.last_text.clone())
        .unwrap_or_default();
    end_run(myself, state, |stats| {
        Outcome::failed(&error, partial, stats)
    })
    .await;
}

/// Ends the run with exactly one terminal record and event, then looks for the next
/// queued prompt.
async fn end_run(
    myself: &ActorRef<SessionMsg>,
    state: &mut SessionState,
    outcome: impl FnOnce(RunStats) -> Outcome,
) {
    let Some(mut run) = state.run.take() else {
        return;
    };
    if let Some(seq) = run.cancelled {
        let _ = state.queue.cast(PromptQueueMsg::CancelDone(seq));
    }
    run.stats.duration_ms = run.started.elapsed().as_millis() as u64;
    let outcome = outcome(run.stats);
    let journaled = state.journal(&Record::Terminal {
        outcome: outcome.clone(),
    });
    if let Err(e) = journaled.and(state.sync().await) {
        // The run has ended either way; say so rather than lose the outcome too.
        tracing::error!(session = %state.id, error = %e, "cannot journal the end of the run");
    }
    state.publisher.publish(EventKind::Terminal {
        prompts: run.prompts,
        outcome,
    });
    if state.stopping {
        myself.stop(Some("stopped".into()));
    } else {
        let _ = myself.cast(SessionMsg::PullQueue);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cancel_applies_only_to_runs_whose_prompts_came_before_it() {
        assert!(super::cancels(5, &[3, 4]));
        assert!(!super::cancels(5, &[3, 6]));
        assert!(!super::cancels(5, &[5]));
    }
}
