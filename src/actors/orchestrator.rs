//! Orchestrator: the root supervisor, one per process. It starts sessions and
//! resumes them from their journals, keeps each one's prompt queue, routes prompts
//! and cancels into it, finds the sub-agent a parent's Task call started, and
//! applies the restart policy when a session crashes ([`restarts`]). Its
//! handlers only send and spawn: what waits on the disk (reading a journal to
//! start a session from it, syncing the journals before a restart, reading
//! earlier processes' headers) runs in a task whose result comes back as a
//! message, so no prompt, cancel or stop ever queues behind it.
//!
//! A session's queue is plain shared state ([`SharedQueue`]) beside the session,
//! not an actor: the Orchestrator applies each prompt and cancel to it before it
//! tells the session, and the session takes from it. It outlives the session's
//! crashes, and, holding no mailbox, it has nothing to lose in one of its own.

mod children;
pub(crate) mod mcp_server;
mod restarts;

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};

use self::children::{Children, Lookup, Question};
use super::SessionEnv;
use super::session::{SessionActor, SessionArgs, SessionMsg};
use super::supervision::{Intensity, RestartTracker, RestartType};
use crate::error::SessionError;
use crate::events::Publisher;
use crate::journal::Record;
use crate::journal::recorder::Recorder;
use crate::protocol::{EventKind, Outcome, RunStats, SessionId};
use crate::session::SessionSpec;
use crate::session::queue::{QueuedPrompt, SharedQueue};

/// Messages of the Orchestrator.
#[derive(Debug)]
pub(crate) enum OrchestratorMsg {
    /// Start session `id`; replies with its id once it has started.
    Start {
        /// The new session's id (chosen by the caller, who may subscribe to its
        /// events first).
        id: SessionId,
        /// What it is.
        spec: Box<SessionSpec>,
        /// Its first prompt, routed as soon as it is spawned: a Task call's, so
        /// that a fan-out's sub-agents each begin their run as they start, not
        /// once every other sub-agent's start has gone through this mailbox.
        prompt: Option<QueuedPrompt>,
        /// The answer.
        reply: RpcReplyPort<Result<SessionId, SessionError>>,
    },
    /// Start a session again from its journal (its run resumed by a new process),
    /// unless it is live already; replies with its id.
    Resume(
        SessionId,
        Box<SessionSpec>,
        RpcReplyPort<Result<SessionId, SessionError>>,
    ),
    /// The session the call `call` of session `parent` started, if any.
    FindChild {
        /// The parent session.
        parent: SessionId,
        /// Its Task call.
        call: String,
        /// The child and where it is.
        reply: RpcReplyPort<Option<(SessionId, Whereabouts)>>,
    },
    /// Deliver a prompt.
    Prompt {
        /// The session.
        session: SessionId,
        /// Arrival order, shared with cancels.
        seq: u64,
        /// The prompt.
        text: String,
        /// A message for the run in progress (see [`QueuedPrompt::steer`]).
        steer: bool,
        /// The run it starts fails at once (see [`QueuedPrompt::fails`]).
        fails: Option<crate::session::queue::Failure>,
        /// What it narrows the session to (see [`QueuedPrompt::narrow`]).
        narrow: Option<crate::tools::narrowing::Narrow>,
    },
    /// A background sub-agent of session `caller` started: its run does not
    /// end before the result (counted in its queue).
    BackgroundStarted {
        /// The session whose Task call started it.
        caller: SessionId,
        /// Its task id.
        task: SessionId,
        /// Answered once counted: `false` when there is no such session.
        reply: RpcReplyPort<bool>,
    },
    /// A background sub-agent of session `caller` ended; `result` brings its
    /// result to the caller's run (none when a `TaskOutput` call took it).
    BackgroundEnded {
        /// The session whose Task call started it.
        caller: SessionId,
        /// Its task id.
        task: SessionId,
        /// The message with its result.
        result: Option<QueuedPrompt>,
    },
    /// Cancel a session's run.
    Cancel {
        /// The session.
        session: SessionId,
        /// Arrival order, shared with prompts.
        seq: u64,
    },
    /// The backoff after a crash is over: start the session again.
    Restart(SessionId),
    /// A session's journal was read, to start it from (a run resumed, or a
    /// restart after a crash; then `ready` is `None`).
    Loaded {
        /// The session.
        id: SessionId,
        /// Its records, or why they could not be had.
        records: Result<Vec<Record>, SessionError>,
        /// Answered once it has started.
        ready: Option<RpcReplyPort<Result<SessionId, SessionError>>>,
    },
    /// The headers of earlier processes' journals: their sub-agents by call.
    ChildrenRead(HashMap<(SessionId, String), SessionId>),
    /// What the runtime still holds, for a look from outside.
    Retained(RpcReplyPort<crate::actors::Retained>),
    /// Whether a session has a run in progress or a prompt waiting.
    Busy(SessionId, RpcReplyPort<bool>),
    /// The prompts waiting for a session, oldest first.
    Queued(SessionId, RpcReplyPort<Vec<String>>),
    /// Drops the prompts waiting for a session (each ends `cancelled`); how
    /// many there were.
    ClearQueue(SessionId, RpcReplyPort<usize>),
    /// Cancels every session's run in progress and the prompts waiting,
    /// as of `seq`.
    CancelAll {
        /// Arrival order, shared with prompts.
        seq: u64,
    },
    /// Stop a session once its current run (if any) has ended.
    Stop(SessionId),
    /// End a session's current run at its next turn boundary, as stopped.
    StopRun(SessionId),
    /// Run a check as a live session would run a Bash command; `None` when it
    /// is not running.
    Check {
        /// The session.
        session: SessionId,
        /// The command.
        command: String,
        /// The Bash tool it runs with.
        bash: Arc<dyn crate::tools::Tool>,
        /// How long it may take.
        timeout: std::time::Duration,
        /// Cancelled when the Task call waiting for it is.
        cancel: tokio_util::sync::CancellationToken,
        /// Where its result goes.
        reply: RpcReplyPort<Option<crate::actors::session::check::CheckRun>>,
    },
    /// The backoff after an MCP server died is over: start it again.
    RestartMcp(String),
    /// Crash a session, for the tests of supervision.
    #[cfg(feature = "test-support")]
    CrashSession(SessionId),
}

