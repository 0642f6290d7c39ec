//! Budgets: what an agent may spend before it is stopped at
//! a turn boundary. A role's own budget (`maxCost`, `maxTokens`, `timeout`) bounds
//! its runs, sub-agents' spending included once they report it; the run's budget
//! (`--max-cost`, `--max-tokens`, `--timeout`) bounds the whole tree, every session
//! charging one shared [`RunMeter`] as its turns end. Pure, apart from the meter's
//! lock.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::conversation::Usage;
use crate::protocol::RunStats;

/// Limits; each one may be absent.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Budget {
    /// USD at most.
    pub max_cost_usd: Option<f64>,
    /// Tokens (prompt plus output) at most.
    pub max_tokens: Option<u64>,
    /// Wall time at most.
    pub timeout: Option<Duration>,
}

/// Why a budget stopped an agent: the terminal outcome's `reason`.
pub const COST: &str = "budget: cost";
/// See [`COST`].
pub const TOKENS: &str = "budget: tokens";
/// See [`COST`].
pub const TIME: &str = "budget: time";
/// See [`COST`].
pub const TURNS: &str = "budget: turns";

/// Whether a stop reason is one of the budgets' ([`COST`], [`TOKENS`], [`TIME`],
/// [`TURNS`]).
pub fn is_budget(reason: &str) -> bool {
    [COST, TOKENS, TIME, TURNS].contains(&reason)
}

impl Budget {
    /// True when no limit is set.
    pub fn is_unlimited(&self) -> bool {
        self.max_cost_usd.is_none() && self.max_tokens.is_none() && self.timeout.is_none()
    }

    /// The limit `stats` have reached, if any (time is watched apart: see
    /// [`RunMeter::deadline`]). A cost limit with an unknown cost never stops.
    pub fn spent(&self, stats: &RunStats) -> Option<&'static str> {
        if let (Some(max), Some(cost)) = (self.max_cost_usd, stats.cost_usd)
            && cost >= max
        {
            return Some(COST);
        }
        if self
            .max_tokens
            .is_some_and(|max| stats.usage.total() >= max)
        {
            return Some(TOKENS);
        }
        None
    }
}

/// The run's budget and what the whole tree has spent against it. The first
/// limit reached is told to every session watching ([`RunMeter::watch`]), so
/// that all of them stop at once, not each at its next turn.
#[derive(Debug)]
pub struct RunMeter {
    budget: Budget,
    started: Instant,
    spent: Mutex<RunStats>,
    reached: tokio::sync::watch::Sender<Option<&'static str>>,
}

impl RunMeter {
    /// The run's limits.
    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// A meter for a run that started at `started`.
    pub fn new(budget: Budget, started: Instant) -> Self {
        Self::resumed(
            budget,
            started,
            RunStats {
                cost_usd: Some(0.0),
                ..RunStats::default()
            },
        )
    }

    /// A meter for a run carried on from its journals: it had `spent` so far,
    /// and its time counts from `started` (now, less the time it had run).
    pub fn resumed(budget: Budget, started: Instant, spent: RunStats) -> Self {
        let reached = budget.spent(&spent);
        Self {
            budget,
            started,
            spent: Mutex::new(spent),
            reached: tokio::sync::watch::Sender::new(reached),
        }
    }

    /// Tells the first limit of spending (cost, tokens) the run reaches (at
    /// once, when it has already); `None` when it has no such limit (time is
    /// each session's own alarm).
    pub fn watch(&self) -> Option<tokio::sync::watch::Receiver<Option<&'static str>>> {
        let spends = self.budget.max_cost_usd.is_some() || self.budget.max_tokens.is_some();
        spends.then(|| self.reached.subscribe())
    }

    /// When the run's time is up.
    pub fn deadline(&self) -> Option<Instant> {
        self.budget.timeout.map(|t| self.started + t)
    }

    /// Adds one turn's spending; returns the limit the run has now reached.
    pub fn charge(&self, usage: &Usage, cost: Option<f64>) -> Option<&'static str> {
        let mut spent = self.spent.lock().unwrap_or_else(|e| e.into_inner());
        spent.charge(usage, cost);
        let reached = self.budget.spent(&spent);
        if let Some(limit) = reached {
            self.reached.send_if_modified(|told| {
                let first = told.is_none();
                told.get_or_insert(limit);
                first
            });
        }
        reached
    }

    /// The limit the run has reached, if any, time included.
    pub fn exhausted(&self, now: Instant) -> Option<&'static str> {
        if self.deadline().is_some_and(|d| now >= d) {
            return Some(TIME);
        }
        let spent = self.spent.lock().unwrap_or_else(|e| e.into_inner());
        self.budget.spent(&spent)
    }
}

/// Reads a duration as people write one: `90` or `90s` (seconds), `500ms`, `5m`,
/// `2h`, `7d`, or parts together (`1h30m`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration (write it as 90s, 5m, 1h30m or 500ms)");
    let text = text.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "d" => Duration::from_secs(n.saturating_mul(86_400)),
            _ => return Err(bad()),
        };
        total = total.saturating_add(part);
        rest = &rest[unit..];
    }
    if total.is_zero() {
        return Err(bad());
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        for bad in ["", "0s", "5 minutes", "m", "1.5h", "-3s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    fn usage(tokens: u64) -> Usage {
        Usage {
            input_tokens: tokens,
            ..Usage::default()
        }
    }

    #[test]
    fn each_limit_names_itself_when_reached() {
        let budget = Budget {
            max_cost_usd: Some(1.0),
            max_tokens: Some(100),
            timeout: None,
        };
        let mut stats = RunStats {
            cost_usd: Some(0.5),
            ..RunStats::default()
        };
        assert_eq!(budget.spent(&stats), None);
        stats.charge(&usage(99), Some(0.25));
        assert_eq!(budget.spent(&stats), None);
        stats.charge(&usage(1), Some(0.0));
        assert_eq!(budget.spent(&stats), Some(TOKENS));
        stats.usage = Usage::default();
        stats.charge(&Usage::default(), Some(0.25));
        assert_eq!(budget.spent(&stats), Some(COST));
    }

    #[test]
    fn an_unknown_cost_never_stops_a_run_and_stays_unknown() {
        let budget = Budget {
            max_cost_usd: Some(0.0),
            ..Budget::default()
        };
        let mut stats = RunStats {
            cost_usd: Some(0.0),
            ..RunStats::default()
        };
        stats.charge(&usage(10), None);
        assert_eq!(stats.cost_usd, None);
        stats.charge(&usage(10), Some(1.0));
        assert_eq!(stats.cost_usd, None);
        assert_eq!(budget.spent(&stats), None);
    }

    #[test]
    fn the_meter_adds_every_session_and_watches_the_clock() {
        let start = Instant::now();
        let meter = RunMeter::new(
            Budget {
                max_tokens: Some(30),
                timeout: Some(Duration::from_secs(10)),
                ..Budget::default()
            },
            start,
        );
        assert_eq!(meter.charge(&usage(10), None), None);
        assert_eq!(meter.charge(&usage(10), None), None);
        assert_eq!(meter.exhausted(start), None);
        assert_eq!(meter.exhausted(start + Duration::from_secs(10)), Some(TIME));
        assert_eq!(meter.charge(&usage(10), None), Some(TOKENS));
        assert_eq!(meter.exhausted(start), Some(TOKENS));
    }
}
