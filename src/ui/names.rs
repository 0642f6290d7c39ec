//! The names a person sees on the live tree, for the questions that name
//! their agent: each session's label (`maker#2`) and its parent, recorded by
//! the display as its rows appear, read by the permission question.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::protocol::SessionId;

/// How long a question waits for its agent's row to be shown before it
/// names the agent by its role alone.
const SHOWN_WITHIN: Duration = Duration::from_secs(2);

/// Each session's label and parent, as the live tree shows them. Cheap to
/// clone; the clones share them.
#[derive(Clone, Debug, Default)]
pub struct Names {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    rows: Mutex<HashMap<SessionId, (String, Option<SessionId>)>>,
    added: tokio::sync::Notify,
    /// Whether a display records rows here at all.
    followed: std::sync::atomic::AtomicBool,
}

impl Names {
    /// Says that a display records its rows here.
    pub fn followed(&self) {
        (self.inner.followed).store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Records a row as the tree shows it.
    pub fn record(&self, session: SessionId, label: &str, parent: Option<SessionId>) {
        let mut rows = self
            .inner
            .rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        rows.insert(session, (label.to_owned(), parent));
        drop(rows);
        self.inner.added.notify_waiters();
    }

    /// The labels from the tree's root down to `session`'s (`lead`,
    /// `planner#1`, `maker#2`); `None` when its row is not shown.
    pub fn place(&self, session: SessionId) -> Option<Vec<String>> {
        let rows = self
            .inner
            .rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut place = Vec::new();
        let mut at = Some(session);
        // Bounded, so that a loop in what was recorded ends.
        while let Some(session) = at.filter(|_| place.len() < 64) {
            let Some((label, parent)) = rows.get(&session) else {
                break;
            };
            place.push(label.clone());
            at = *parent;
        }
        place.reverse();
        (!place.is_empty()).then_some(place)
    }

    /// `session`'s place once its row is shown (waiting a little for the
    /// display to catch up with the run's events); `None` if it is not.
    pub async fn place_when_shown(&self, session: SessionId) -> Option<Vec<String>> {
        if !(self.inner.followed).load(std::sync::atomic::Ordering::SeqCst) {
            return self.place(session);
        }
        let wait = async {
            loop {
                let added = self.inner.added.notified();
                if let Some(place) = self.place(session) {
                    return place;
                }
                added.await;
            }
        };
        tokio::time::timeout(SHOWN_WITHIN, wait).await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_place_runs_from_the_root_down_and_waits_for_its_row() {
        let names = Names::default();
        names.followed();
        let (lead, planner, maker) = (SessionId::new(), SessionId::new(), SessionId::new());
        names.record(lead, "lead", None);
        names.record(planner, "planner#1", Some(lead));
        assert_eq!(names.place(maker), None);
        let later = names.clone();
        let shown = tokio::spawn(async move { later.place_when_shown(maker).await });
        tokio::task::yield_now().await;
        names.record(maker, "maker#2", Some(planner));
        assert_eq!(
            shown.await.unwrap().unwrap(),
            ["lead", "planner#1", "maker#2"]
        );
        // A row never shown is given up on.
        assert_eq!(names.place_when_shown(SessionId::new()).await, None);
    }
}
