//! The event bus. Every subscriber gets every event in publication
//! order through one queue. Two delivery classes: a progress event is dropped when
//! the subscriber has fallen too far behind; a lifecycle event never is.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::protocol::{Event, EventKind, SessionId};

/// Events a subscriber may have waiting before new progress events are dropped.
const PROGRESS_BACKLOG: usize = 4096;

/// Where a session's lifecycle events are kept besides the bus (its journal):
/// given each as it is published, in the order its publisher published them.
pub(crate) trait Keeper: Send + Sync + std::fmt::Debug {
    /// Keeps one lifecycle event.
    fn keep(&self, event: &Event);
}

/// Publishes events to every subscriber. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct EventBus {
    inner: Arc<BusInner>,
}

#[derive(Debug, Default)]
struct BusInner {
    seq: AtomicU64,
    subscribers: Mutex<Subscribers>,
}

impl BusInner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Subscribers> {
        // A panic while holding this lock cannot leave the Vec inconsistent.
        self.subscribers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Debug, Default)]
struct Subscribers {
    /// Those that see every event.
    all: Vec<Subscriber>,
    /// Those that see one session's events only (a parent waiting on its child):
    /// kept apart so that a fan-out of N children costs N deliveries, not N².
    /// Each goes with its stream ([`EventStream`]'s drop), whether or not its
    /// session publishes again.
    by_session: std::collections::HashMap<SessionId, Vec<Subscriber>>,
}

#[derive(Debug)]
struct Subscriber {
    tx: mpsc::UnboundedSender<Arc<Event>>,
    backlog: Arc<AtomicUsize>,
    /// Which events are queued for it at all.
    sees: Sees,
}

/// The events a subscription is given; the others are never even queued.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Sees {
    /// Every event (progress dropped past its backlog).
    All,
    /// Lifecycle events only.
    Lifecycle,
    /// Terminal events only (waiting for a run's end: each other event would
    /// wake the waiter for nothing, twenty thousand times for a lead's fan-out
    /// of ten thousand Task calls).
    Terminal,
}

impl Sees {
    fn takes(self, kind: &EventKind) -> bool {
        match self {
            Self::All => true,
            Self::Lifecycle => !kind.is_progress(),
            Self::Terminal => matches!(kind, EventKind::Terminal { .. }),
        }
    }
}

impl EventBus {
    /// A bus with no subscribers.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new subscription; it sees events published from now on.
    pub fn subscribe(&self) -> EventStream {
        let (subscriber, stream) = Subscriber::new(Sees::All);
        self.lock().all.push(subscriber);
        stream
    }

    /// A subscription to every session's lifecycle events, none of its progress.
    pub fn subscribe_lifecycle(&self) -> EventStream {
        let (subscriber, stream) = Subscriber::new(Sees::Lifecycle);
        self.lock().all.push(subscriber);
        stream
    }

    /// A subscription to every session's terminal events alone (a caller that
    /// waits for runs' outcomes).
    pub fn subscribe_terminal(&self) -> EventStream {
        let (subscriber, stream) = Subscriber::new(Sees::Terminal);
        self.lock().all.push(subscriber);
        stream
    }

    /// A subscription to one session's events only.
    pub fn subscribe_session(&self, session: SessionId) -> EventStream {
        self.watch_session(session, Sees::All)
    }

    /// A subscription to one session's lifecycle events, none of its progress.
    pub fn subscribe_session_lifecycle(&self, session: SessionId) -> EventStream {
        self.watch_session(session, Sees::Lifecycle)
    }

    /// A subscription to one session's terminal events alone: the ends of its
    /// runs (a Task call waiting for its sub-agent's answer, the CLI for its
    /// lead's).
    pub fn subscribe_session_terminal(&self, session: SessionId) -> EventStream {
        self.watch_session(session, Sees::Terminal)
    }

    fn watch_session(&self, session: SessionId, sees: Sees) -> EventStream {
        let (subscriber, mut stream) = Subscriber::new(sees);
        stream.watching = Some((Arc::downgrade(&self.inner), session));
        self.lock()
            .by_session
            .entry(session)
            .or_default()
            .push(subscriber);
        stream
    }

