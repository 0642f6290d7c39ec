//! Which session a parent's Task call started: the key by which a restarted or
//! resumed parent finds its sub-agents instead of starting them again. Sessions
//! started by this process are added as they start; those of earlier processes are
//! read once, from their journals' headers, the first time a call is not found.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use crate::journal::Record;
use crate::protocol::SessionId;

/// Sub-agents by (parent session, call id).
#[derive(Debug)]
pub(super) struct Children {
    by_call: HashMap<(SessionId, String), SessionId>,
    /// The journals of earlier processes, until they have been read.
    unread: Option<PathBuf>,
}

impl Children {
    pub(super) fn new(sessions: PathBuf) -> Self {
        Self {
            by_call: HashMap::new(),
            unread: Some(sessions),
        }
    }

    pub(super) fn insert(&mut self, parent: SessionId, call: &str, child: SessionId) {
        self.by_call.insert((parent, call.to_owned()), child);
    }

    /// The session `parent`'s call `call` started, if any. Journals of earlier
    /// processes are read only for a parent that came from one (`resumed`): no
    /// other can have sub-agents there.
    pub(super) async fn find(
        &mut self,
        parent: SessionId,
        call: &str,
        resumed: bool,
    ) -> Option<SessionId> {
        let key = (parent, call.to_owned());
        if let Some(child) = self.by_call.get(&key) {
            return Some(*child);
        }
        if !resumed {
            return None;
        }
        let dir = self.unread.take()?;
        let journaled = tokio::task::spawn_blocking(move || read_headers(&dir))
            .await
            .unwrap_or_default();
        for (key, child) in journaled {
            // This process's own starts are newer than any journal's.
            self.by_call.entry(key).or_insert(child);
        }
        self.by_call.get(&key).copied()
    }
}

/// Every sub-agent journal's (parent, call) and session, the newest session when a
/// call started more than one. Unreadable files are skipped: they name no child.
fn read_headers(dir: &Path) -> HashMap<(SessionId, String), SessionId> {
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
