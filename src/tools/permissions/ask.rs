//! Asking about one call: the question goes on the run's desk
//! ([`Questions`]) and is published; the first answer wins, whoever gives
//! it: the approver in its turn (a person at the terminal, or the forwarder
//! of the user's configuration), `orchestrate approve`, the approval timeout
//! when nobody can be asked, or another question's "always" or "no" that
//! covers it. Every answer is published (and so journaled) with who gave it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::questions::{Asked, PendingQuestion};
use super::{
    Answer, By, Decision, Gate, PermissionRequest, REFUSED_EARLIER, always_rules, mode_allowing,
};
use crate::error::ToolError;
use crate::protocol::EventKind;
use crate::tools::ToolContext;

impl Gate {
    /// Asks whether the call of `request` may run. `coverable`: an earlier
    /// "always" may answer it (no rule or hook wants the person's own answer).
    pub(super) async fn ask(
        &self,
        ctx: &ToolContext,
        mut request: PermissionRequest,
        coverable: bool,
    ) -> Result<(), ToolError> {
        let (session, tool) = (ctx.session, request.tool.clone());
        if let Some(events) = &self.events {
            events.publish(EventKind::AwaitingPermission { tool: tool.clone() });
        }
        let message = format!(
            "the {} agent needs your permission to use {tool}",
            self.agent
        );
        self.notify(ctx, message);
        let desk = &*self.questions;
        let mut open = desk.open(Asked {
            question: PendingQuestion {
                id: String::new(),
                session,
                tool: tool.clone(),
                summary: request.summary.clone(),
            },
            input: request.input.clone(),
            coverable,
            turn: ctx.refused_in_turn.clone(),
        });
        request.question_id.clone_from(&open.id);
        let mut told = Told {
            gate: self,
            id: open.id.clone(),
            done: false,
        };
        if let Some(events) = &self.events {
            events.publish(EventKind::PermissionRequested {
                call_id: ctx.call_id.clone(),
                question_id: open.id.clone(),
                tool: tool.clone(),
                summary: request.summary.clone(),
            });
        }
        // The turn to be put to a person is held until the answer has taken
        // effect (an "always" remembered, a no's turn ended), so the next
        // question in line sees it.
        let (decision, _turn) = tokio::select! {
            biased;
            given = &mut open.answer => (given.unwrap_or(Decision {
                answer: Answer::No,
                by: By::Approver(self.approver.name()),
            }), None),
            put = self.put(ctx, &request, coverable) => put,
        };
        // Answered from elsewhere as the approver answered: the answer the
        // desk gave is the one `orchestrate approve` was told it gave.
        let decision = match desk.withdraw(&open.id) {
            true => decision,
            false => open.answer.try_recv().unwrap_or(decision),
        };
        drop(open);
        told.answered(&decision);
        let id = request.question_id.clone();
        match decision.answer {
            Answer::Yes => Ok(()),
            Answer::Always => {
                for (rule, kept) in always_rules(&tool, &request.input) {
                    if kept && let Some(saver) = &self.saver {
                        let text = rule.to_string();
                        if let Err(e) = (saver.0)(&text) {
                            tracing::warn!(rule = %text, error = %e, "cannot save the rule");
                        }
                    }
                    // A rule kept beyond the session holds for the whole run.
                    self.remembered.remember((!kept).then_some(session), rule);
                }
                // The questions waiting that it now allows are answered too.
                let remembered = &self.remembered;
                let covered = Decision {
                    answer: Answer::Yes,
                    by: By::Always(id),
                };
                desk.cover(
                    |w| {
                        w.coverable
                            && remembered.allows(w.question.session, &w.question.tool, &w.input)
                    },
                    &covered,
                );
                Ok(())
            }
            Answer::No => {
                let persons = match &decision.by {
                    By::Approve => true,
                    By::Approver(_) => self.approver.refused_by_a_person(&request),
                    By::Timeout | By::Always(_) | By::Refusal(_) => false,
                };
                if persons {
                    // The turn's other calls are neither asked about nor run.
                    ctx.refused_in_turn.store(true, Ordering::SeqCst);
                    let earlier = Decision {
                        answer: Answer::No,
                        by: By::Refusal(id),
                    };
                    desk.cover(|w| Arc::ptr_eq(&w.turn, &ctx.refused_in_turn), &earlier);
                }
                Err(ToolError::Failed(self.refused(&request, &decision.by)))
            }
        }
    }

