//! The sync requests the journal writer holds: each is due at once, or by a
//! deadline (a turn boundary's, which waits a little for a sync that covers its
//! file anyway).

use std::collections::{BTreeSet, HashMap};
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

/// The requests waiting for their deadline, by file: a sync of a file answers all
/// of its requests, so a file falls due at its earliest request's deadline. A
/// batch costs what it serves, not what is held (a fan-out holds one request per
/// sub-agent, ten thousand of them, and its writer runs thousands of batches).
#[derive(Debug, Default)]
pub(super) struct Held {
    /// Each file's held requests (`None`: of everything) and its earliest deadline.
    files: HashMap<Option<PathBuf>, (Instant, Vec<SyncRequest>)>,
    /// Each file with held requests, by its earliest deadline.
    deadlines: BTreeSet<(Instant, Option<PathBuf>)>,
}

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
        let mut due = Vec::new();
        for request in new {
            match request.by {
                Some(by) if !closing && by > now => self.hold(request, by),
                _ => due.push(request),
            }
        }
        while (self.deadlines.first()).is_some_and(|(by, _)| closing || *by <= now) {
            if let Some((_, path)) = self.deadlines.pop_first()
                && let Some((_, held)) = self.files.remove(&path)
            {
                due.extend(held);
            }
        }
        match Scope::of(&due, closing) {
            Scope::Nothing => {}
            Scope::Everything => {
                self.deadlines.clear();
                due.extend(self.files.drain().flat_map(|(_, (_, held))| held));
            }
            Scope::Files(paths) => {
                for path in paths {
                    let path = Some(path);
                    if let Some((by, held)) = self.files.remove(&path) {
                        self.deadlines.remove(&(by, path));
                        due.extend(held);
                    }
                }
            }
        }
        due
    }

    /// When the earliest held request falls due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.deadlines.first().map(|(by, _)| *by)
    }

    /// Holds `request` with its file's others; an earlier deadline moves the file up.
    fn hold(&mut self, request: SyncRequest, by: Instant) {
        let path = request.path.clone();
        let (earliest, held) = (self.files.entry(path.clone())).or_insert((by, Vec::new()));
        held.push(request);
        if held.len() == 1 || by < *earliest {
            self.deadlines.remove(&(*earliest, path.clone()));
            self.deadlines.insert((by, path));
            *earliest = by;
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.files.values().map(|(_, held)| held.len()).sum()
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

    #[test]
    fn a_file_falls_due_at_its_earliest_request_and_all_of_its_requests_go_together() {
        let now = Instant::now();
        let at = |ms| Some(now + Duration::from_millis(ms));
        let mut held = Held::default();
        let new = vec![
            request(Some("a"), at(30)),
            request(Some("b"), at(20)),
            request(Some("a"), at(10)),
            request(Some("c"), at(40)),
        ];
        assert!(held.take_due(new, now, false).is_empty());
        assert_eq!(held.next_due(), at(10), "a's second request moved a up");
        // At 10 ms, a falls due with both its requests; b and c stay.
        let due = held.take_due(Vec::new(), now + Duration::from_millis(10), false);
        assert_eq!(paths(&due), [Some("a"), Some("a")]);
        assert_eq!((held.len(), held.next_due()), (2, at(20)));
        // A sync of c asked now covers c's held request; b waits for its own.
        let due = held.take_due(vec![request(Some("c"), None)], now, false);
        assert_eq!(paths(&due), [Some("c"), Some("c")]);
        assert_eq!((held.len(), held.next_due()), (1, at(20)));
        let due = held.take_due(Vec::new(), now + Duration::from_millis(25), false);
        assert_eq!(paths(&due), [Some("b")]);
        assert_eq!((held.len(), held.next_due()), (0, None));
    }
}