/// What the Orchestrator is started with.
#[derive(Debug)]
pub(crate) struct OrchestratorArgs {
    pub(crate) env: Arc<SessionEnv>,
    pub(crate) restart: Intensity,
    /// The run's MCP servers, one child each.
    pub(crate) mcp: Arc<crate::mcp::McpHub>,
    /// How long an MCP server may take to start.
    pub(crate) mcp_limit: std::time::Duration,
    /// Variables kept out of an MCP server's environment (provider keys).
    pub(crate) key_variables: Vec<String>,
}

/// The Orchestrator's state.
#[derive(Debug)]
pub(crate) struct OrchestratorState {
    /// What every session shares.
    env: Arc<SessionEnv>,
    /// The restart intensity for sessions.
    restart: Intensity,
    /// Every live session.
    sessions: HashMap<SessionId, Entry>,
    /// Which session a running session actor is.
    by_actor: HashMap<ActorId, SessionId>,
    /// Every sub-agent by the call that started it.
    children: Children,
    /// The run's MCP servers.
    mcp: Arc<crate::mcp::McpHub>,
    /// How long an MCP server may take to start.
    mcp_limit: std::time::Duration,
    /// Variables kept out of an MCP server's environment (provider keys).
    key_variables: Arc<[String]>,
    /// Which server a running server actor is.
    mcp_by_actor: HashMap<ActorId, (String, ActorRef<mcp_server::McpServerMsg>)>,
    /// Each server's restart history (permanent children).
    mcp_restarts: HashMap<String, RestartTracker>,
}

/// Where a session the Orchestrator was asked about is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Whereabouts {
    /// Not live in this process: only its journal knows it.
    Journaled,
    /// Live in this process, never sent a prompt yet.
    Unprompted,
    /// Live in this process, sent a prompt.
    Prompted,
}

/// One supervised session.
#[derive(Debug)]
struct Entry {
    /// What it was started with, reused on restart.
    spec: Arc<SessionSpec>,
    /// The run it belongs to (its lead's id).
    run: SessionId,
    /// It came from the journal of an earlier process.
    resumed: bool,
    /// A prompt was routed to it.
    prompted: bool,
    /// `None` while the session waits to be restarted.
    actor: Option<ActorRef<SessionMsg>>,
    /// Its prompts and its cancel mark, which outlive its crashes.
    queue: SharedQueue,
    /// Publishes on its behalf (restarts, escalation, abandoned prompts).
    publisher: Publisher,
    /// Its restart history.
    tracker: RestartTracker,
    /// A Stop arrived while the session was down: its next incarnation ends with
    /// the run it resumes.
    stop_when_idle: bool,
}

