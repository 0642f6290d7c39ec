//! Session: one conversation, as an actor. Every decision is the run
//! machine's ([`crate::session::machine`]); this actor turns its messages into the
//! machine's inputs and carries out the effects, in order: it journals, publishes,
//! spawns one LlmStream per model turn and one ToolRunner per tool call, schedules
//! retries and takes prompts from its queue.
//!
//! A session is transient under the Orchestrator: after a crash it is started again
//! from its journal and carries on with the turn it was in.

pub(crate) mod check;
mod effects;
pub(crate) mod llm_stream;
pub(crate) mod tool_runner;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio_util::sync::CancellationToken;

use self::effects::tool_error;
use self::llm_stream::LlmStreamMsg;
use super::{AbortOnDrop, SessionEnv};
use crate::conversation::AssistantTurn;
use crate::error::{LlmError, SessionError};
use crate::events::Publisher;
use crate::journal::Record;
use crate::protocol::SessionId;
use crate::session::SessionSpec;
use crate::session::machine::{Input, Machine, MachineArgs, ToolDone};
use crate::session::queue::SharedQueue;

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
    ToolDone(ToolDone),
    /// Start the next queued prompt, if idle.
    PullQueue,
    /// Stop once the current run (if any) has ended, without taking more prompts.
    StopWhenIdle,
    /// End the current run at its next turn boundary, as stopped.
    StopRun,
    /// The time budget of the run started by prompt `run` is up.
    TimeUp {
        /// The prompt that started the run.
        run: u64,
    },
    /// The run's shared budget is spent.
    BudgetSpent(&'static str),
    /// The Stop (or SubagentStop) hooks of run `run` ran: why they block its
    /// end, if they do.
    StopHooked { run: u64, block: Option<String> },
    /// Run a check (`check::CheckRun`): outside the run machine, which it does
    /// not change.
    Check {
        /// The command.
        command: String,
        /// The Bash tool it runs with.
        bash: Arc<dyn crate::tools::Tool>,
        /// How long it may take.
        timeout: std::time::Duration,
        /// Cancelled when whoever waits for it is.
        cancel: CancellationToken,
        /// Where its result goes.
        reply: ractor::RpcReplyPort<check::CheckRun>,
    },
    /// Panic, for the tests of supervision.
    #[cfg(feature = "test-support")]
    Crash,
}

impl From<SessionMsg> for Input {
    fn from(msg: SessionMsg) -> Self {
        match msg {
            SessionMsg::Prompt { seq } => Self::Prompt { seq },
            SessionMsg::Cancel { seq } => Self::Cancel { seq },
            SessionMsg::TurnFinished { stream_id, result } => Self::TurnFinished {
                stream: stream_id,
                result,
            },
            SessionMsg::Retry { stream_id } => Self::RetryDue { stream: stream_id },
            SessionMsg::ToolDone(done) => Self::ToolDone(done),
            SessionMsg::PullQueue => Self::PullQueue,
            SessionMsg::StopWhenIdle => Self::StopWhenIdle,
            SessionMsg::StopRun => Self::StopRun,
            SessionMsg::TimeUp { run } => Self::TimeUp { run },
            SessionMsg::BudgetSpent(reason) => Self::BudgetSpent { reason },
            SessionMsg::StopHooked { run, block } => Self::StopHooked { run, block },
            SessionMsg::Check { .. } => unreachable!("a check is taken in `handle`"),
            // Turned into an input inside `handle`: the panic is the session's.
            #[cfg(feature = "test-support")]
            SessionMsg::Crash => panic!("injected fault: the session was crashed from outside"),
        }
    }
}

/// What a Session is started with.
#[derive(Debug)]
pub(crate) struct SessionArgs {
    pub(crate) id: SessionId,
    /// Its run: the lead session's id.
    pub(crate) run: SessionId,
    pub(crate) spec: Arc<SessionSpec>,
    pub(crate) env: Arc<SessionEnv>,
    pub(crate) queue: SharedQueue,
    /// Its events' publisher, which keeps them in its journal.
    pub(crate) publisher: Publisher,
    /// Answered once it has started (a new session's header is queued). `None`
    /// for a restart after a crash.
    pub(crate) ready: Option<RpcReplyPort<Result<SessionId, SessionError>>>,
    /// Its journal's records, when it is rebuilt from them (a restart, or a run
    /// resumed by a new process) rather than new: read by the Orchestrator, in a
    /// task, before it is spawned.
    pub(crate) journal: Option<Vec<Record>>,
    /// A Stop arrived while it was down: end with the run it resumes, if any.
    pub(crate) stop_when_idle: bool,
}

