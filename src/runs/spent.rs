//! What a run had spent when its process ended, read from its agents'
//! journals: tokens, cost and the time it ran, so that a run carried on by
//! `resume` is held to what is left of its budget, not to a fresh one.
//!
//! Time is read from when each event was kept (`at`): the run's current
//! stretch begins at its lead's first event after its last `run_started`; each
//! process that ran it (the lead's `session_started`) adds the span from its
//! start to the last event any agent kept before the next one started, so the
//! hours a run lay interrupted do not count.

use std::time::Duration;

use crate::journal::Record;
use crate::protocol::{EventKind, RunStats};

/// A run's spending so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Spent {
    /// Tokens and cost of its model turns, every agent's.
    pub stats: RunStats,
    /// How long it ran.
    pub elapsed: Duration,
}

/// The spending of the run in progress whose lead journaled `lead` and whose
/// other agents journaled `others`.
pub fn spent(lead: &[Record], others: &[&[Record]]) -> Spent {
    let current = lead
        .iter()
        .rposition(|r| matches!(r, Record::RunStarted { .. }))
        .map_or(lead, |at| &lead[at..]);
    fn events(records: &[Record]) -> Vec<(Option<u64>, &EventKind)> {
        (records.iter())
            .filter_map(|r| match r {
                Record::Event { event, at, .. } => Some((*at, &event.kind)),
                _ => None,
            })
            .collect()
    }
    let own = events(current);
    let start = own.iter().find_map(|(at, _)| *at);
    // Each process that ran it starts a stretch.
    let mut stretches: Vec<(u64, u64)> = start.into_iter().map(|s| (s, s)).collect();
    for (at, kind) in &own {
        if let (Some(at), EventKind::SessionStarted { .. }) = (at, kind)
            && stretches.last().is_some_and(|(s, _)| at > s)
        {
            stretches.push((*at, *at));
        }
    }
    let mut stats = RunStats {
        cost_usd: Some(0.0),
        ..RunStats::default()
    };
    let all = own
        .iter()
        .cloned()
        .chain(others.iter().flat_map(|r| events(r)));
    for (at, kind) in all {
        // What was kept before this run began is an earlier run's.
        if let (Some(start), Some(at)) = (start, at)
            && at < start
        {
            continue;
        }
        if let EventKind::TurnFinished {
            usage, cost_usd, ..
        } = &kind
        {
            stats.charge(usage, *cost_usd);
        }
        if let Some(at) = at
            && let Some(stretch) = stretches.iter_mut().rev().find(|(s, _)| *s <= at)
        {
            stretch.1 = stretch.1.max(at);
        }
    }
    let elapsed = stretches.iter().map(|(s, e)| e - s).sum();
    Spent {
        stats,
        elapsed: Duration::from_millis(elapsed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Usage;
    use crate::protocol::{Event, SessionId};

    fn at(ms: u64, kind: EventKind) -> Record {
        Record::Event {
            event: Event {
                seq: 0,
                session: SessionId::new(),
                parent: None,
                agent: "a".into(),
                kind,
            },
            at: Some(ms),
            elided: None,
        }
    }

    fn started() -> EventKind {
        EventKind::SessionStarted {
            model: "m".into(),
            resumed: false,
            memory: Vec::new(),
        }
    }

    fn turn(tokens: u64) -> EventKind {
        EventKind::TurnFinished {
            turn: 1,
            text: String::new(),
            tool_calls: 0,
            usage: Usage {
                input_tokens: tokens,
                ..Usage::default()
            },
            cost_usd: Some(0.5),
        }
    }

    #[test]
    fn the_current_run_s_turns_and_stretches_count_and_the_time_it_lay_down_does_not() {
        let lead = [
            // An earlier run of the conversation: not this run's.
            Record::RunStarted {
                prompt: 1,
                limits: None,
            },
            at(0, started()),
            at(500, turn(1000)),
            Record::RunStarted {
                prompt: 2,
                limits: None,
            },
            at(10_000, EventKind::PromptQueued { waiting: 0 }),
            at(11_000, turn(10)),
            // The process died; a day later, another carried the run on.
            at(90_000_000, started()),
            at(90_002_000, turn(5)),
        ];
        let worker = vec![
            at(600, turn(2000)),
            at(12_000, turn(20)),
            at(13_000, EventKind::PromptQueued { waiting: 0 }),
        ];
        let spent = spent(&lead, &[&worker]);
        assert_eq!(spent.stats.usage.total(), 35);
        assert_eq!(spent.stats.cost_usd, Some(1.5));
        // 10 000 to 13 000, then 90 000 000 to 90 002 000.
        assert_eq!(spent.elapsed, Duration::from_millis(3000 + 2000));
    }

    #[test]
    fn a_journal_without_times_spends_its_turns_and_takes_no_time() {
        let lead = [
            Record::RunStarted {
                prompt: 1,
                limits: None,
            },
            Record::Event {
                event: Event {
                    seq: 0,
                    session: SessionId::new(),
                    parent: None,
                    agent: "a".into(),
                    kind: turn(7),
                },
                at: None,
                elided: None,
            },
        ];
        let spent = spent(&lead, &[]);
        assert_eq!(spent.stats.usage.total(), 7);
        assert_eq!(spent.elapsed, Duration::ZERO);
    }
}
