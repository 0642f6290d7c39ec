//! Deliberate faults, for exercising supervision: a session panics at a chosen
//! point. Built only with the `test-support` feature, which the tests enable; a
//! shipped binary has neither this module nor the flag that uses it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// Where a [`FaultPlan`] strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultPoint {
    /// When the session is about to start this turn (from 1).
    BeforeTurn(u32),
    /// Right after the session journaled a tool result of this turn.
    AfterToolResult(u32),
    /// Right after the session started a tool call of this turn.
    AfterToolStarted(u32),
}

impl FaultPoint {
    /// What the session panics with here.
    pub(crate) fn panic_message(self) -> String {
        match self {
            Self::BeforeTurn(turn) => format!("injected fault: session panicked at turn {turn}"),
            Self::AfterToolStarted(turn) => {
                format!("injected fault: session panicked after starting a tool in turn {turn}")
            }
            Self::AfterToolResult(turn) => {
                format!("injected fault: session panicked after a tool result in turn {turn}")
            }
        }
    }
}

/// A session panics at `point`, the first `remaining` times it gets there
/// (restarts included).
#[derive(Debug)]
pub struct FaultPlan {
    /// Where to panic.
    pub point: FaultPoint,
    /// Panics left.
    pub remaining: AtomicU32,
}

impl FaultPlan {
    /// Panic before turn `turn`, `times` times.
    pub fn panic_at(turn: u32, times: u32) -> Arc<Self> {
        Self::new(FaultPoint::BeforeTurn(turn), times)
    }

    /// Panic at `point`, `times` times.
    pub fn new(point: FaultPoint, times: u32) -> Arc<Self> {
        Arc::new(Self {
            point,
            remaining: AtomicU32::new(times),
        })
    }

    /// True (and one fewer left) when a session now at `here` must panic.
    pub(crate) fn fire(&self, here: FaultPoint) -> bool {
        here == self.point
            && self
                .remaining
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
    }
}