/// A Session's state: its machine, and the handles of what the machine started.
#[derive(Debug)]
pub(crate) struct SessionState {
    id: SessionId,
    machine: Machine,
    spec: Arc<SessionSpec>,
    env: Arc<SessionEnv>,
    queue: SharedQueue,
    publisher: Publisher,
    journal_path: PathBuf,
    ready: Option<RpcReplyPort<Result<SessionId, SessionError>>>,
    /// The model turn streaming now, by the machine's stream id.
    stream: Option<(u64, ActorRef<LlmStreamMsg>)>,
    /// The tool turn running now, the token that cancels its calls, and
    /// whether the person refused one of them.
    tool_turn: Option<(u64, CancellationToken, Arc<std::sync::atomic::AtomicBool>)>,
    /// Running calls by their ToolRunner: tool turn, position, call id.
    runners: HashMap<ActorId, (u64, usize, String)>,
    /// Waits for the run's shared budget to be spent, to say so at once.
    budget_watch: Option<AbortOnDrop>,
    /// Where its tools work: the runtime's workspace, or its private checkout.
    place: Arc<Place>,
    /// What narrows what its calls may do (a slash command's, a loaded
    /// skill's `allowed-tools`).
    narrowing: Arc<crate::tools::narrowing::Narrowing>,
}

/// Where a session's tools work.
#[derive(Debug)]
pub(crate) struct Place {
    /// Its run.
    pub(crate) run: SessionId,
    /// The folder every path is resolved against.
    pub(crate) workspace: PathBuf,
    /// The private checkout that folder is in, for an isolated sub-agent.
    pub(crate) checkout: Option<Arc<crate::protocol::Checkout>>,
    /// The run's permission rules, their relative paths from `workspace`.
    pub(crate) rules: Arc<crate::tools::rules::Rules>,
}

impl Place {
    /// Where a session of `run` running `spec` works in `env`.
    fn of(run: SessionId, spec: &SessionSpec, env: &SessionEnv) -> Self {
        match &spec.checkout {
            None => Self {
                run,
                workspace: env.workspace.clone(),
                checkout: None,
                rules: env.rules.clone(),
            },
            Some(checkout) => Self {
                run,
                workspace: checkout.workdir.clone(),
                checkout: Some(Arc::new(checkout.clone())),
                rules: Arc::new(crate::tools::rules::Rules {
                    workspace: checkout.workdir.clone(),
                    ..(*env.rules).clone()
                }),
            },
        }
    }
}

