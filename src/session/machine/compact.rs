//! Compaction at a turn boundary (see [`crate::session::compaction`]): when the
//! next request would pass the threshold share of the model's window, old large
//! tool results are elided; if that is not enough, a summary stream replaces the
//! older turns. The new transcript is journaled whole, so a resumed session goes
//! on from it. A context overflow from the provider gets one compaction, whatever
//! the estimate said, and one more attempt.

use std::time::Instant;

use super::{Effect, Machine, Phase};
use crate::conversation::AssistantTurn;
use crate::error::LlmError;
use crate::journal::Record;
use crate::protocol::EventKind;
use crate::session::compaction;

impl Machine {
    /// How many tokens the next request is, roughly: what the provider last
    /// reported plus an estimate of what was appended since, or the estimate of
    /// the whole request if that is more (a server that under-reports must not
    /// push a session past its window).
    pub(super) fn context_tokens(&self) -> u64 {
        let (reported, at) = self.reported;
        let whole = compaction::tokens_of(&self.spec.system_prompt)
            + compaction::estimate(&self.transcript);
        match self.transcript.get(at..) {
            Some(since) if reported > 0 => whole.max(reported + compaction::estimate(since)),
            _ => whole,
        }
    }

    /// The tokens a request may reach before the session compacts, when the
    /// model's window is known.
    fn threshold(&self) -> Option<u64> {
        let window = self.spec.model_info.context_window?;
        Some((window as f64 * self.spec.compact_at) as u64)
    }

    /// True when the next request would pass the threshold and this boundary has
    /// not been compacted yet.
    pub(super) fn needs_compaction(&self) -> bool {
        let Some(run) = &self.run else {
            return false;
        };
        run.compacted_at != Some(run.stats.turns)
            && self.threshold().is_some_and(|t| self.context_tokens() > t)
    }

    /// Compacts before attempt `attempt` of the next turn. True when a summary
    /// stream was started (the turn waits for it); false when eliding was enough,
    /// or all there was to do.
    pub(super) fn compact(&mut self, attempt: u32) -> bool {
        let before = self.context_tokens();
        if let Some(run) = self.run.as_mut() {
            run.compacted_at = Some(run.stats.turns);
        }
        let (elided, _) = compaction::elide(&mut self.transcript);
        let still_over = self.threshold().is_none_or(|t| self.context_tokens() > t);
        if still_over {
            let place = format!("{}/turn {}", self.spec.place, self.turns() + 1);
            if let Some(request) =
                compaction::summary_request(&self.spec.model, &self.transcript, &place)
            {
                let stream = self.next_id();
                if let Some(run) = self.run.as_mut() {
                    run.phase = Phase::Streaming {
                        stream,
                        attempt,
                        compacting: true,
                    };
                }
                self.pending_compaction = Some((before, elided));
                self.emit(Effect::StartStream { stream, request });
                return true;
            }
        }
        if elided > 0 {
            self.compacted(before, elided, false);
        }
        false
    }

    /// The summary stream ended: the older turns give way to it (or, if it
    /// failed, the session goes on with what eliding freed), and the turn starts.
    pub(super) fn on_summary(
        &mut self,
        now: Instant,
        attempt: u32,
        result: Result<AssistantTurn, LlmError>,
    ) {
        let (before, elided) = self.pending_compaction.take().unwrap_or_default();
        let (cancelled, stopping) = self.run.as_ref().map_or((false, false), |r| {
            (r.cancelled.is_some(), r.stop.is_some())
        });
        match result {
            _ if cancelled => return self.end_cancelled(now),
            _ if stopping => return self.end_stopped(now),
            Ok(turn) if !turn.message.answer().trim().is_empty() => {
                let usage = turn.usage.unwrap_or_default();
                let cost = self.spec.model_info.cost(&usage);
                if let Some(run) = self.run.as_mut() {
                    run.stats.charge(&usage, cost);
                }
                if self.spec.meter.is_some() {
                    self.emit(Effect::Charge { usage, cost });
                }
                self.transcript = compaction::compacted(&self.transcript, turn.message.answer());
                self.compacted(before, elided, true);
            }
            Ok(_) | Err(_) => {
                tracing::warn!(session = %self.id, "the summary for compaction failed; going on without it");
                if elided > 0 {
                    self.compacted(before, elided, false);
                }
            }
        }
        self.begin_turn(now, attempt);
    }

    /// Journals the compacted transcript whole and says how much was freed.
    fn compacted(&mut self, before: u64, elided: usize, summarized: bool) {
        // Reported usage no longer describes this transcript.
        self.reported = (0, 0);
        let after = self.context_tokens();
        let freed_tokens = before.saturating_sub(after);
        self.emit(Effect::Journal(vec![Record::Compacted {
            transcript: self.transcript.clone(),
        }]));
        self.publish(EventKind::Compacted {
            freed_tokens,
            elided,
            summarized,
        });
        tracing::info!(session = %self.id, freed_tokens, elided, summarized, "compacted the conversation");
    }

    /// The provider said the request passed the window: compact once and try
    /// again. False when this run already had its one, or there was nothing to
    /// compact (the run fails as it would have).
    pub(super) fn compact_for_overflow(&mut self, now: Instant, attempt: u32) -> bool {
        let Some(run) = self.run.as_mut() else {
            return false;
        };
        if run.overflow_compacted {
            return false;
        }
        run.overflow_compacted = true;
        run.compacted_at = None;
        let before = self.context_tokens();
        let (elided, _) = compaction::elide(&mut self.transcript);
        let place = format!("{}/turn {}", self.spec.place, self.turns());
        match compaction::summary_request(&self.spec.model, &self.transcript, &place) {
            Some(request) => {
                let stream = self.next_id();
                if let Some(run) = self.run.as_mut() {
                    run.compacted_at = Some(run.stats.turns);
                    run.phase = Phase::Streaming {
                        stream,
                        attempt: attempt + 1,
                        compacting: true,
                    };
                }
                self.pending_compaction = Some((before, elided));
                self.emit(Effect::StartStream { stream, request });
                true
            }
            None if elided > 0 => {
                self.compacted(before, elided, false);
                self.begin_turn(now, attempt + 1);
                true
            }
            None => false,
        }
    }
}
