//! The sync requests the journal writer holds: each is due at once, or by a
//! deadline (a turn boundary's, which waits a little for a sync that covers its
//! file anyway).

use std::path::PathBuf;
use std::time::Instant;

use tokio::sync::oneshot;

use super::Scope;

/// Where a sync request hears its answer.
pub(super) type Waiter = oneshot::Sender<Result<(), String>>;

/// A sync request: of one journal, or (`path: None`) of everything appended.
#[derive(Debug)]
pub(super) struct SyncRequest {
    pub(super) path: Option<PathBuf>,
    /// Served by then at the latest; `None`: by the next batch.
    pub(super) by: Option<Instant>,
    pub(super) done: Waiter,
}

/// The requests waiting for their deadline.
#[derive(Debug, Default)]
pub(super) struct Held(Vec<SyncRequest>);

impl Held {
    /// Adds `new` and takes out the batch's requests: those due at `now` (all of
    /// them when `closing`), and those held whose file the due ones sync anyway
    /// (all of them when one asks for everything). The others stay held.
    pub(super) fn take_due(
        &mut self,
        new: Vec<SyncRequest>,
        now: Instant,
        closing: bool,
    ) -> Vec<SyncRequest> {
        self.0.extend(new);
        let (mut due, held): (Vec<_>, Vec<_>) = std::mem::take(&mut self.0)
            .into_iter()
            .partition(|r| closing || r.by.is_none_or(|by| by <= now));
        let synced = Scope::of(&due, closing);
        for request in held {
            if synced.covers(request.path.as_deref()) {
                due.push(request);
            } else {
                self.0.push(request);
            }
        }
        due
    }

    /// When the earliest held request falls due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.0.iter().filter_map(|r| r.by).min()
    }
}

/// A sync request already queued, and its answer when it comes.
#[derive(Debug)]
pub enum PendingSync {
    /// Not answered yet (as far as anyone looked).
    Waiting(oneshot::Receiver<Result<(), String>>),
    /// The answer.
    Answered(Result<(), String>),
}

impl PendingSync {
    /// The answer, once the writer gives it.
    pub async fn wait(self) -> Result<(), String> {
        match self {
            Self::Answered(answer) => answer,
            Self::Waiting(answer) => answer.await.map_err(|_| super::STOPPED.to_owned())?,
        }
    }

    /// True once answered without an error: nothing left to hear.
    #[cfg(test)]
    pub(crate) fn succeeded(&mut self) -> bool {
        if let Self::Waiting(answer) = self {
            match answer.try_recv() {
                Ok(result) => *self = Self::Answered(result),
                Err(oneshot::error::TryRecvError::Empty) => return false,
                Err(oneshot::error::TryRecvError::Closed) => {
                    *self = Self::Answered(Err(super::STOPPED.to_owned()));
                }
            }
        }
        matches!(self, Self::Answered(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn request(path: Option<&str>, by: Option<Instant>) -> SyncRequest {
        SyncRequest {
            path: path.map(PathBuf::from),
            by,
            done: oneshot::channel().0,
        }
    }

    fn paths(requests: &[SyncRequest]) -> Vec<Option<&str>> {
        requests
            .iter()
            .map(|r| r.path.as_deref().and_then(|p| p.to_str()))
            .collect()
    }

    #[test]
    fn a_request_with_a_deadline_waits_for_it_or_for_a_sync_of_its_file() {
        let now = Instant::now();
        let later = Some(now + Duration::from_secs(1));
        let mut held = Held::default();
        let due = held.take_due(vec![request(Some("a"), later)], now, false);
        assert!(due.is_empty(), "not due yet");
        assert_eq!(held.next_due(), later);
        // A sync of another file leaves it waiting; one of its own file takes it.
        let due = held.take_due(vec![request(Some("b"), None)], now, false);
        assert_eq!(paths(&due), [Some("b")]);
        let due = held.take_due(vec![request(Some("a"), None)], now, false);
        assert_eq!(paths(&due), [Some("a"), Some("a")]);
        assert_eq!(held.next_due(), None);
    }

    #[test]
    fn a_held_request_is_served_by_its_deadline_a_sync_of_everything_or_closing() {
        let now = Instant::now();
        let by = now + Duration::from_millis(10);
        let mut held = Held::default();
        held.take_due(vec![request(Some("a"), Some(by))], now, false);
        assert_eq!(paths(&held.take_due(Vec::new(), by, false)), [Some("a")]);

        held.take_due(vec![request(Some("a"), Some(by))], now, false);
        let due = held.take_due(vec![request(None, None)], now, false);
        assert_eq!(paths(&due), [None, Some("a")]);

        held.take_due(vec![request(Some("a"), Some(by))], now, false);
        assert_eq!(paths(&held.take_due(Vec::new(), now, true)), [Some("a")]);
    }
}
