//! Which session a parent's Task call started: the key by which a restarted or
//! resumed parent finds its sub-agents instead of starting them again. Sessions
//! started by this process are added as they start; a resumed parent's from
//! earlier processes are read from the journals' headers the first time one of
//! its calls is not found (once each time it is resumed): in a task, its answer
//! a message, while the questions that wait for it are kept here (the
//! Orchestrator never waits on the disk). Everything of a parent goes when it
//! stops.

use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use ractor::RpcReplyPort;

use super::Whereabouts;
use crate::journal::Record;
use crate::protocol::SessionId;

/// Where to answer a question for the session a call started.
pub(super) type Question = RpcReplyPort<Option<(SessionId, Whereabouts)>>;

/// Sub-agents by (parent session, call id).
#[derive(Debug)]
pub(super) struct Children<Q = Question> {
    /// By parent, then call: a parent's entries go when it stops.
    by_call: HashMap<SessionId, HashMap<String, SessionId>>,
    /// The journals' folder, read for a resumed parent's sub-agents.
    folder: PathBuf,
    /// Resumed parents whose journaled sub-agents are in `by_call`: a call of
    /// theirs not found there started none.
    read_for: HashSet<SessionId>,
    /// The folder is being read.
    reading: bool,
    /// Questions waiting for that reading: (parent, the question).
    waiting: Vec<(SessionId, String, Q)>,
}

/// What is known of a call's sub-agent.
#[derive(Debug)]
pub(super) enum Lookup<Q = Question> {
    /// Known now: the question, to answer with this session or none.
    Known(Q, Option<SessionId>),
    /// Not until the journals of earlier processes are read: the question waits
    /// here. Read the folder, when given (for the first to wait), with
    /// [`read_headers`], and hand the headers to [`Children::read`].
    Waiting(Option<PathBuf>),
}

impl<Q> Children<Q> {
    pub(super) fn new(sessions: PathBuf) -> Self {
        Self {
            by_call: HashMap::new(),
            folder: sessions,
            read_for: HashSet::new(),
            reading: false,
            waiting: Vec::new(),
        }
    }

    pub(super) fn insert(&mut self, parent: SessionId, call: &str, child: SessionId) {
        (self.by_call.entry(parent).or_default()).insert(call.to_owned(), child);
    }

    /// Forgets the sub-agents `parent` started: it has stopped, and nobody
    /// looks them up by its calls any more (resumed again, it reads them again).
    pub(super) fn forget(&mut self, parent: SessionId) {
        self.by_call.remove(&parent);
        self.read_for.remove(&parent);
    }

    /// Parents with sub-agents on record.
    pub(super) fn len(&self) -> usize {
        self.by_call.len()
    }

    fn get(&self, parent: SessionId, call: &str) -> Option<SessionId> {
        self.by_call.get(&parent)?.get(call).copied()
    }

    /// The session `parent`'s call `call` started, if known. Journals of earlier
    /// processes are looked into only for a parent that came from one
    /// (`resumed`), once for each time it did: no other can have sub-agents
    /// there. A question that must wait for them is kept, to be answered by
    /// [`Children::read`].
    pub(super) fn find(
        &mut self,
        parent: SessionId,
        call: String,
        question: Q,
        resumed: bool,
    ) -> Lookup<Q> {
        if let Some(child) = self.get(parent, &call) {
            return Lookup::Known(question, Some(child));
        }
        if !resumed || self.read_for.contains(&parent) {
            return Lookup::Known(question, None);
        }
        self.waiting.push((parent, call, question));
        if self.reading {
            return Lookup::Waiting(None);
        }
        self.reading = true;
        Lookup::Waiting(Some(self.folder.clone()))
    }

    /// The headers of earlier processes' journals are read: the waiting
    /// parents' sub-agents kept (this process's own starts are newer), and the
    /// questions that waited returned, each with its answer.
    pub(super) fn read(
        &mut self,
        journaled: HashMap<(SessionId, String), SessionId>,
    ) -> Vec<(Q, Option<SessionId>)> {
        self.reading = false;
        let waiting = std::mem::take(&mut self.waiting);
        let parents: HashSet<SessionId> = waiting.iter().map(|(parent, _, _)| *parent).collect();
        for ((parent, call), child) in journaled {
            if parents.contains(&parent) {
                (self.by_call.entry(parent).or_default())
                    .entry(call)
                    .or_insert(child);
            }
        }
        self.read_for.extend(parents);
        (waiting.into_iter())
            .map(|(parent, call, question)| {
                let found = self.get(parent, &call);
                (question, found)
            })
            .collect()
    }
}

