//! How a run ends: a cancel (at once, or once what is streaming or running has
//! stopped), a stop at the next turn boundary (asked for, or a budget spent: the
//! time alarm, the role's own budget), a failure, and the one terminal record
//! every run ends with, made durable before its event.

use std::time::Instant;

use super::{Awaiting, Effect, Machine, Phase};
use crate::error::SessionError;
use crate::journal::Record;
use crate::protocol::{Outcome, RunStats};
use crate::session::queue::cancels;

impl Machine {
    pub(super) fn on_cancel(&mut self, now: Instant, seq: u64) {
        let Some(run) = self.run.as_mut().filter(|r| cancels(seq, &r.prompts)) else {
            self.emit(Effect::CancelDone { seq });
            return;
        };
        run.cancelled = Some(seq);
        if !self.cut_current() {
            self.end_cancelled(now);
        }
    }

    /// Cuts what the run is doing now (its stream, or its running tool calls),
    /// to end once that is back; `false` when it is between them.
    fn cut_current(&mut self) -> bool {
        let cut = match self.run.as_ref().map(|r| &r.phase) {
            Some(Phase::Streaming { stream, .. }) => Effect::CancelStream { stream: *stream },
            Some(Phase::Tools(turn)) => Effect::CancelTools { turn: turn.seq },
            Some(
                Phase::Backoff { .. }
                | Phase::Starting
                | Phase::Background { .. }
                | Phase::StopHooks { .. },
            )
            | None => {
                return false;
            }
        };
        self.emit(cut);
        true
    }

    /// The run is to stop, for `reason` (someone asked; a budget ran out): it
    /// ends at its next turn boundary (now, if it is between turns); what is
    /// streaming or running finishes first. The first reason given is kept.
    pub(super) fn stop_run(&mut self, now: Instant, reason: &str) {
        let Some(run) = self.run.as_mut() else {
            return;
        };
        run.stop.get_or_insert_with(|| reason.to_owned());
        match run.phase {
            Phase::Backoff { .. }
            | Phase::Starting
            | Phase::Background { .. }
            | Phase::StopHooks { .. } => self.end_stopped(now),
            Phase::Streaming { .. } | Phase::Tools(_) => {}
        }
    }

    /// The run's time is up: what streams is cut where it is (what that turn
    /// had said kept as the partial work), the running tool calls are cancelled
    /// (each keeps its output so far), and the run ends `timed_out` as soon as
    /// they are back. Sub-agents under the same deadline time out themselves.
    pub(super) fn on_time_up(&mut self, now: Instant, started_by: u64) {
        let Some(run) = self.run.as_mut().filter(|r| r.prompts[0] == started_by) else {
            return;
        };
        if run.halting() {
            return;
        }
        run.timed_out = true;
        if !self.cut_current() {
            self.end_halted(now);
        }
    }

    /// The run's shared budget is spent (this session's turn or another's): a
    /// streaming turn is cut where it is (its request cancelled, what it said
    /// kept), and the run stops at the boundary after what runs now (a
    /// sub-agent a Task call waits on hears the same, and stops too).
    pub(super) fn on_budget_spent(&mut self, now: Instant, reason: &'static str) {
        let Some(run) = self.run.as_mut() else {
            return;
        };
        if run.halting() {
            return;
        }
        run.stop.get_or_insert_with(|| reason.to_owned());
        if let Phase::Streaming { stream, .. } = run.phase {
            self.emit(Effect::CancelStream { stream });
            return;
        }
        self.stop_run(now, reason);
    }

    /// Sets the alarm of the run started by prompt `run` for when its time is up:
    /// the role's timeout from now, or the whole run's deadline if sooner.
    pub(super) fn arm(&mut self, now: Instant, run: u64) {
        let own = self.spec.budget.timeout;
        let shared = self
            .spec
            .meter
            .as_ref()
            .and_then(|m| m.deadline())
            .map(|d| d.saturating_duration_since(now));
        let after = match (own, shared) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(after) = after {
            self.emit(Effect::Alarm { run, after });
        }
    }

