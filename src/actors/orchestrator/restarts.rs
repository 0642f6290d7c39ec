//! What the Orchestrator does when a session ends badly: restarted from its
//! journal after a backoff, or, past the restart intensity, given up on (its run
//! fails with a `crash` failure, its live sub-agents are cancelled, the prompts
//! still queued for it get their terminal events).

use std::sync::atomic::Ordering;
use std::time::Instant;

use ractor::ActorRef;

use super::{Entry, OrchestratorMsg, OrchestratorState, Routed, forget, route};
use crate::actors::session::SessionMsg;
use crate::actors::supervision::{Decision, Exit};
use crate::error::SessionError;
use crate::journal::Record;
use crate::protocol::{EventKind, Outcome, RunStats, SessionId};

pub(super) fn on_session_crash(
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
            escalate(state, id, &error);
        }
        Decision::Stop => {
            // A transient child's crash always restarts or escalates; a stop here
            // would mean the policy changed under us: let the session go.
            tracing::error!(session = %id, reason, "crashed session not restarted");
            let error = crash_loop(state, 0, reason);
            escalate(state, id, &error);
        }
    }
}

/// Gives up on a session: its run ends with a failure, in its journal and as its
/// terminal event (told once the record is synced, in a task: the Orchestrator
/// does not wait for the disk), its live sub-agents are cancelled (nobody will
/// take their results), and the session is forgotten.
pub(super) fn escalate(state: &mut OrchestratorState, id: SessionId, error: &SessionError) {
    let Some(entry) = state.sessions.remove(&id) else {
        return;
    };
    forget(state, id);
    tracing::error!(session = %id, %error, "giving up on the session");
    let children: Vec<SessionId> = state
        .sessions
        .iter()
        .filter(|(_, e)| e.spec.parent == Some(id))
        .map(|(child, _)| *child)
        .collect();
    for child in children {
        // Like any cancel: through its queue, so that one that is down finds it.
        let seq = state.env.stamps.fetch_add(1, Ordering::SeqCst);
        route(state, child, Routed::Cancel(seq));
        if let Some(entry) = state.sessions.get_mut(&child) {
            entry.stop_when_idle = true;
            if let Some(actor) = &entry.actor {
                let _ = actor.cast(SessionMsg::StopWhenIdle);
            }
        }
    }
    let publisher = entry.publisher.clone();
    let outcome = failed(error);
    abandon_queued(&entry, &outcome);
    let path = state.env.state.journal(id);
    let terminal = Record::Terminal {
        outcome: outcome.clone(),
    };
    let journaled = state.env.journal.append(&path, &terminal);
    let journal = state.env.journal.clone();
    tokio::spawn(async move {
        let synced = journal.sync_file(&path).await;
        if let Err(e) = journaled.and(synced) {
            tracing::error!(session = %id, error = %e, "cannot journal the escalation");
        }
        // No prompts named: the session itself has ended, and with it its run.
        publisher.publish(EventKind::Terminal {
            prompts: Vec::new(),
            outcome,
        });
    });
}

/// Each prompt still queued for a session that has ended will never run: it gets
/// `outcome` as its terminal event, so nobody waits on it forever.
pub(super) fn abandon_queued(entry: &Entry, outcome: &Outcome) {
    let waiting = entry.queue.lock().take_all();
    // A background result waits on no one: it needs no terminal event.
    for prompt in waiting.into_iter().filter(|p| p.background.is_none()) {
        entry.publisher.publish(EventKind::Terminal {
            prompts: vec![prompt.seq],
            outcome: outcome.clone(),
        });
    }
}

pub(super) fn failed(error: &SessionError) -> Outcome {
    Outcome::failed(error, String::new(), RunStats::default())
}

fn crash_loop(state: &OrchestratorState, restarts: u32, last: &str) -> SessionError {
    SessionError::CrashLoop {
        restarts,
        window: state.restart.window,
        last: last.to_owned(),
    }
}
