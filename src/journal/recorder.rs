//! The journal's consumer of the event bus (DESIGN §4): every lifecycle event of a
//! session is appended to that session's journal as a [`Record::Event`], so a
//! journal tells the whole story of a run (tools and their results, retries,
//! restarts, file changes), not only its transcript.
//!
//! It does not own durability: the transcript records a resumed session needs are
//! appended by the session itself and synced at its turn boundaries, where it can
//! wait for the sync. Events are synced with their session's next sync (or the
//! runtime's sync of everything, at shutdown): they are for the record, and a
//! resumed session does not need them.

use std::collections::HashSet;
use std::path::PathBuf;

use tokio::sync::oneshot;

use super::{Journal, Record, journal_path};
use crate::events::EventStream;
use crate::protocol::{Event, EventKind, SessionId};

/// Records lifecycle events until `stop` fires, then records what is still queued
/// and returns.
pub(crate) async fn record_events(
    mut events: EventStream,
    journal: Journal,
    workspace: PathBuf,
    mut stop: oneshot::Receiver<()>,
) {
    let mut recorder = Recorder {
        journal,
        workspace,
        sessions: HashSet::new(),
    };
    loop {
        tokio::select! {
            biased;
            event = events.recv() => match event {
                Some(event) => recorder.record(event),
                None => return,
            },
            _ = &mut stop => break,
        }
    }
    while let Some(event) = events.try_recv() {
        recorder.record(event);
    }
}

struct Recorder {
    journal: Journal,
    workspace: PathBuf,
    /// Sessions that started: only they have a journal to add to.
    sessions: HashSet<SessionId>,
}

impl Recorder {
    fn record(&mut self, event: Event) {
        match &event.kind {
            EventKind::SessionStarted { .. } => {
                self.sessions.insert(event.session);
            }
            // The session journals its own terminal records.
            EventKind::Terminal { .. } => return,
            _ => {}
        }
        if !self.sessions.contains(&event.session) {
            // A prompt for a session that never existed, say: no journal to add to.
            return;
        }
        let path = journal_path(&self.workspace, event.session);
        if let Err(e) = self.journal.append(&path, &Record::Event { event }) {
            tracing::error!(error = %e, "cannot journal an event");
        }
    }
}
