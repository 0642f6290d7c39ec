//! An MCP server's progress notifications for a call, told as that call's
//! `tool_output` events: each request carries a progress token (the
//! client's), and what the call's own server says of that token is told as
//! the call's output, to whoever watches it. A notification that comes before
//! its call is watched (the server answered at once) waits, a few at most.

use std::sync::Arc;

use dashmap::DashMap;

use crate::events::Publisher;
use crate::protocol::EventKind;

/// The most of one notification's message told.
const MAX_MESSAGE: usize = 500;

/// Notifications kept for calls not watched yet, at most.
const EARLY: usize = 32;

/// The calls whose progress is told, by server and token.
#[derive(Debug, Default)]
pub struct Progress {
    calls: DashMap<(String, String), (Publisher, String)>,
    /// Notifications for calls not watched yet, oldest first.
    early: std::sync::Mutex<std::collections::VecDeque<((String, String), Said)>>,
}

/// A progress token as text.
pub(crate) fn token_text(token: &rmcp::model::ProgressToken) -> String {
    match &token.0 {
        rmcp::model::NumberOrString::String(token) => token.to_string(),
        rmcp::model::NumberOrString::Number(n) => n.to_string(),
    }
}

/// A call whose progress is told while this is held.
#[derive(Debug)]
pub(crate) struct Watched {
    progress: Arc<Progress>,
    key: (String, String),
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.progress.calls.remove(&self.key);
    }
}

impl Progress {
    /// Tells the progress `server` sends of the call that carries `token`
    /// (call `call_id`) through `events` until the guard is dropped.
    pub(crate) fn watch(
        self: &Arc<Self>,
        server: &str,
        token: &str,
        events: Publisher,
        call_id: &str,
    ) -> Watched {
        let key = (server.to_owned(), token.to_owned());
        let early: Vec<Said> = {
            let mut early = self
                .early
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (mine, others) = std::mem::take(&mut *early)
                .into_iter()
                .partition(|(k, _)| *k == key);
            *early = others;
            mine.into_iter().map(|(_, said)| said).collect()
        };
        for said in &early {
            publish(&events, call_id, said);
        }
        self.calls.insert(key.clone(), (events, call_id.to_owned()));
        Watched {
            progress: self.clone(),
            key,
        }
    }

    /// `server` (re)connected: what it said before is of no call of now
    /// (its tokens count from the start again).
    pub(crate) fn forget(&self, server: &str) {
        let mut early = self
            .early
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        early.retain(|((from, _), _)| from != server);
    }

    /// `server` said how far the call of `token` has come.
    pub(crate) fn tell(&self, server: &str, token: &str, said: &Said) {
        let key = (server.to_owned(), token.to_owned());
        if let Some(call) = self.calls.get(&key) {
            let (events, call_id) = call.value();
            publish(events, call_id, said);
            return;
        }
        let mut early = self
            .early
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if early.len() == EARLY {
            early.pop_front();
        }
        early.push_back((key, said.clone()));
    }
}

/// What a progress notification says.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Said {
    pub(crate) progress: f64,
    pub(crate) total: Option<f64>,
    pub(crate) message: Option<String>,
}

/// Tells `said` as call `call_id`'s output.
fn publish(events: &Publisher, call_id: &str, said: &Said) {
    events.publish(EventKind::ToolOutput {
        call_id: call_id.to_owned(),
        text: line(said),
        truncated: said
            .message
            .as_ref()
            .is_some_and(|m| m.chars().count() > MAX_MESSAGE),
    });
}

/// `said` as a line of output: `[3/10] message`.
fn line(said: &Said) -> String {
    let count = match said.total {
        Some(total) => format!("[{}/{}]", said.progress, total),
        None => format!("[{}]", said.progress),
    };
    match &said.message {
        Some(message) => {
            let message: String = message.chars().take(MAX_MESSAGE).collect();
            format!("{count} {message}\n")
        }
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
        assert_eq!(seen.try_recv().unwrap().kind, told);
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
}