    /// Puts the question to the approver, in its turn when the approver asks
    /// one at a time (the turn comes back with the answer); with nobody to
    /// ask, waits the approval timeout for another answer, then refuses.
    async fn put(
        &self,
        ctx: &ToolContext,
        request: &PermissionRequest,
        coverable: bool,
    ) -> (Decision, Option<tokio::sync::MutexGuard<'_, ()>>) {
        let by = By::Approver(self.approver.name());
        let decided = |answer, by| (Decision { answer, by }, None);
        if !self.approver.asks_a_person() {
            if !self.approval_timeout.is_zero() {
                tokio::time::sleep(self.approval_timeout).await;
                return decided(Answer::No, By::Timeout);
            }
            return decided(Answer::No, by);
        }
        // One question at a time: one answered while this one waited its
        // turn answers it through the desk, and this is dropped.
        let turn = match self.approver.one_at_a_time() {
            true => Some(self.questions.turn().await),
            false => None,
        };
        if ctx.refused_in_turn.load(Ordering::SeqCst) {
            return decided(Answer::No, By::Refusal(String::new()));
        }
        if coverable
            && self
                .remembered
                .allows(request.session, &request.tool, &request.input)
        {
            return decided(Answer::Yes, By::Always(String::new()));
        }
        let mut request = request.clone();
        request.waiting = self.questions.besides(&request.question_id);
        let answer = self.approver.ask(request).await;
        (Decision { answer, by }, turn)
    }

    /// Why a call is refused, by who refused it.
    fn refused(&self, request: &PermissionRequest, by: &By) -> String {
        let (tool, mode) = (&request.tool, self.mode);
        let needed = mode_allowing(tool);
        match by {
            By::Approver(_) => self.approver.refusal(request, mode),
            By::Approve => format!(
                "permission denied: {tool} was refused from another terminal (orchestrate approve); run with --permission-mode {needed} to allow it"
            ),
            By::Timeout => format!(
                "permission denied: {tool} needs approval under permission mode {mode}, and nobody approved it within {} (orchestrate approve); run with --permission-mode {needed} to allow it",
                written(self.approval_timeout)
            ),
            By::Refusal(_) | By::Always(_) => REFUSED_EARLIER.to_owned(),
        }
    }
}

/// Publishes a question's answer; one dropped unanswered (its call
/// cancelled while it waited) is published as cancelled.
struct Told<'a> {
    gate: &'a Gate,
    id: String,
    done: bool,
}

impl Told<'_> {
    fn answered(&mut self, decision: &Decision) {
        self.done = true;
        let answer = match decision.answer {
            Answer::Yes => "yes",
            Answer::No => "no",
            Answer::Always => "always",
        };
        self.tell(answer, decision.by.name(), decision.by.covered_by());
    }

    fn tell(&self, answer: &str, by: &str, covered_by: Option<&str>) {
        if let Some(events) = &self.gate.events {
            events.publish(EventKind::PermissionAnswered {
                question_id: self.id.clone(),
                answer: answer.to_owned(),
                by: by.to_owned(),
                covered_by: covered_by.filter(|id| !id.is_empty()).map(str::to_owned),
            });
        }
    }
}

impl Drop for Told<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.tell("no", "cancelled", None);
        }
    }
}

/// A duration as a person writes it (`90s` as `1m30s`, `5m`, `1h30m`,
/// `500ms`), as `--approval-timeout` and `timeout` read it.
pub(super) fn written(duration: std::time::Duration) -> String {
    let secs = duration.as_secs();
    match (secs / 3600, secs % 3600 / 60, secs % 60) {
        (0, 0, 0) => format!("{}ms", duration.as_millis()),
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, 0) => format!("{h}h"),
        (h, m, 0) => format!("{h}h{m}m"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_read_as_written() {
        use std::time::Duration;
        assert_eq!(super::written(Duration::from_secs(90)), "1m30s");
        assert_eq!(super::written(Duration::from_secs(300)), "5m");
        assert_eq!(super::written(Duration::from_secs(5400)), "1h30m");
        assert_eq!(super::written(Duration::from_secs(7)), "7s");
    }
}
