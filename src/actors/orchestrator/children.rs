//! Which session a parent's Task call started: the key by which a restarted or
//! resumed parent finds its sub-agents instead of starting them again. Sessions
//! started by this process are added as they start; those of earlier processes are
//! read once, from their journals' headers, the first time a call is not found:
//! in a task, its answer a message, while the questions that wait for it are
//! kept here (the Orchestrator never waits on the disk).

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use ractor::RpcReplyPort;

use super::Whereabouts;
use crate::journal::Record;
use crate::protocol::SessionId;

/// A question for the session a call started.
pub(super) type Question = (
    SessionId,
    String,
    RpcReplyPort<Option<(SessionId, Whereabouts)>>,
);

/// Sub-agents by (parent session, call id).
#[derive(Debug)]
pub(super) struct Children {
    /// By parent, then call: a parent's entries go when it stops.
    by_call: HashMap<SessionId, HashMap<String, SessionId>>,
    /// The journals of earlier processes, until they are being read.
    unread: Option<PathBuf>,
    /// Questions waiting for those journals to be read.
    waiting: Vec<Question>,
}

/// What is known of a call's sub-agent.
#[derive(Debug)]
pub(super) enum Lookup {
    /// Known now: the question, to answer with this session or none.
    Known(Question, Option<SessionId>),
    /// Not until the journals of earlier processes are read: the question waits
    /// here. Read the folder, when given (for the first to wait), with
    /// [`read_headers`], and hand the headers to [`Children::read`].
    Waiting(Option<PathBuf>),
}

impl Children {
    pub(super) fn new(sessions: PathBuf) -> Self {
        Self {
            by_call: HashMap::new(),
            unread: Some(sessions),
            waiting: Vec::new(),
        }
    }

    pub(super) fn insert(&mut self, parent: SessionId, call: &str, child: SessionId) {
        (self.by_call.entry(parent).or_default()).insert(call.to_owned(), child);
    }

    /// Forgets the sub-agents `parent` started: it has stopped, and nobody
    /// looks them up by its calls any more.
    pub(super) fn forget(&mut self, parent: SessionId) {
        self.by_call.remove(&parent);
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
    /// (`resumed`): no other can have sub-agents there. A question that must wait
    /// for them is kept, to be answered by [`Children::read`].
    pub(super) fn find(&mut self, question: Question, resumed: bool) -> Lookup {
        if let Some(child) = self.get(question.0, &question.1) {
            return Lookup::Known(question, Some(child));
        }
        let read = self.unread.is_none() && self.waiting.is_empty();
        if !resumed || read {
            return Lookup::Known(question, None);
        }
        self.waiting.push(question);
        Lookup::Waiting(self.unread.take())
    }

    /// The headers of earlier processes' journals are read: kept (this
    /// process's own starts are newer), and the questions that waited returned,
    /// each with its answer.
    pub(super) fn read(
        &mut self,
        journaled: HashMap<(SessionId, String), SessionId>,
    ) -> Vec<(Question, Option<SessionId>)> {
        for ((parent, call), child) in journaled {
            (self.by_call.entry(parent).or_default())
                .entry(call)
                .or_insert(child);
        }
        let waiting = std::mem::take(&mut self.waiting);
        (waiting.into_iter())
            .map(|question| {
                let found = self.get(question.0, &question.1);
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
