//! An MCP server's progress notifications for a call, told as that call's
//! `tool_output` events: each request carries a progress token (the
//! client's), and what the call's own server says of that token is told as
//! the call's output, to whoever watches it, throttled and capped as Bash's
//! output is (`tools::live`): the first at once, later ones at most every
//! 100 ms, what waits told when it is due or when the call ends. A
//! notification that comes before its call is watched (the server answered
//! at once) waits, a few at most. One lock covers the calls and the early
//! notifications, so none falls between them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::time::Instant;

use crate::events::Publisher;
use crate::protocol::EventKind;
use crate::tools::live::{Chunk, Live};

/// Notifications kept for calls not watched yet, at most.
const EARLY: usize = 32;

/// A server's name and a progress token.
type Key = (String, String);

/// The calls whose progress is told, by server and token.
#[derive(Debug, Default)]
pub struct Progress {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    calls: HashMap<Key, Call>,
    /// Notifications for calls not watched yet, oldest first.
    early: VecDeque<(Key, Said)>,
}

/// A watched call.
#[derive(Debug)]
struct Call {
    events: Publisher,
    call_id: String,
    live: Live,
    /// A telling of what waits is set for when it is due.
    set: bool,
}

impl Call {
    fn publish(&self, chunk: Chunk) {
        self.events.publish(EventKind::ToolOutput {
            call_id: self.call_id.clone(),
            text: chunk.text,
            truncated: chunk.truncated,
        });
    }
}

/// A progress token as text.
pub(crate) fn token_text(token: &rmcp::model::ProgressToken) -> String {
    match &token.0 {
        rmcp::model::NumberOrString::String(token) => token.to_string(),
        rmcp::model::NumberOrString::Number(n) => n.to_string(),
    }
}

/// A call whose progress is told while this is held; dropped, what waits of
/// it is told.
#[derive(Debug)]
pub(crate) struct Watched {
    progress: Arc<Progress>,
    key: Key,
}

impl Drop for Watched {
    fn drop(&mut self) {
        let call = self.progress.inner().calls.remove(&self.key);
        if let Some(mut call) = call
            && let Some(chunk) = call.live.finish(Instant::now())
        {
            call.publish(chunk);
        }
    }
}

impl Progress {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the progress `server` sends of the call that carries `token`
    /// (call `call_id`) through `events` until the guard is dropped.
    pub(crate) fn watch(
        self: &Arc<Self>,
        server: &str,
        token: &str,
        events: Publisher,
        call_id: &str,
    ) -> Watched {
        let key: Key = (server.to_owned(), token.to_owned());
        let mut inner = self.inner();
        let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut inner.early)
            .into_iter()
            .partition(|(k, _)| *k == key);
        inner.early = others.into();
        inner.calls.insert(
            key.clone(),
            Call {
                events,
                call_id: call_id.to_owned(),
                live: Live::default(),
                set: false,
            },
        );
        for (_, said) in mine {
            self.told(&mut inner, &key, &said);
        }
        Watched {
            progress: self.clone(),
            key,
        }
    }

    /// `server` (re)connected: what it said before is of no call of now
    /// (its tokens count from the start again).
    pub(crate) fn forget(&self, server: &str) {
        self.inner().early.retain(|((from, _), _)| from != server);
    }

    /// `server` said how far the call of `token` has come.
    pub(crate) fn tell(self: &Arc<Self>, server: &str, token: &str, said: &Said) {
        let key: Key = (server.to_owned(), token.to_owned());
        let mut inner = self.inner();
        if inner.calls.contains_key(&key) {
            self.told(&mut inner, &key, said);
            return;
        }
        if inner.early.len() == EARLY {
            inner.early.pop_front();
        }
        inner.early.push_back((key, said.clone()));
    }

    /// `said` of the watched call `key`: told now, or when it is due.
    fn told(self: &Arc<Self>, inner: &mut Inner, key: &Key, said: &Said) {
        let Some(call) = inner.calls.get_mut(key) else {
            return;
        };
        if let Some(chunk) = call.live.push(line(said).as_bytes(), Instant::now()) {
            call.publish(chunk);
            return;
        }
        let (Some(due), false) = (call.live.due(), call.set) else {
            return;
        };
        // No runtime (a test's plain thread): told when the call ends.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        call.set = true;
        let (progress, key) = (self.clone(), key.clone());
        runtime.spawn(async move {
            tokio::time::sleep_until(due).await;
            let mut inner = progress.inner();
            if let Some(call) = inner.calls.get_mut(&key) {
                call.set = false;
                if let Some(chunk) = call.live.flush(Instant::now()) {
                    call.publish(chunk);
                }
            }
        });
    }
}

