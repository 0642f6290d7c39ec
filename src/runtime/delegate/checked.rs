//! A Task call's check: run in its sub-agent's workspace, as the sub-agent
//! would run a Bash command, each time the sub-agent answers as done; a
//! failure is given back to it as a new prompt, until the check passes or its
//! attempts are spent (then the sub-agent's outcome is `failed`, class
//! `check`). Each run is journaled in the sub-agent's journal (`checked`), so a
//! resumed call runs no check twice.

use super::Handle;
use super::isolated::Work;
use super::{CancelWithCall, wait_for_outcome};
use crate::events::Publisher;
use crate::journal::Record;
use crate::protocol::{EventKind, Outcome, RunStats, SessionId};
use crate::session::SessionSpec;
use crate::session::queue::Failure;
use crate::task::{CHECK_TIMEOUT, Check, Checked};

/// Characters of a failed check's output shown to the sub-agent, from its end.
const TAIL: usize = 8_000;

/// The prompt a failed check gives the sub-agent.
fn failure(command: &str, exit: Option<i32>, attempt: u32, attempts: u32, output: &str) -> String {
    let how = match exit {
        Some(code) => format!("exit {code}"),
        None => "it did not exit".to_owned(),
    };
    let skip = output.chars().count().saturating_sub(TAIL);
    let tail: String = output.chars().skip(skip).collect();
    format!("Check `{command}` failed ({how}, attempt {attempt} of {attempts}):\n{tail}")
}

impl Handle {
    /// Checks sub-agent `child`'s work after it answered with `outcome`,
    /// carrying on from the checks `work` has recorded; its final outcome and
    /// how the check went. `spec`, given when it is not live (a resumed call
    /// whose sub-agent had ended), starts it again for its next check.
    /// The outcome's counters are those of all its runs.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn checked(
        &self,
        child: SessionId,
        guard: &mut CancelWithCall,
        check: &Check,
        outcome: Outcome,
        work: &Work,
        spec: Option<SessionSpec>,
        publisher: &Publisher,
    ) -> (Option<Outcome>, Option<Checked>) {
        let mut earlier = RunStats {
            cost_usd: Some(0.0),
            ..RunStats::default()
        };
        let (outcome, checked) = self
            .check_runs(
                child,
                guard,
                check,
                outcome,
                work,
                spec,
                publisher,
                &mut earlier,
            )
            .await;
        (outcome.map(|o| counting(o, &earlier)), checked)
    }

    /// [`Self::checked`]'s runs; `earlier` sums the counters of the runs
    /// before the last.
    #[allow(clippy::too_many_arguments)]
    async fn check_runs(
        &self,
        child: SessionId,
        guard: &mut CancelWithCall,
        check: &Check,
        mut outcome: Outcome,
        work: &Work,
        mut spec: Option<SessionSpec>,
        publisher: &Publisher,
        earlier: &mut RunStats,
    ) -> (Option<Outcome>, Option<Checked>) {
        let attempts = check.attempts;
        let mut attempt = work.checked;
        // Its check's failure is on record already (a resumed call).
        if matches!(&outcome, Outcome::Failed { class, .. } if class == "check") {
            return (Some(outcome), Some(failed_at(attempt, attempts)));
        }
        if work.check_refused {
            let message = format!("check `{}` was refused", check.command);
            let ended = self
                .fail_child(child, guard, spec, &message, &outcome, message.clone())
                .await;
            return (ended, Some(failed_at(attempt, attempts)));
        }
        if work.check_passed {
            let passed = Checked {
                passed: true,
                attempt,
                attempts,
            };
            return (Some(outcome), Some(passed));
        }
        let failed = |attempt| Checked {
            passed: false,
            attempt,
            attempts,
        };
        let mut pending = work.check_prompt.clone();
        loop {
            if let Some(prompt) = pending.take() {
                if let Some(spec) = spec.take() {
                    self.make_live(child, spec, guard).await;
                }
                let mut events = self.bus.subscribe_session_terminal(child);
                let seq = self.prompt(child, prompt);
                match wait_for_outcome(&mut events, Some(seq)).await {
                    Some(next) => {
                        add(earlier, outcome.stats());
                        outcome = next;
                    }
                    None => return (None, Some(failed(attempt))),
                }
            }
            if !matches!(outcome, Outcome::Completed { .. }) {
                return (Some(outcome), (attempt > 0).then(|| failed(attempt)));
            }
            if attempt >= attempts {
                let message = spent(check, attempts);
                let ended = self
                    .fail_child(child, guard, spec, &message, &outcome, message.clone())
                    .await;
                return (ended, Some(failed(attempts)));
            }
            attempt += 1;
            publisher.publish(EventKind::Checking { attempt, attempts });
            if let Some(spec) = spec.take() {
                self.make_live(child, spec, guard).await;
            }
            // Cancelled with the call, and when this wait is dropped.
            let cancel = guard.cancel.child_token();
            let _dropped = cancel.clone().drop_guard();
            let run = self
                .run_check(
                    child,
                    check.command.clone(),
                    check.bash.clone(),
                    CHECK_TIMEOUT,
                    cancel,
                )
                .await;
            if guard.cancel.is_cancelled() {
                // Nobody waits for its answer: nothing more is checked or said.
                return (None, None);
            }
            let (exit, output, refused) = match run {
                Some(run) => (run.exit, run.output, run.refused),
                None => (None, "the sub-agent is not running".to_owned(), true),
            };
            let passed = exit == Some(0);
            let prompt = (!passed && !refused && attempt < attempts)
                .then(|| failure(&check.command, exit, attempt, attempts, &output));
            let record = Record::Checked {
                attempt,
                exit,
                passed,
                prompt: prompt.clone(),
                refused,
            };
            let path = self.state.journal(child);
            if self.journal.append(&path, &record).is_ok() {
                let _ = self.journal.sync_file(&path).await;
            }
            publisher.publish(EventKind::Checked {
                attempt,
                attempts,
                exit_code: exit,
                passed,
            });
            if passed {
                let passed = Checked {
                    passed: true,
                    attempt,
                    attempts,
                };
                return (Some(outcome), Some(passed));
            }
            if refused {
                let message = format!("check `{}` was refused: {output}", check.command);
                let ended = self
                    .fail_child(child, guard, spec, &message, &outcome, message.clone())
                    .await;
                return (ended, Some(failed(attempt)));
            }
            match prompt {
                Some(prompt) => pending = Some(prompt),
                None => {
                    let said = failure(&check.command, exit, attempt, attempts, &output);
                    let message = spent(check, attempts);
                    let ended = self
                        .fail_child(child, guard, spec, &said, &outcome, message)
                        .await;
                    return (ended, Some(failed(attempts)));
                }
            }
        }
    }

    /// Ends `child`'s work as failed (class `check`): a run of its own, told
    /// `said`, that fails with `message` without asking its model, so that
    /// its own outcome on record and in its events is the failure; that
    /// outcome. `spec` starts it again first when it is not live.
    async fn fail_child(
        &self,
        child: SessionId,
        guard: &mut CancelWithCall,
        spec: Option<SessionSpec>,
        said: &str,
        answered: &Outcome,
        message: String,
    ) -> Option<Outcome> {
        if let Some(spec) = spec {
            self.make_live(child, spec, guard).await;
        }
        let failure = Failure {
            class: "check".into(),
            message,
            partial: outcome_text(answered),
            stats: *answered.stats(),
        };
        let mut events = self.bus.subscribe_session_terminal(child);
        let seq = self.fail_run(child, said.to_owned(), failure);
        wait_for_outcome(&mut events, Some(seq)).await
    }

    /// Starts `child`, which is not live, again from its journal.
    async fn make_live(&self, child: SessionId, spec: SessionSpec, guard: &mut CancelWithCall) {
        if self.resume_session(child, spec).await.is_ok() {
            guard.child = Some(child);
        }
    }
}

