//! The journal's keeper of a session's lifecycle events: every
//! lifecycle event a session publishes is appended to its journal as a
//! [`Record::Event`], so a journal tells the whole story of a run (tools and
//! their results, retries, restarts, file changes), not only its transcript.
//!
//! The event is appended as it is published, by whoever publishes it, so a
//! session's events land in its journal in the order it published them, among
//! its own records: a turn's last `turn_finished` before the run's terminal
//! record, and so under the sync that makes the terminal record durable. (A
//! recorder subscribed to the bus would fall behind at ten thousand sub-agents,
//! write those events after the terminal record's sync, and leave every journal
//! to be synced once more.)
//!
//! It does not own durability: the transcript records a resumed session needs are
//! appended by the session itself and synced at its turn boundaries, where it can
//! wait for the sync. Events are synced with their session's next sync (or the
//! runtime's sync of everything, at shutdown): they are for the record, and a
//! resumed session does not need them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use super::{Elided, Journal};
use crate::events::Keeper;
use crate::protocol::{Event, EventKind};

/// Appends one session's lifecycle events to its journal, once it has one.
#[derive(Debug)]
pub(crate) struct Recorder {
    journal: Journal,
    path: PathBuf,
    /// The session started (its journal has its header): a prompt queued before
    /// it did has no journal to go to.
    started: AtomicBool,
}

impl Recorder {
    /// A recorder of the session whose journal is at `path`.
    pub(crate) fn new(journal: Journal, path: PathBuf) -> Self {
        Self {
            journal,
            path,
            started: AtomicBool::new(false),
        }
    }

    /// A recorder of the session whose journal at `path` already has its
    /// header (events told before its recorder was made: the command line's
    /// hooks of the lead).
    pub(crate) fn of_started(journal: Journal, path: PathBuf) -> Self {
        Self {
            journal,
            path,
            started: AtomicBool::new(true),
        }
    }
}

impl Keeper for Recorder {
    fn keep(&self, event: &Event) {
        match &event.kind {
            EventKind::SessionStarted { .. } => self.started.store(true, Ordering::Release),
            // The session journals its own terminal records.
            EventKind::Terminal { .. } => return,
            _ => {}
        }
        if !self.started.load(Ordering::Acquire) {
            return;
        }
        let at = now_ms();
        let (lean, elided) = match lean(&event.kind) {
            Some((kind, elided)) => (
                Some(Event {
                    kind,
                    agent: event.agent.clone(),
                    ..*event
                }),
                Some(elided),
            ),
            None => (None, None),
        };
        let line = EventLine {
            event: lean.as_ref().unwrap_or(event),
            at,
            elided,
        };
        if let Err(e) = self.journal.append_line(&self.path, &line) {
            tracing::error!(error = %e, "cannot journal an event");
        }
    }
}

/// A [`Record::Event`](super::Record::Event) line, serialized from the event
/// where it is, not from a copy.
#[derive(Serialize)]
#[serde(tag = "record", rename = "event")]
struct EventLine<'a> {
    event: &'a Event,
    at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    elided: Option<Elided>,
}

/// The journal's copy of an event that repeats what the session's messages
/// hold, without it, and what it left out; `None` for an event kept whole.
/// A call's arguments are in the assistant message that made it; a turn's text
/// is that message's; a diff the session marked as held is in the call's
/// result, or for a created file is the call's content.
fn lean(kind: &EventKind) -> Option<(EventKind, Elided)> {
    let elided = |field: &str, text: &str| Elided {
        field: field.to_owned(),
        bytes: text.len() as u64,
    };
    match kind {
        EventKind::ToolStarted {
            call_id,
            name,
            arguments,
        } if !arguments.is_empty() => Some((
            EventKind::ToolStarted {
                call_id: call_id.clone(),
                name: name.clone(),
                arguments: String::new(),
            },
            elided("arguments", arguments),
        )),
        EventKind::TurnFinished {
            turn,
            text,
            tool_calls,
            usage,
            cost_usd,
        } if !text.is_empty() => Some((
            EventKind::TurnFinished {
                turn: *turn,
                text: String::new(),
                tool_calls: *tool_calls,
                usage: *usage,
                cost_usd: *cost_usd,
            },
            elided("text", text),
        )),
        EventKind::FileChanged {
            call_id,
            path,
            diff,
            created,
            held,
            calls,
            count,
        } if *held && !diff.is_empty() => Some((
            EventKind::FileChanged {
                call_id: call_id.clone(),
                path: path.clone(),
                diff: String::new(),
                created: *created,
                held: true,
                calls: calls.clone(),
                count: *count,
            },
            elided("diff", diff),
        )),
        _ => None,
    }
}

