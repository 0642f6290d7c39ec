//! Events for the tests of the board and its drawing.

use crate::protocol::{Event, EventKind, SessionId};

/// An event of `session` (a sub-agent of `parent`, if any), playing `agent`.
pub(crate) fn event(
    session: SessionId,
    parent: Option<SessionId>,
    agent: &str,
    kind: EventKind,
) -> Event {
    Event {
        seq: 0,
        session,
        parent,
        agent: agent.into(),
        kind,
    }
}

/// `session`'s start.
pub(crate) fn started(session: SessionId, parent: Option<SessionId>, agent: &str) -> Event {
    let kind = EventKind::SessionStarted {
        model: "m".into(),
        resumed: false,
        memory: Vec::new(),
    };
    event(session, parent, agent, kind)
}