/// A check that failed at `attempt`.
fn failed_at(attempt: u32, attempts: u32) -> Checked {
    Checked {
        passed: false,
        attempt,
        attempts,
    }
}

/// What a sub-agent whose check's attempts are spent failed with.
fn spent(check: &Check, attempts: u32) -> String {
    format!("check `{}` failed ({attempts} attempts)", check.command)
}

/// `total` plus `more`.
fn add(total: &mut RunStats, more: &RunStats) {
    total.turns += more.turns;
    total.tool_calls += more.tool_calls;
    total.duration_ms += more.duration_ms;
    total.charge(&more.usage, more.cost_usd);
}

/// `outcome` with the counters of the runs before it added to its own.
fn counting(mut outcome: Outcome, earlier: &RunStats) -> Outcome {
    let stats = match &mut outcome {
        Outcome::Completed { stats, .. }
        | Outcome::Failed { stats, .. }
        | Outcome::Cancelled { stats, .. }
        | Outcome::Partial { stats, .. }
        | Outcome::TimedOut { stats, .. } => stats,
    };
    let mut total = *earlier;
    add(&mut total, stats);
    *stats = total;
    outcome
}

/// What the sub-agent said last.
fn outcome_text(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Completed { text, .. } => text.clone(),
        Outcome::Failed { partial, .. }
        | Outcome::Cancelled { partial, .. }
        | Outcome::Partial { partial, .. }
        | Outcome::TimedOut { partial, .. } => partial.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_check_is_told_in_one_grammar_with_the_tail_of_its_output() {
        assert_eq!(
            failure(
                "cargo test",
                Some(101),
                1,
                3,
                "test a ... FAILED\nexit code 101"
            ),
            "Check `cargo test` failed (exit 101, attempt 1 of 3):\ntest a ... FAILED\nexit code 101"
        );
        let long = "x".repeat(TAIL + 10);
        let said = failure("make", None, 2, 2, &long);
        assert!(said.starts_with("Check `make` failed (it did not exit, attempt 2 of 2):\n"));
        assert_eq!(said.lines().nth(1).unwrap().len(), TAIL);
    }
}