    /// Stops the run at its next turn boundary when its own budget is spent.
    pub(super) fn check_budget(&mut self) {
        let budget = self.spec.budget;
        if let Some(run) = self.run.as_mut()
            && let Some(reason) = budget.spent(&run.stats)
        {
            run.stop.get_or_insert_with(|| reason.to_owned());
        }
    }

    /// Ends the run as stopped, its last text as the partial work.
    pub(super) fn end_stopped(&mut self, now: Instant) {
        let Some(run) = self.run.as_mut() else {
            return;
        };
        let reason = run.stop.take().unwrap_or_default();
        let partial = run.last_text.clone();
        self.end_run(now, |stats| Outcome::Partial {
            reason,
            partial,
            stats,
        });
    }

    /// Ends a run that was halting ([`super::Run::halting`]): cancelled, or
    /// timed out when its time ran out and no cancel came.
    pub(super) fn end_halted(&mut self, now: Instant) {
        match self.run.as_ref() {
            Some(run) if run.timed_out && run.cancelled.is_none() => self.end_timed_out(now),
            _ => self.end_cancelled(now),
        }
    }

    /// Ends the run as timed out, its last text as the partial work.
    pub(super) fn end_timed_out(&mut self, now: Instant) {
        let partial = self
            .run
            .as_ref()
            .map(|r| r.last_text.clone())
            .unwrap_or_default();
        self.end_run(now, |stats| Outcome::TimedOut { partial, stats });
    }

    /// Ends the run as cancelled, its last text as the partial answer.
    pub(super) fn end_cancelled(&mut self, now: Instant) {
        let partial = self
            .run
            .as_ref()
            .map(|r| r.last_text.clone())
            .unwrap_or_default();
        self.end_run(now, |stats| Outcome::Cancelled { partial, stats });
    }

    pub(super) fn fail(&mut self, now: Instant, error: &SessionError) {
        tracing::warn!(session = %self.id, %error, "run failed");
        let partial = self
            .run
            .as_ref()
            .map(|r| r.last_text.clone())
            .unwrap_or_default();
        // A model's failure names the model (a sub-agent's caller may not
        // know which it used, after a fallback).
        let model = matches!(
            error,
            SessionError::Llm(_) | SessionError::RetriesExhausted { .. }
        )
        .then(|| self.spec.model.clone());
        self.end_run(now, |stats| {
            let mut outcome = Outcome::failed(error, partial, stats);
            if let Outcome::Failed { model: named, .. } = &mut outcome {
                *named = model;
            }
            outcome
        });
    }

    /// Ends the run with exactly one terminal record, made durable before its
    /// event; whatever the run still had in flight is cancelled.
    pub(super) fn end_run(&mut self, now: Instant, outcome: impl FnOnce(RunStats) -> Outcome) {
        let Some(mut run) = self.run.take() else {
            return;
        };
        match &run.phase {
            Phase::Streaming { stream, .. } => {
                let stream = *stream;
                self.emit(Effect::CancelStream { stream });
            }
            Phase::Tools(turn) if !turn.running.is_empty() => {
                let turn = turn.seq;
                self.emit(Effect::CancelTools { turn });
            }
            Phase::Tools(_)
            | Phase::Starting
            | Phase::Backoff { .. }
            | Phase::Background { .. }
            | Phase::StopHooks { .. } => {}
        }
        if let Some(seq) = run.cancelled {
            self.emit(Effect::CancelDone { seq });
        }
        run.stats.duration_ms = now.saturating_duration_since(run.started).as_millis() as u64;
        let outcome = outcome(run.stats);
        self.emit(Effect::Journal(vec![Record::Terminal {
            outcome: outcome.clone(),
        }]));
        let prompts = run.prompts;
        self.ask(Awaiting::End { prompts, outcome }, Effect::Sync);
    }
}