/// Every sub-agent journal's (parent, call) and session, the newest session when a
/// call started more than one. Unreadable files are skipped: they name no child.
pub(super) fn read_headers(dir: &Path) -> HashMap<(SessionId, String), SessionId> {
    let mut found: HashMap<(SessionId, String), SessionId> = HashMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let Ok(file) = crate::small_file::open(&path, crate::small_file::Access::Read) else {
            continue;
        };
        // A header is one short line.
        let mut first = String::new();
        let mut head = std::io::BufReader::new(std::io::Read::take(file, 64 * 1024));
        if head.read_line(&mut first).is_err() {
            continue;
        }
        if let Ok(Record::Header {
            session,
            parent: Some(parent),
            tool_call_id: Some(call),
            ..
        }) = serde_json::from_str(&first)
        {
            let newest = found.entry((parent, call)).or_insert(session);
            *newest = (*newest).max(session);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn children() -> Children<u32> {
        Children::new(PathBuf::from("/state/sessions"))
    }

    fn answered(lookup: Lookup<u32>) -> (u32, Option<SessionId>) {
        match lookup {
            Lookup::Known(question, child) => (question, child),
            Lookup::Waiting(dir) => panic!("waits (read {dir:?})"),
        }
    }

    #[test]
    fn a_call_started_here_is_found_and_one_of_a_fresh_parent_is_none() {
        let mut known = children();
        let (parent, child) = (SessionId::new(), SessionId::new());
        known.insert(parent, "t1", child);
        assert_eq!(
            answered(known.find(parent, "t1".into(), 1, true)),
            (1, Some(child))
        );
        // Not resumed: no earlier process can have started its sub-agents.
        assert_eq!(
            answered(known.find(parent, "t2".into(), 2, false)),
            (2, None)
        );
    }

    #[test]
    fn a_resumed_parent_reads_the_journals_once_and_again_when_resumed_again() {
        let mut known = children();
        let (parent, other) = (SessionId::new(), SessionId::new());
        let (old, elsewhere) = (SessionId::new(), SessionId::new());
        // The first to wait gets the folder; the next waits behind that reading.
        assert!(matches!(
            known.find(parent, "t1".into(), 1, true),
            Lookup::Waiting(Some(dir)) if dir == Path::new("/state/sessions")
        ));
        assert!(matches!(
            known.find(parent, "t2".into(), 2, true),
            Lookup::Waiting(None)
        ));
        let journaled = HashMap::from([
            ((parent, "t1".to_owned()), old),
            ((other, "t9".to_owned()), elsewhere),
        ]);
        let mut answers = known.read(journaled.clone());
        answers.sort_by_key(|(q, _)| *q);
        assert_eq!(answers, [(1, Some(old)), (2, None)]);
        // Only the waiting parent's are kept; a new call of its finds none at once.
        assert_eq!(known.len(), 1);
        assert_eq!(
            answered(known.find(parent, "t3".into(), 3, true)),
            (3, None)
        );
        // It stops: all of it goes. Resumed again, it reads the journals again.
        known.forget(parent);
        assert_eq!(known.len(), 0);
        assert!(matches!(
            known.find(parent, "t1".into(), 4, true),
            Lookup::Waiting(Some(_))
        ));
        assert_eq!(known.read(journaled), [(4, Some(old))]);
    }

    #[test]
    fn a_start_of_this_process_wins_over_a_journaled_one() {
        let mut known = children();
        let (parent, old, new) = (SessionId::new(), SessionId::new(), SessionId::new());
        assert!(matches!(
            known.find(parent, "t1".into(), 1, true),
            Lookup::Waiting(Some(_))
        ));
        known.insert(parent, "t1", new);
        let answers = known.read(HashMap::from([((parent, "t1".to_owned()), old)]));
        assert_eq!(answers, [(1, Some(new))]);
    }
}