/// What a progress notification says.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Said {
    pub(crate) progress: f64,
    pub(crate) total: Option<f64>,
    pub(crate) message: Option<String>,
}

/// `said` as a line of output: `[3/10] message` (capped with the rest of
/// the event it goes out in).
fn line(said: &Said) -> String {
    let count = match said.total {
        Some(total) => format!("[{}/{}]", said.progress, total),
        None => format!("[{}]", said.progress),
    };
    match &said.message {
        Some(message) => format!("{count} {message}\n"),
        None => format!("{count}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_told_for_its_own_call_only_while_it_runs() {
        let bus = crate::events::EventBus::new();
        let mut seen = bus.subscribe();
        let session = crate::protocol::SessionId::new();
        let progress = Arc::new(Progress::default());
        let events = Publisher::new(bus.clone(), session, None, "coder");
        let said = Said {
            progress: 3.0,
            total: Some(10.0),
            message: Some("indexing".into()),
        };
        // Told before the call is watched: it waits for it.
        progress.tell("files", "7", &said);
        let watched = progress.watch("files", "7", events, "call-1");
        let token = "7";
        progress.tell("files", token, &said);
        // Another server naming the same token speaks for nobody.
        progress.tell("other", token, &said);
        drop(watched);
        progress.tell("files", token, &said);
        let told = EventKind::ToolOutput {
            call_id: "call-1".into(),
            text: "[3/10] indexing\n".into(),
            truncated: false,
        };
        assert_eq!(seen.try_recv().unwrap().kind, told, "the early one");
        assert_eq!(
            seen.try_recv().unwrap().kind,
            told,
            "the one that waited, told as the call ended"
        );
        assert!(
            seen.try_recv().is_none(),
            "told for the call's own server, while it ran"
        );
        assert_eq!(
            line(&Said {
                progress: 1.5,
                ..Said::default()
            }),
            "[1.5]\n"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn progress_goes_out_at_most_every_tenth_of_a_second_and_capped() {
        let bus = crate::events::EventBus::new();
        let mut seen = bus.subscribe();
        let progress = Arc::new(Progress::default());
        let events = Publisher::new(bus.clone(), crate::protocol::SessionId::new(), None, "a");
        let watched = progress.watch("s", "1", events, "c");
        let step = |n: f64, message: &str| Said {
            progress: n,
            total: Some(3.0),
            message: Some(message.into()),
        };
        let text = |kind: EventKind| match kind {
            EventKind::ToolOutput {
                text, truncated, ..
            } => (text, truncated),
            other => panic!("{other:?}"),
        };
        progress.tell("s", "1", &step(1.0, "a"));
        assert_eq!(
            text(seen.try_recv().unwrap().kind).0,
            "[1/3] a\n",
            "at once"
        );
        progress.tell("s", "1", &step(2.0, "b"));
        progress.tell("s", "1", &step(3.0, "c"));
        tokio::task::yield_now().await;
        assert!(seen.try_recv().is_none(), "not yet due");
        tokio::time::sleep(crate::tools::live::EVERY + std::time::Duration::from_millis(1)).await;
        assert_eq!(
            text(seen.try_recv().unwrap().kind).0,
            "[2/3] b\n[3/3] c\n",
            "every notification since the last event, in one"
        );
        // A message past an event's cap is cut, and the event says so.
        tokio::time::sleep(crate::tools::live::EVERY).await;
        let long = "x".repeat(crate::tools::live::MAX_EVENT_BYTES * 2);
        progress.tell("s", "1", &step(3.0, &long));
        let (told, truncated) = text(seen.try_recv().unwrap().kind);
        assert!(truncated);
        assert_eq!(told.len(), crate::tools::live::MAX_EVENT_BYTES);
        drop(watched);
        assert!(seen.try_recv().is_none(), "nothing waited");
    }
}