/// The highest prompt stamp a journal holds.
fn last_stamp(records: &[Record]) -> u64 {
    records
        .iter()
        .filter_map(|r| match r {
            Record::RunStarted { prompt, .. } | Record::PromptJoined { prompt, .. } => {
                Some(*prompt)
            }
            _ => None,
        })
        .max()
        .unwrap_or(0)
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
        myself: ActorRef<Self::Msg>,
        args: SessionArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let SessionArgs {
            id,
            run,
            spec,
            env,
            queue,
            publisher,
            ready,
            journal: records,
            stop_when_idle,
        } = args;
        let journal_path = env.state.journal(id);
        if let Some(records) = &records {
            // Prompts and cancels sent from now on must come after the journal's.
            env.stamps
                .fetch_max(last_stamp(records) + 1, Ordering::SeqCst);
        }
        let machine_args = MachineArgs {
            id,
            run,
            spec: spec.clone(),
            retry: env.retry,
            max_parallel_tools: env.max_parallel_tools,
            stopping: stop_when_idle,
            seed: rand::random(),
        };
        // What narrowed it before (a skill it loaded) still narrows it.
        let narrowing = crate::tools::narrowing::Narrowing::new(spec.narrowing.clone());
        for narrow in crate::session::narrowed::journaled(records.as_deref().unwrap_or_default()) {
            narrowing.add(narrow);
        }
        let (machine, effects) = Machine::start(machine_args, records.as_deref());
        let place = Arc::new(Place::of(run, &spec, &env));
        let mut state = SessionState {
            place,
            id,
            machine,
            publisher,
            spec,
            env,
            queue,
            journal_path,
            ready,
            stream: None,
            tool_turn: None,
            runners: HashMap::new(),
            budget_watch: None,
            narrowing: Arc::new(narrowing),
        };
        for effect in effects {
            if let Some(Input::Failed(error)) = Box::pin(state.carry_out(&myself, effect)).await {
                return Err(error.into());
            }
        }
        Ok(state)
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (cancel, stop) = if state.machine.resuming() {
            let mut queue = state.queue.lock();
            (queue.take_cancel(), queue.take_stop())
        } else {
            (None, false)
        };
        if let Some(ready) = state.ready.take()
            && ready.send(Ok(state.id)).is_err()
            && !state.machine.resuming()
        {
            // Whoever started it went away before it was up (a cancelled Task
            // call): nobody will prompt it.
            myself.stop(Some("nobody waits for it".into()));
            return Ok(());
        }
        if let Some(mut reached) = state.spec.meter.as_ref().and_then(|m| m.watch()) {
            let session = myself.clone();
            let watch = tokio::spawn(async move {
                if let Ok(limit) = reached.wait_for(Option::is_some).await
                    && let Some(limit) = *limit
                {
                    let _ = session.cast(SessionMsg::BudgetSpent(limit));
                }
            });
            state.budget_watch = Some(AbortOnDrop(watch));
        }
        Box::pin(state.drive(&myself, Input::Started { cancel, stop })).await;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // A stop request waits in the queue until taken here, so that one sent
        // while the session was down reaches its next incarnation.
        if matches!(msg, SessionMsg::StopRun) && !state.queue.lock().take_stop() {
            return Ok(());
        }
        if let SessionMsg::Check {
            command,
            bash,
            timeout,
            cancel,
            reply,
        } = msg
        {
            state.run_check(&command, bash, timeout, cancel, reply);
            return Ok(());
        }
        Box::pin(state.drive(&myself, msg.into())).await;
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Its journal's file need not stay open (ten thousand sub-agents would
        // hold ten thousand); a restarted session's next record reopens it.
        state.env.journal.ended(&state.journal_path);
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
                state.runners.remove(&cell.get_id());
                tracing::trace!(session = %state.id, child = %cell.get_id(), "child stopped");
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                let id = cell.get_id();
                tracing::warn!(session = %state.id, child = %id, error = %err, "child crashed");
                let input = match &state.stream {
                    Some((stream, actor)) if actor.get_id() == id => Some(Input::TurnFinished {
                        stream: *stream,
                        result: Err(LlmError::Crashed(format!("the stream actor failed: {err}"))),
                    }),
                    // A child of an earlier turn: its result no longer matters.
                    Some(_) | None => state.runners.remove(&id).map(|(turn, index, call_id)| {
                        tool_error(
                            turn,
                            index,
                            call_id,
                            &format!("the tool runner crashed: {err}"),
                        )
                    }),
                };
                if let Some(input) = input {
                    Box::pin(state.drive(&myself, input)).await;
                }
            }
        }
        Ok(())
    }
}

impl SessionState {
    /// Hands `input` to the machine and carries out its effects, then those of the
    /// inputs they produce: an answer to a question before anything else, a
    /// failure after the effects already decided.
    ///
    /// The actor's handlers box this future (and `pre_start` its effects): an
    /// actor's task holds the largest of its handlers' futures for as long as it
    /// lives, and an idle session should hold a pointer, not three kilobytes.
    async fn drive(&mut self, myself: &ActorRef<SessionMsg>, input: Input) {
        // A stream that has answered is done: holding its reference would keep its
        // mailboxes (kilobytes) alive through the tool calls that follow.
        if let Input::TurnFinished { stream, .. } = &input
            && self.stream.as_ref().is_some_and(|(s, _)| s == stream)
        {
            self.stream = None;
        }
        let mut inputs = VecDeque::from([input]);
        while let Some(input) = inputs.pop_front() {
            let effects = self.machine.handle(Instant::now(), input);
            // What `Handle::is_busy` reads, told before the effects: a run's
            // terminal event is never seen while it still counts as running.
            self.queue.lock().set_running(self.machine.running());
            for effect in effects {
                match self.carry_out(myself, effect).await {
                    Some(answer) if answer.is_answer() => inputs.push_front(answer),
                    Some(other) => inputs.push_back(other),
                    None => {}
                }
            }
        }
    }
}