/// How a session starts.
#[derive(Debug)]
enum Origin {
    /// A new conversation.
    New,
    /// From its journal, written by an earlier process.
    Journal,
}

/// The Orchestrator actor.
#[derive(Debug)]
pub(crate) struct OrchestratorActor;

impl Actor for OrchestratorActor {
    type Msg = OrchestratorMsg;
    type State = OrchestratorState;
    type Arguments = OrchestratorArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: OrchestratorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let children = Children::new(args.env.state.sessions());
        Ok(OrchestratorState {
            env: args.env,
            restart: args.restart,
            sessions: HashMap::new(),
            by_actor: HashMap::new(),
            children,
            mcp: args.mcp,
            mcp_limit: args.mcp_limit,
            key_variables: args.key_variables.into(),
            mcp_by_actor: HashMap::new(),
            mcp_restarts: HashMap::new(),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        mcp_server::start_all(&myself, state).await;
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Stopping the Orchestrator kills its children without their `post_stop`;
        // the MCP servers first close their programs (SIGTERM, then SIGKILL).
        let servers: Vec<_> = state.mcp_by_actor.drain().map(|(_, (_, a))| a).collect();
        let stops = servers
            .iter()
            .map(|a| a.stop_and_wait(None, Some(std::time::Duration::from_secs(5))));
        futures::future::join_all(stops).await;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            OrchestratorMsg::Start {
                id,
                spec,
                prompt,
                reply,
            } => {
                start(&myself, state, id, spec, Origin::New, reply).await;
                // Queued for it once started (a session that failed to spawn is gone).
                if let Some(prompt) = prompt
                    && state.sessions.contains_key(&id)
                {
                    route(state, id, Routed::Prompt(prompt));
                }
            }
            OrchestratorMsg::Resume(id, spec, reply) => {
                if state.sessions.contains_key(&id) {
                    let _ = reply.send(Ok(id));
                } else {
                    start(&myself, state, id, spec, Origin::Journal, reply).await;
                }
            }
            OrchestratorMsg::FindChild {
                parent,
                call,
                reply,
            } => {
                let resumed = state.sessions.get(&parent).is_some_and(|e| e.resumed);
                match state.children.find(parent, call, reply, resumed) {
                    Lookup::Known(question, child) => answer(state, question, child),
                    Lookup::Waiting(Some(dir)) => {
                        let myself = myself.clone();
                        tokio::spawn(async move {
                            let read =
                                tokio::task::spawn_blocking(move || children::read_headers(&dir));
                            let found = read.await.unwrap_or_default();
                            let _ = myself.cast(OrchestratorMsg::ChildrenRead(found));
                        });
                    }
                    Lookup::Waiting(None) => {}
                }
            }
            OrchestratorMsg::Retained(reply) => {
                let (file_locks, file_reads) = state.env.files.retained();
                let watched = state.env.bus.retained();
                let _ = reply.send(crate::actors::Retained {
                    sessions: state.sessions.len().max(state.by_actor.len()),
                    children: state.children.len(),
                    file_locks,
                    file_reads,
                    remembered: state.env.remembered.retained(),
                    watched,
                });
            }
            OrchestratorMsg::ChildrenRead(found) => {
                for (question, child) in state.children.read(found) {
                    answer(state, question, child);
                }
            }
            OrchestratorMsg::Prompt {
                session,
                seq,
                text,
                steer,
                fails,
                narrow,
            } => {
                let prompt = QueuedPrompt {
                    seq,
                    text,
                    steer,
                    fails,
                    background: None,
                    spent: None,
                    narrow,
                };
                route(state, session, Routed::Prompt(prompt));
            }
            OrchestratorMsg::Cancel { session, seq } => {
                route(state, session, Routed::Cancel(seq));
            }
            OrchestratorMsg::BackgroundStarted {
                caller,
                task,
                reply,
            } => {
                let entry = state.sessions.get(&caller);
                if let Some(entry) = entry {
                    entry.queue.lock().background_started(task);
                }
                let _ = reply.send(entry.is_some());
            }
            OrchestratorMsg::BackgroundEnded {
                caller,
                task,
                result,
            } => route(state, caller, Routed::BackgroundEnded(task, result)),
            OrchestratorMsg::Restart(session) => {
                // The crashed session's last records may still be queued in the
                // writer: they reach the file before the new incarnation reads it.
                load(&myself, state, session, None, true);
            }
            OrchestratorMsg::Loaded { id, records, ready } => {
                loaded(&myself, state, id, records, ready).await;
            }
            OrchestratorMsg::Stop(session) => {
                if let Some(entry) = state.sessions.get_mut(&session) {
                    // Remembered here too, so that a crash before the session acts
                    // on it does not lose it: the next incarnation is told at start.
                    entry.stop_when_idle = true;
                    if let Some(actor) = &entry.actor {
                        let _ = actor.cast(SessionMsg::StopWhenIdle);
                    }
                }
            }
            OrchestratorMsg::StopRun(session) => route(state, session, Routed::Stop),
            OrchestratorMsg::Busy(session, reply) => {
                let busy = state.sessions.get(&session);
                let _ = reply.send(busy.is_some_and(|e| e.queue.lock().busy()));
            }
            OrchestratorMsg::Queued(session, reply) => {
                let queued = state.sessions.get(&session);
                let _ = reply.send(queued.map(|e| e.queue.lock().queued()).unwrap_or_default());
            }
            OrchestratorMsg::ClearQueue(session, reply) => {
                let cleared = match state.sessions.get(&session) {
                    Some(entry) => {
                        let dropped = entry.queue.lock().clear();
                        abandon(entry, &dropped);
                        dropped.len()
                    }
                    None => 0,
                };
                let _ = reply.send(cleared);
            }
            OrchestratorMsg::CancelAll { seq } => {
                let sessions: Vec<SessionId> = state.sessions.keys().copied().collect();
                for session in sessions {
                    route(state, session, Routed::Cancel(seq));
                }
            }
            OrchestratorMsg::Check {
                session,
                command,
                bash,
                timeout,
                cancel,
                reply,
            } => {
                let actor = state.sessions.get(&session).and_then(|e| e.actor.clone());
                match actor {
                    Some(actor) => {
                        // The session answers through a port of its own; its
                        // answer is passed on without holding this mailbox.
                        let (port, answer) = tokio::sync::oneshot::channel();
                        let check = SessionMsg::Check {
                            command,
                            bash,
                            timeout,
                            cancel,
                            reply: port.into(),
                        };
                        if actor.cast(check).is_err() {
                            let _ = reply.send(None);
                        } else {
                            tokio::spawn(async move {
                                let _ = reply.send(answer.await.ok());
                            });
                        }
                    }
                    None => {
                        let _ = reply.send(None);
                    }
                }
            }
            OrchestratorMsg::RestartMcp(name) => {
                mcp_server::spawn(&myself, state, name, true).await;
            }
            #[cfg(feature = "test-support")]
            OrchestratorMsg::CrashSession(session) => {
                if let Some(actor) = state.sessions.get(&session).and_then(|e| e.actor.as_ref()) {
                    let _ = actor.cast(SessionMsg::Crash);
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
            SupervisionEvent::ActorStarted(_) | SupervisionEvent::ProcessGroupChanged(_) => {}
            SupervisionEvent::ActorTerminated(cell, _, _)
                if state.mcp_by_actor.remove(&cell.get_id()).is_some() => {}
            SupervisionEvent::ActorFailed(cell, err)
                if state.mcp_by_actor.contains_key(&cell.get_id()) =>
            {
                if let Some((name, _)) = state.mcp_by_actor.remove(&cell.get_id()) {
                    mcp_server::on_crash(&myself, state, name, &err.to_string());
                }
            }
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                // A session stops only when told to.
                if let Some(id) = state.by_actor.remove(&cell.get_id()) {
                    tracing::debug!(session = %id, ?reason, "session stopped");
                    forget(state, id);
                    if let Some(entry) = state.sessions.remove(&id) {
                        // Prompts that arrived while it was stopping never ran.
                        let stopped = Outcome::Cancelled {
                            partial: String::new(),
                            stats: RunStats::default(),
                        };
                        restarts::abandon_queued(&entry, &stopped);
                    }
                }
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                if let Some(id) = state.by_actor.remove(&cell.get_id()) {
                    restarts::on_session_crash(&myself, state, id, &err.to_string());
                }
            }
        }
        Ok(())
    }
}

/// Starts a session (new, or from its journal); the session itself answers `ready`
/// once it has started, so the Orchestrator never waits on a session's start-up.
/// A new one is spawned now; one from its journal once the journal is read (in a
/// task). One that cannot be spawned is forgotten.
async fn start(
    myself: &ActorRef<OrchestratorMsg>,
    state: &mut OrchestratorState,
    id: SessionId,
    spec: Box<SessionSpec>,
    origin: Origin,
    ready: RpcReplyPort<Result<SessionId, SessionError>>,
) {
    let run = spec
        .parent
        .and_then(|parent| state.sessions.get(&parent))
        .map_or(id, |parent| parent.run);
    if let (Some(parent), Some(call)) = (spec.parent, &spec.tool_call_id) {
        state.children.insert(parent, call, id);
    }
    let from_journal = matches!(origin, Origin::Journal);
    let path = state.env.state.journal(id);
    let recorder = Arc::new(Recorder::new(state.env.journal.clone(), path));
    let entry = Entry {
        publisher: Publisher::new(state.env.bus.clone(), id, spec.parent, &spec.agent)
            .keeping(recorder),
        queue: SharedQueue::default(),
        spec: Arc::from(spec),
        run,
        resumed: from_journal,
        prompted: false,
        actor: None,
        tracker: RestartTracker::new(RestartType::Transient, state.restart),
        stop_when_idle: false,
    };
    state.sessions.insert(id, entry);
    if from_journal {
        load(myself, state, id, Some(ready), false);
        return;
    }
    // On a spawn error the reply port is dropped with the arguments, and the
    // caller's `call` fails; the entry goes.
    if let Err(e) = spawn_session(myself, state, id, Some(ready), None).await {
        tracing::warn!(session = %id, error = %e, "session did not start");
        state.sessions.remove(&id);
    }
}

/// Reads session `id`'s journal in a task (after syncing the writer, when
/// `sync` is asked: a restart's), its records coming back as
/// [`OrchestratorMsg::Loaded`]. Meanwhile the session is down: what is routed
/// to it waits in its queue.
fn load(
    myself: &ActorRef<OrchestratorMsg>,
    state: &OrchestratorState,
    id: SessionId,
    ready: Option<RpcReplyPort<Result<SessionId, SessionError>>>,
    sync: bool,
) {
    let journal = state.env.journal.clone();
    let path = state.env.state.journal(id);
    #[cfg(feature = "test-support")]
    let gate = state.env.journal_reads.clone();
    let myself = myself.clone();
    tokio::spawn(async move {
        let records = async {
            if sync {
                journal.sync().await.map_err(SessionError::Journal)?;
            }
            #[cfg(feature = "test-support")]
            let _permit = match &gate {
                Some(gate) => gate.acquire().await.ok(),
                None => None,
            };
            let read = tokio::task::spawn_blocking(move || crate::journal::read_journal(&path));
            match read.await {
                Ok(Ok(read)) => Ok(read.records),
                Ok(Err(e)) => Err(SessionError::Journal(e.to_string())),
                Err(e) => Err(SessionError::Journal(format!("reading it failed: {e}"))),
            }
        };
        let records = records.await;
        let _ = myself.cast(OrchestratorMsg::Loaded { id, records, ready });
    });
}

/// A session's journal was read: it starts from its records. One that cannot
/// start is forgotten (a run resumed: its caller hears why, the prompts queued
/// meanwhile end) or given up on (a restart).
async fn loaded(
    myself: &ActorRef<OrchestratorMsg>,
    state: &mut OrchestratorState,
    id: SessionId,
    records: Result<Vec<Record>, SessionError>,
    ready: Option<RpcReplyPort<Result<SessionId, SessionError>>>,
) {
    if !state.sessions.contains_key(&id) {
        // Given up on or stopped while its journal was read.
        if let Some(ready) = ready {
            let _ = ready.send(Err(SessionError::Gone(id.to_string())));
        }
        return;
    }
    let restart = ready.is_none();
    let started = match records {
        Ok(records) => spawn_session(myself, state, id, ready, Some(records)).await,
        Err(e) => {
            if let Some(ready) = ready {
                let _ = ready.send(Err(SessionError::Spawn(e.to_string())));
            }
            Err(e)
        }
    };
    let Err(e) = started else {
        return;
    };
    if restart {
        restarts::escalate(state, id, &e);
    } else if let Some(entry) = state.sessions.remove(&id) {
        tracing::warn!(session = %id, error = %e, "session did not start");
        forget(state, id);
        restarts::abandon_queued(&entry, &restarts::failed(&e));
    }
}

/// Drops what the runtime kept for session `id`, which has ended: the files it
/// read, its "always" answers, the sub-agents its calls started.
fn forget(state: &mut OrchestratorState, id: SessionId) {
    state.env.files.forget(id);
    state.env.remembered.forget(id);
    state.children.forget(id);
}

/// Answers a question for the session a call started, with where it is.
fn answer(state: &OrchestratorState, question: Question, child: Option<SessionId>) {
    let found = child.map(|id| {
        let whereabouts = match state.sessions.get(&id) {
            None => Whereabouts::Journaled,
            Some(entry) if entry.prompted => Whereabouts::Prompted,
            Some(_) => Whereabouts::Unprompted,
        };
        (id, whereabouts)
    });
    let _ = question.send(found);
}

/// Spawns the actor of session `id`: a new one (`ready` answered once it has
/// started), or one rebuilt from its journal's `records` (after a crash, or a
/// run resumed).
async fn spawn_session(
    myself: &ActorRef<OrchestratorMsg>,
    state: &mut OrchestratorState,
    id: SessionId,
    ready: Option<RpcReplyPort<Result<SessionId, SessionError>>>,
    records: Option<Vec<Record>>,
) -> Result<(), SessionError> {
    let Some(entry) = state.sessions.get_mut(&id) else {
        return Err(SessionError::Spawn(format!("unknown session {id}")));
    };
    let args = SessionArgs {
        id,
        run: entry.run,
        spec: entry.spec.clone(),
        env: state.env.clone(),
        queue: entry.queue.clone(),
        publisher: entry.publisher.clone(),
        ready,
        journal: records,
        stop_when_idle: entry.stop_when_idle,
    };
    let (actor, _) = Actor::spawn_linked(None, SessionActor, args, myself.get_cell())
        .await
        .map_err(|e| SessionError::Spawn(e.to_string()))?;
    state.by_actor.insert(actor.get_id(), id);
    entry.actor = Some(actor);
    Ok(())
}

/// A prompt, a cancel or a stop on its way to a session.
enum Routed {
    Prompt(QueuedPrompt),
    Cancel(u64),
    Stop,
    /// A background sub-agent ended, with the message of its result.
    BackgroundEnded(SessionId, Option<QueuedPrompt>),
}

/// Ends each of `dropped`, prompts of `entry`'s session that will never
/// run, as cancelled: every prompt gets exactly one terminal event.
fn abandon(entry: &Entry, dropped: &[QueuedPrompt]) {
    for prompt in dropped {
        entry.publisher.publish(EventKind::Terminal {
            prompts: vec![prompt.seq],
            outcome: Outcome::Cancelled {
                partial: String::new(),
                stats: RunStats::default(),
            },
        });
    }
}

/// Puts a prompt or a cancel in the session's queue, which outlives session
/// crashes, then tells the session. A session that is down (waiting to restart)
/// misses only the telling: it reads its queue when it starts again.
fn route(state: &mut OrchestratorState, session: SessionId, routed: Routed) {
    let Some(entry) = state.sessions.get_mut(&session) else {
        tracing::warn!(%session, "prompt, cancel or stop for an unknown session");
        if let Routed::Prompt(prompt) = routed {
            // Whoever waits for this prompt's run must not wait forever.
            let error = SessionError::Gone(session.to_string());
            let publisher = Publisher::new(state.env.bus.clone(), session, None, "orchestrate");
            publisher.publish(EventKind::Terminal {
                prompts: vec![prompt.seq],
                outcome: restarts::failed(&error),
            });
        }
        return;
    };
    let nudge = match routed {
        Routed::Prompt(prompt) => {
            let seq = prompt.seq;
            entry.prompted = true;
            entry.queue.lock().push(prompt);
            SessionMsg::Prompt { seq }
        }
        Routed::Cancel(seq) => {
            let dropped = entry.queue.lock().cancel(seq);
            abandon(entry, &dropped);
            SessionMsg::Cancel { seq }
        }
        Routed::Stop => {
            // Kept in the queue until the session takes it: a session that is down
            // finds it when it is back.
            entry.queue.lock().stop();
            SessionMsg::StopRun
        }
        Routed::BackgroundEnded(task, result) => {
            // Told as a prompt: a run that waits for it looks again.
            let seq = result.as_ref().map_or(0, |r| r.seq);
            entry.queue.lock().background_ended(task, result);
            SessionMsg::Prompt { seq }
        }
    };
    if let Some(actor) = &entry.actor {
        let _ = actor.cast(nudge);
    }
}
