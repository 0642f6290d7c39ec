//! The event bus (DESIGN §4). Two delivery classes: progress events go through a
//! bounded channel per subscriber and are dropped when it is full; lifecycle events go
//! through an unbounded one and are never dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::protocol::{Event, EventKind, SessionId};

/// Progress events a slow subscriber may fall behind by before new ones are dropped.
const PROGRESS_BUFFER: usize = 4096;

/// Publishes events to every subscriber. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct EventBus {
    inner: Arc<BusInner>,
}

#[derive(Debug, Default)]
struct BusInner {
    seq: AtomicU64,
    subscribers: Mutex<Vec<Subscriber>>,
}

#[derive(Debug)]
struct Subscriber {
    lifecycle: mpsc::UnboundedSender<Event>,
    progress: mpsc::Sender<Event>,
}

impl EventBus {
    /// A bus with no subscribers.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new subscription; it sees events published from now on.
    pub fn subscribe(&self) -> EventStream {
        let (lifecycle_tx, lifecycle) = mpsc::unbounded_channel();
        let (progress_tx, progress) = mpsc::channel(PROGRESS_BUFFER);
        self.lock().push(Subscriber {
            lifecycle: lifecycle_tx,
            progress: progress_tx,
        });
        EventStream {
            lifecycle,
            progress,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Subscriber>> {
        // A panic while holding this lock cannot leave the Vec inconsistent.
        self.inner
            .subscribers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stamps and delivers one event.
    pub fn publish(
        &self,
        session: SessionId,
        parent: Option<SessionId>,
        agent: &str,
        kind: EventKind,
    ) {
        let mut subscribers = self.lock();
        if subscribers.is_empty() {
            return;
        }
        let event = Event {
            seq: self.inner.seq.fetch_add(1, Ordering::Relaxed),
            session,
            parent,
            agent: agent.to_owned(),
            kind,
        };
        let progress = event.kind.is_progress();
        subscribers.retain(|s| {
            if progress {
                match s.progress.try_send(event.clone()) {
                    Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => true,
                    Err(mpsc::error::TrySendError::Closed(_)) => false,
                }
            } else {
                s.lifecycle.send(event.clone()).is_ok()
            }
        });
    }
}

/// A subscription to the bus.
#[derive(Debug)]
pub struct EventStream {
    lifecycle: mpsc::UnboundedReceiver<Event>,
    progress: mpsc::Receiver<Event>,
}

impl EventStream {
    /// The next event; `None` once the bus is gone. Pending progress is delivered
    /// before pending lifecycle events, so a turn's deltas precede its end.
    pub async fn recv(&mut self) -> Option<Event> {
        tokio::select! {
            biased;
            Some(event) = self.progress.recv() => Some(event),
            event = self.lifecycle.recv() => event,
        }
    }
}

/// An [`EventBus`] bound to one session's identity.
#[derive(Clone, Debug)]
pub struct Publisher {
    bus: EventBus,
    session: SessionId,
    parent: Option<SessionId>,
    agent: Arc<str>,
}

impl Publisher {
    /// Binds `bus` to a session.
    pub fn new(bus: EventBus, session: SessionId, parent: Option<SessionId>, agent: &str) -> Self {
        Self {
            bus,
            session,
            parent,
            agent: agent.into(),
        }
    }

    /// Publishes one event for this session.
    pub fn publish(&self, kind: EventKind) {
        self.bus
            .publish(self.session, self.parent, &self.agent, kind);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lifecycle_events_are_never_dropped_and_progress_is_bounded() {
        let bus = EventBus::new();
        let mut sub = bus.subscribe();
        let id = SessionId::new();
        for i in 0..(PROGRESS_BUFFER + 100) {
            bus.publish(
                id,
                None,
                "a",
                EventKind::TextDelta {
                    text: i.to_string(),
                },
            );
        }
        for i in 0..10_000 {
            bus.publish(id, None, "a", EventKind::PromptQueued { waiting: i });
        }
        let mut progress = 0;
        let mut lifecycle = 0;
        while progress + lifecycle < PROGRESS_BUFFER + 10_000 {
            match sub.recv().await.map(|e| e.kind) {
                Some(EventKind::TextDelta { .. }) => progress += 1,
                Some(EventKind::PromptQueued { waiting }) => {
                    assert_eq!(waiting, lifecycle);
                    lifecycle += 1;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!((progress, lifecycle), (PROGRESS_BUFFER, 10_000));
    }
}