/// Now, in milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Record, read_journal};
    use crate::protocol::SessionId;

    fn event(session: SessionId, seq: u64, kind: EventKind) -> Event {
        Event {
            seq,
            session,
            parent: None,
            agent: "a".into(),
            kind,
        }
    }

    #[test]
    fn an_event_line_is_the_records_line() {
        let event = event(SessionId::new(), 7, EventKind::PromptQueued { waiting: 2 });
        let line = serde_json::to_string(&EventLine {
            event: &event,
            at: 12,
            elided: None,
        })
        .unwrap();
        let record = serde_json::to_string(&Record::Event {
            event,
            at: Some(12),
            elided: None,
        })
        .unwrap();
        assert_eq!(line, record);
    }

    /// A recorder of a fresh session's journal in a folder of its own.
    fn recording() -> (
        tempfile::TempDir,
        Journal,
        SessionId,
        std::path::PathBuf,
        Recorder,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::start().unwrap();
        let id = SessionId::new();
        let path = crate::state::StateDir::at(dir.path(), std::path::Path::new("/w")).journal(id);
        let recorder = Recorder::new(journal.clone(), path.clone());
        (dir, journal, id, path, recorder)
    }

    fn started() -> EventKind {
        EventKind::SessionStarted {
            model: "m".into(),
            resumed: false,
            memory: Vec::new(),
        }
    }

    /// The journal's line of `kind`, read back as a record.
    fn kept(kind: EventKind) -> (EventKind, Option<Elided>) {
        let (_dir, journal, id, path, recorder) = recording();
        let started = started();
        recorder.keep(&event(id, 0, started));
        recorder.keep(&event(id, 1, kind));
        futures::executor::block_on(journal.sync()).unwrap();
        match read_journal(&path).unwrap().records.pop() {
            Some(Record::Event { event, elided, .. }) => (event.kind, elided),
            other => panic!("not an event: {other:?}"),
        }
    }

    #[test]
    fn what_the_messages_hold_is_left_out_and_its_size_kept() {
        let (tool, elided) = kept(EventKind::ToolStarted {
            call_id: "c1".into(),
            name: "Write".into(),
            arguments: "x".repeat(1000),
        });
        assert_eq!(
            tool,
            EventKind::ToolStarted {
                call_id: "c1".into(),
                name: "Write".into(),
                arguments: String::new(),
            }
        );
        let elided = elided.unwrap();
        assert_eq!((elided.field.as_str(), elided.bytes), ("arguments", 1000));
        let (_, elided) = kept(EventKind::TurnFinished {
            turn: 1,
            text: "said".into(),
            tool_calls: 0,
            usage: Default::default(),
            cost_usd: None,
        });
        assert_eq!(elided.unwrap().field, "text");
        let change = |diff: &str, held| EventKind::FileChanged {
            call_id: "c1".into(),
            path: "a.txt".into(),
            diff: diff.into(),
            created: false,
            held,
            calls: Vec::new(),
            count: None,
        };
        let (kind, elided) = kept(change("-a\n+b\n", true));
        // (`held` is not kept: it only decides what the journal keeps.)
        assert_eq!(kind, change("", false));
        assert_eq!(elided.unwrap().bytes, 6);
        // Held nowhere else (a result cut short, a call cut off after its
        // write): the journal keeps it.
        assert_eq!(
            kept(change("-a\n+b\n", false)),
            (change("-a\n+b\n", false), None)
        );
        // Nothing to leave out: the event as published.
        let queued = EventKind::PromptQueued { waiting: 1 };
        assert_eq!(kept(queued.clone()), (queued, None));
    }

    #[tokio::test]
    async fn events_are_kept_from_the_sessions_start_and_never_its_terminal() {
        let (_dir, journal, id, path, recorder) = recording();
        let started = started();
        let terminal = EventKind::Terminal {
            prompts: vec![1],
            outcome: crate::protocol::Outcome::Cancelled {
                partial: String::new(),
                stats: Default::default(),
            },
        };
        for (seq, kind) in [
            EventKind::PromptQueued { waiting: 1 },
            started.clone(),
            EventKind::PromptQueued { waiting: 2 },
            terminal,
        ]
        .into_iter()
        .enumerate()
        {
            recorder.keep(&event(id, seq as u64, kind));
        }
        journal.sync().await.unwrap();
        let kept: Vec<EventKind> = (read_journal(&path).unwrap().records.into_iter())
            .map(|record| match record {
                Record::Event { event, .. } => event.kind,
                other => panic!("not an event: {other:?}"),
            })
            .collect();
        assert_eq!(kept, [started, EventKind::PromptQueued { waiting: 2 }]);
    }
}
