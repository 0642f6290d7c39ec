//! Orchestrator: the root supervisor, one per process. It starts sessions (each with
//! its PromptQueue beside it), routes prompts and cancels to them, and applies the
//! restart policy when one crashes: restart it from its journal after a backoff, or,
//! past the restart intensity, give up and end its run with a `crash` failure.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};

use super::SessionEnv;
use super::prompt_queue::{PromptQueueActor, PromptQueueMsg};
use super::session::{SessionActor, SessionArgs, SessionMsg};
use super::supervision::{Decision, Exit, Intensity, RestartTracker, RestartType};
use crate::error::SessionError;
use crate::events::Publisher;
use crate::journal::{Record, journal_path};
use crate::protocol::{EventKind, Outcome, RunStats, SessionId};
use crate::session::SessionSpec;
use crate::session::queue::QueuedPrompt;

/// Messages of the Orchestrator.
#[derive(Debug)]
pub(crate) enum OrchestratorMsg {
    /// Start a session; replies with its id.
    Start(
        Box<SessionSpec>,
        RpcReplyPort<Result<SessionId, SessionError>>,
    ),
    /// Deliver a prompt.
    Prompt {
        /// The session.
        session: SessionId,
        /// Arrival order, shared with cancels.
        seq: u64,
        /// The prompt.
        text: String,
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
    /// Stop a session once its current run (if any) has ended.
    Stop(SessionId),
}

/// What the Orchestrator is started with.
#[derive(Debug)]
pub(crate) struct OrchestratorArgs {
    pub(crate) env: Arc<SessionEnv>,
    pub(crate) restart: Intensity,
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
}

#[derive(Debug)]
/// One supervised session.
struct Entry {
    /// What it was started with, reused on restart.
    spec: Arc<SessionSpec>,
    /// `None` while the session waits to be restarted.
    actor: Option<ActorRef<SessionMsg>>,
    /// Its PromptQueue, which outlives its crashes.
    queue: ActorRef<PromptQueueMsg>,
    /// Publishes on its behalf (restarts, escalation, abandoned prompts).
    publisher: Publisher,
    /// Its restart history.
    tracker: RestartTracker,
    /// A Stop arrived while the session was down: its next incarnation ends with
    /// the run it resumes.
    stop_when_idle: bool,
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
        Ok(OrchestratorState {
            env: args.env,
            restart: args.restart,
            sessions: HashMap::new(),
            by_actor: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            OrchestratorMsg::Start(spec, reply) => start(&myself, state, spec, reply).await,
            OrchestratorMsg::Prompt { session, seq, text } => {
                route(
                    state,
                    session,
                    PromptQueueMsg::Push(QueuedPrompt { seq, text }),
                    SessionMsg::Prompt { seq },
                );
            }
            OrchestratorMsg::Cancel { session, seq } => {
                route(
                    state,
                    session,
                    PromptQueueMsg::Cancel(seq),
                    SessionMsg::Cancel { seq },
                );
            }
            OrchestratorMsg::Restart(session) => restart(&myself, state, session).await,
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
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                // A session stops only when told to; a queue only with its session.
                if let Some(id) = state.by_actor.remove(&cell.get_id()) {
                    tracing::debug!(session = %id, ?reason, "session stopped");
                    if let Some(entry) = state.sessions.remove(&id) {
                        // Prompts that arrived while it was stopping never ran.
                        let stopped = Outcome::Cancelled {
                            partial: String::new(),
                            stats: RunStats::default(),
                        };
                        abandon_queued(entry, &stopped).await;
                    }
                }
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                let Some(id) = state.by_actor.remove(&cell.get_id()) else {
                    // A PromptQueue is plain bookkeeping and has never been seen to
                    // fail; if one does, its session keeps running without queueing.
                    tracing::error!(actor = %cell.get_id(), error = %err, "a prompt queue crashed");
                    return Ok(());
                };
                on_session_crash(&myself, state, id, &err.to_string()).await;
            }
        }
        Ok(())
    }
}

/// Starts a session; the session itself answers `ready` once it has started, so the
/// Orchestrator never waits on a session's start-up.
async fn start(
    myself: &ActorRef<OrchestratorMsg>,
    state: &mut OrchestratorState,
    spec: Box<SessionSpec>,
    ready: RpcReplyPort<Result<SessionId, SessionError>>,
) {
    let id = SessionId::new();
    let publisher = Publisher::new(state.env.bus.clone(), id, spec.parent, &spec.agent);
    let queue =
        match Actor::spawn_linked(None, PromptQueueActor, publisher.clone(), myself.get_cell())
            .await
        {
            Ok((queue, _)) => queue,
            Err(e) => {
                let _ = ready.send(Err(SessionError::Spawn(e.to_string())));
                return;
            }
        };
    let entry = Entry {
        spec: Arc::from(spec),
        actor: None,
        queue,
        publisher,
        tracker: RestartTracker::new(RestartType::Transient, state.restart),
        stop_when_idle: false,
    };
    state.sessions.insert(id, entry);
    // On a spawn error the reply port is dropped with the arguments, and the
    // caller's `call` fails; the entry goes.
    if let Err(e) = spawn_session(myself, state, id, Some(ready)).await {
        tracing::warn!(session = %id, error = %e, "session did not start");
        if let Some(entry) = state.sessions.remove(&id) {
            entry.queue.stop(None);
        }
    }
}