    /// Sessions with subscriptions of their own.
    pub(crate) fn retained(&self) -> usize {
        self.lock().by_session.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Subscribers> {
        self.inner.lock()
    }

    /// Stamps and delivers one event. Holding the lock while stamping keeps every
    /// subscriber's queue in `seq` order.
    pub fn publish(
        &self,
        session: SessionId,
        parent: Option<SessionId>,
        agent: &str,
        kind: EventKind,
    ) {
        self.deliver(session, parent, agent, kind, false);
    }

    /// Stamps and delivers one event; returns it when it was made at all (there
    /// was a subscriber to offer it to, or `keep` asks for it).
    fn deliver(
        &self,
        session: SessionId,
        parent: Option<SessionId>,
        agent: &str,
        kind: EventKind,
        keep: bool,
    ) -> Option<Arc<Event>> {
        let mut subscribers = self.lock();
        let Subscribers {
            all, by_session, ..
        } = &mut *subscribers;
        let watchers = by_session.get_mut(&session);
        if all.is_empty() && watchers.is_none() && !keep {
            return None;
        }
        let event = Arc::new(Event {
            seq: self.inner.seq.fetch_add(1, Ordering::Relaxed),
            session,
            parent,
            agent: agent.to_owned(),
            kind,
        });
        all.retain(|s| s.deliver(&event));
        if let Some(watchers) = watchers {
            watchers.retain(|s| s.deliver(&event));
            if watchers.is_empty() {
                by_session.remove(&session);
            }
        }
        Some(event)
    }
}

impl Subscriber {
    fn new(sees: Sees) -> (Self, EventStream) {
        let (tx, rx) = mpsc::unbounded_channel();
        let backlog = Arc::new(AtomicUsize::new(0));
        let stream = EventStream {
            rx,
            backlog: backlog.clone(),
            watching: None,
        };
        let subscriber = Self { tx, backlog, sees };
        (subscriber, stream)
    }

    /// Delivers one event; false once the subscription is gone.
    fn deliver(&self, event: &Arc<Event>) -> bool {
        let dropped =
            event.kind.is_progress() && self.backlog.load(Ordering::Relaxed) >= PROGRESS_BACKLOG;
        if dropped || !self.sees.takes(&event.kind) {
            return !self.tx.is_closed();
        }
        self.backlog.fetch_add(1, Ordering::Relaxed);
        self.tx.send(Arc::clone(event)).is_ok()
    }
}

/// A subscription to the bus.
#[derive(Debug)]
pub struct EventStream {
    /// Shared events: a subscription's channel holds pointers (its first block is
    /// 32 slots, allocated with it: 256 bytes, not 32 whole events' 7.5 KiB, which
    /// a Task call waiting on each of ten thousand sub-agents would pay each).
    rx: mpsc::UnboundedReceiver<Arc<Event>>,
    backlog: Arc<AtomicUsize>,
    /// The session it watches, on its bus: its subscription goes with it.
    watching: Option<(std::sync::Weak<BusInner>, SessionId)>,
}

impl Drop for EventStream {
    fn drop(&mut self) {
        let Some((bus, session)) = &self.watching else {
            return;
        };
        let Some(bus) = bus.upgrade() else {
            return;
        };
        let mut subscribers = bus.lock();
        if let Some(watchers) = subscribers.by_session.get_mut(session) {
            watchers.retain(|s| !Arc::ptr_eq(&s.backlog, &self.backlog));
            if watchers.is_empty() {
                subscribers.by_session.remove(session);
            }
        }
    }
}

/// The event itself: taken when this was its last subscriber, copied otherwise.
fn owned(event: Arc<Event>) -> Event {
    Arc::try_unwrap(event).unwrap_or_else(|shared| (*shared).clone())
}

impl EventStream {
    /// The next event, in publication order; `None` once the bus is gone.
    pub async fn recv(&mut self) -> Option<Event> {
        let event = self.rx.recv().await?;
        self.backlog.fetch_sub(1, Ordering::Relaxed);
        Some(owned(event))
    }

    /// The next event if one is already waiting.
    pub fn try_recv(&mut self) -> Option<Event> {
        let event = self.rx.try_recv().ok()?;
        self.backlog.fetch_sub(1, Ordering::Relaxed);
        Some(owned(event))
    }
}

/// An [`EventBus`] bound to one session's identity.
#[derive(Clone, Debug)]
pub struct Publisher {
    bus: EventBus,
    session: SessionId,
    parent: Option<SessionId>,
    agent: Arc<str>,
    /// Keeps the session's lifecycle events as they are published (its journal).
    keeper: Option<Arc<dyn Keeper>>,
}

impl Publisher {
    /// Binds `bus` to a session.
    pub fn new(bus: EventBus, session: SessionId, parent: Option<SessionId>, agent: &str) -> Self {
        Self {
            bus,
            session,
            parent,
            agent: agent.into(),
            keeper: None,
        }
    }