async fn spawn_session(
    myself: &ActorRef<OrchestratorMsg>,
    state: &mut OrchestratorState,
    id: SessionId,
    ready: Option<RpcReplyPort<Result<SessionId, SessionError>>>,
) -> Result<(), SessionError> {
    let Some(entry) = state.sessions.get_mut(&id) else {
        return Err(SessionError::Spawn(format!("unknown session {id}")));
    };
    let args = SessionArgs {
        id,
        spec: entry.spec.clone(),
        env: state.env.clone(),
        queue: entry.queue.clone(),
        ready,
        stop_when_idle: entry.stop_when_idle,
    };
    let (actor, _) = Actor::spawn_linked(None, SessionActor, args, myself.get_cell())
        .await
        .map_err(|e| SessionError::Spawn(e.to_string()))?;
    state.by_actor.insert(actor.get_id(), id);
    entry.actor = Some(actor);
    Ok(())
}

/// Hands a prompt or a cancel to the session's PromptQueue, which outlives session
/// crashes, then nudges the session. A session that is down (waiting to restart)
/// misses only the nudge: it reads its queue when it starts again.
fn route(
    state: &mut OrchestratorState,
    session: SessionId,
    queued: PromptQueueMsg,
    nudge: SessionMsg,
) {
    let Some(entry) = state.sessions.get(&session) else {
        tracing::warn!(%session, "prompt or cancel for an unknown session");
        if let PromptQueueMsg::Push(prompt) = queued {
            // Whoever waits for this prompt's run must not wait forever.
            let error =
                SessionError::Spawn(format!("no session {session} (it ended or never existed)"));
            let publisher = Publisher::new(state.env.bus.clone(), session, None, "orchestrate");
            publisher.publish(EventKind::Terminal {
                prompts: vec![prompt.seq],
                outcome: failed(&error),
            });
        }
        return;
    };
    if entry.queue.cast(queued).is_err() {
        tracing::error!(%session, "the prompt queue is gone; prompt or cancel dropped");
    }
    if let Some(actor) = &entry.actor {
        let _ = actor.cast(nudge);
    }
}

async fn on_session_crash(
    myself: &ActorRef<OrchestratorMsg>,
    state: &mut OrchestratorState,
    id: SessionId,
    reason: &str,
) {
    let Some(entry) = state.sessions.get_mut(&id) else {
        return;
    };
    entry.actor = None;
    let publisher = entry.publisher.clone();
    match entry
        .tracker
        .on_exit(Exit::Abnormal, Instant::now(), rand::random::<f64>())
    {
        Decision::Restart { after, restarts } => {
            tracing::warn!(session = %id, restarts, ?after, reason, "session crashed; restarting from its journal");
            publisher.publish(EventKind::Restarted {
                restarts,
                reason: reason.to_owned(),
            });
            myself.send_after(after, move || OrchestratorMsg::Restart(id));
        }
        Decision::Escalate { restarts } => {
            let error = crash_loop(state, restarts, reason);
            escalate(state, id, &error).await;
        }
        Decision::Stop => {
            // A transient child's crash always restarts or escalates; a stop here
            // would mean the policy changed under us: let the session go.
            tracing::error!(session = %id, reason, "crashed session not restarted");
            let error = crash_loop(state, 0, reason);
            escalate(state, id, &error).await;
        }
    }
}

/// Gives up on a session: its run ends with a failure, in its journal and as its
/// terminal event, and the session is forgotten.
async fn escalate(state: &mut OrchestratorState, id: SessionId, error: &SessionError) {
    let Some(entry) = state.sessions.remove(&id) else {
        return;
    };
    tracing::error!(session = %id, %error, "giving up on the session");
    let publisher = entry.publisher.clone();
    let outcome = failed(error);
    abandon_queued(entry, &outcome).await;
    let path = journal_path(&state.env.workspace, id);
    let terminal = Record::Terminal {
        outcome: outcome.clone(),
    };
    let journaled = state.env.journal.append(&path, &terminal);
    if let Err(e) = journaled.and(state.env.journal.sync().await) {
        tracing::error!(session = %id, error = %e, "cannot journal the escalation");
    }
    // No prompts named: the session itself has ended, and with it its run.
    publisher.publish(EventKind::Terminal {
        prompts: Vec::new(),
        outcome,
    });
}

/// Stops a session's PromptQueue; each prompt still in it will never run and gets
/// `outcome` as its terminal event, so nobody waits on it forever.
async fn abandon_queued(entry: Entry, outcome: &Outcome) {
    let waiting = ractor::call!(entry.queue, PromptQueueMsg::TakeAll).unwrap_or_default();
    entry.queue.stop(None);
    for prompt in waiting {
        entry.publisher.publish(EventKind::Terminal {
            prompts: vec![prompt.seq],
            outcome: outcome.clone(),
        });
    }
}

fn failed(error: &SessionError) -> Outcome {
    Outcome::failed(error, String::new(), RunStats::default())
}

fn crash_loop(state: &OrchestratorState, restarts: u32, last: &str) -> SessionError {
    SessionError::CrashLoop {
        restarts,
        window: state.restart.window,
        last: last.to_owned(),
    }
}

async fn restart(myself: &ActorRef<OrchestratorMsg>, state: &mut OrchestratorState, id: SessionId) {
    // The crashed session's last records may still be queued in the writer: make
    // them reach the file before the new incarnation reads it.
    let synced = state
        .env
        .journal
        .sync()
        .await
        .map_err(SessionError::Journal);
    if let Err(e) = synced.and(spawn_session(myself, state, id, None).await) {
        // Rebuilding failed (an unreadable journal, say): that is final.
        escalate(state, id, &e).await;
    }
}