    /// The same, with `keeper` given every lifecycle event as it is published.
    pub(crate) fn keeping(mut self, keeper: Arc<dyn Keeper>) -> Self {
        self.keeper = Some(keeper);
        self
    }

    /// The role of the session it publishes as.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The session's parent, for a sub-agent.
    pub fn parent(&self) -> Option<SessionId> {
        self.parent
    }

    /// Publishes one event for this session (and keeps it, when it is a
    /// lifecycle event and this publisher has a keeper).
    pub fn publish(&self, kind: EventKind) {
        let keeper = self.keeper.as_ref().filter(|_| !kind.is_progress());
        let event = (self.bus).deliver(
            self.session,
            self.parent,
            &self.agent,
            kind,
            keeper.is_some(),
        );
        if let (Some(keeper), Some(event)) = (keeper, event) {
            keeper.keep(&event);
        }
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
        for i in 0..(PROGRESS_BACKLOG + 100) {
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
        let mut last_seq = None;
        while progress + lifecycle < PROGRESS_BACKLOG + 10_000 {
            let event = sub.recv().await.unwrap();
            assert!(last_seq < Some(event.seq), "events out of order");
            last_seq = Some(event.seq);
            match event.kind {
                EventKind::TextDelta { .. } => progress += 1,
                EventKind::PromptQueued { waiting } => {
                    assert_eq!(waiting, lifecycle);
                    lifecycle += 1;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!((progress, lifecycle), (PROGRESS_BACKLOG, 10_000));
    }

    #[tokio::test]
    async fn a_lifecycle_subscription_sees_no_progress() {
        let bus = EventBus::new();
        let mut lifecycle = bus.subscribe_lifecycle();
        let id = SessionId::new();
        let delta = |text: &str| EventKind::TextDelta { text: text.into() };
        bus.publish(id, None, "a", delta("hel"));
        bus.publish(id, None, "a", EventKind::PromptQueued { waiting: 1 });
        bus.publish(id, None, "a", delta("lo"));
        bus.publish(id, None, "a", EventKind::PromptQueued { waiting: 2 });
        let seen: Vec<EventKind> = std::iter::from_fn(|| lifecycle.try_recv())
            .map(|e| e.kind)
            .collect();
        assert_eq!(
            seen,
            [
                EventKind::PromptQueued { waiting: 1 },
                EventKind::PromptQueued { waiting: 2 }
            ]
        );
    }

    #[tokio::test]
    async fn a_terminal_subscription_sees_the_ends_of_runs_alone() {
        let bus = EventBus::new();
        let (id, other) = (SessionId::new(), SessionId::new());
        let mut one = bus.subscribe_session_terminal(id);
        let mut every = bus.subscribe_terminal();
        let end = |text: &str| EventKind::Terminal {
            prompts: vec![1],
            outcome: crate::protocol::Outcome::Cancelled {
                partial: text.into(),
                stats: Default::default(),
            },
        };
        for session in [id, other] {
            bus.publish(
                session,
                None,
                "a",
                EventKind::TextDelta { text: "x".into() },
            );
            bus.publish(session, None, "a", EventKind::PromptQueued { waiting: 1 });
            bus.publish(session, None, "a", end(&session.to_string()));
        }
        let kinds = |stream: &mut EventStream| -> Vec<EventKind> {
            std::iter::from_fn(|| stream.try_recv())
                .map(|e| e.kind)
                .collect()
        };
        assert_eq!(kinds(&mut one), [end(&id.to_string())]);
        assert_eq!(
            kinds(&mut every),
            [end(&id.to_string()), end(&other.to_string())]
        );
    }

    #[test]
    fn a_subscription_to_a_session_goes_with_its_stream() {
        let bus = EventBus::default();
        let (one, other) = (SessionId::new(), SessionId::new());
        let first = bus.subscribe_session(one);
        let second = bus.subscribe_session_terminal(one);
        let third = bus.subscribe_session_lifecycle(other);
        assert_eq!(bus.retained(), 2);
        drop(first);
        assert_eq!(bus.retained(), 2, "the session still has a watcher");
        drop(second);
        assert_eq!(bus.retained(), 1);
        drop(third);
        assert_eq!(bus.retained(), 0);
        // A stream that outlives its bus drops quietly.
        let orphan = EventBus::default().subscribe_session(one);
        drop(orphan);
    }
}
