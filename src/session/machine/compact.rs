//! Compaction at a turn boundary (see [`crate::session::compaction`]): when the
//! next request would pass the threshold share of the model's window, old large
//! tool results are elided; if that is not enough, a summary stream replaces the
//! older turns (and if there is nothing older to summarize, results within the
//! last turns are elided too). The new transcript is journaled whole, so a
//! resumed session goes on from it. A context overflow from the provider gets one
//! compaction, whatever the estimate said, and one more attempt.

use std::time::Instant;

use super::{Effect, Machine, Phase};
use crate::conversation::AssistantTurn;
use crate::error::LlmError;
use crate::journal::Record;
use crate::protocol::EventKind;
use crate::session::compaction::{self, KEEP_TURNS};

/// The summary request's text, at most, as a share of the window (in bytes, at
/// four a token): room for the instructions and the summary itself.
const SUMMARY_INPUT_SHARE: f64 = 0.5;
/// The summary request's text without a known window.
const SUMMARY_INPUT_DEFAULT: usize = 200_000;

/// The summary request's text at most: a share of the smaller window of the
/// session's model and the one writing the summary (a `small` model may read less
/// than the session's), in bytes at four a token.
fn summary_input_chars(session: Option<u64>, summarizer: Option<u64>) -> usize {
    let window = match (session, summarizer) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (one, other) => one.or(other),
    };
    window.map_or(SUMMARY_INPUT_DEFAULT, |w| {
        (w as f64 * 4.0 * SUMMARY_INPUT_SHARE) as usize
    })
}

/// What a compaction did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Compaction {
    /// A summary stream started; the turn waits for it.
    Summarizing,
    /// This many results were elided (0: nothing changed).
    Elided(usize),
}

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

    fn over_threshold(&self) -> bool {
        self.threshold().is_some_and(|t| self.context_tokens() > t)
    }

    /// True when the boundary before a new turn would pass the threshold and has
    /// not been compacted yet.
    pub(super) fn needs_compaction(&self, attempt: u32) -> bool {
        let Some(run) = &self.run else {
            return false;
        };
        attempt == 1 && run.compacted_at != Some(run.stats.turns) && self.over_threshold()
    }

    /// Elides old large results; what they held no longer counts in the reported
    /// usage either. Returns how many.
    fn elide(&mut self, keep: usize) -> usize {
        let (count, freed) = compaction::elide(&mut self.transcript, keep);
        self.reported.0 = self.reported.0.saturating_sub(freed);
        count
    }

    /// Compacts before attempt `attempt` of the next turn (`force`: whatever the
    /// estimate says, for an overflow): a summary stream started (the turn waits
    /// for it), or the results elided (enough, or all there was to do).
    pub(super) fn compact(&mut self, attempt: u32, force: bool) -> Compaction {
        // Its PreCompact hooks hear of it (they cannot hold it up).
        self.emit(Effect::PreCompact);
        let before = self.context_tokens();
        if let Some(run) = self.run.as_mut() {
            run.compacted_at = Some(run.stats.turns);
        }
        let mut elided = self.elide(KEEP_TURNS);
        if force || self.over_threshold() {
            let max_chars = summary_input_chars(
                self.spec.model_info.context_window,
                self.spec.summary_window,
            );
            let model = self
                .spec
                .summary_model
                .as_deref()
                .unwrap_or(&self.spec.model);
            let place = format!("{}/turn {}", self.spec.place, self.turns() + 1);
            match compaction::summary_request(model, &self.transcript, &place, max_chars) {
                Some(request) => {
                    let stream = self.next_id();
                    if let Some(run) = self.run.as_mut() {
                        run.phase = Phase::Streaming {
                            stream,
                            attempt,
                            compacting: true,
                        };
                    }
                    self.pending_compaction = Some((before, elided));
                    self.emit(Effect::StartStream {
                        stream,
                        request,
                        quiet: true,
                    });
                    return Compaction::Summarizing;
                }
                // Nothing older to summarize: what is big in the last turns goes.
                None => elided += self.elide(1),
            }
        }
        if elided > 0 {
            self.compacted(before, elided, false);
        }
        Compaction::Elided(elided)
    }

    /// The summary stream ended: the older turns give way to it (or, if it
    /// failed, the session goes on with what eliding freed), and the turn starts.
    pub(super) fn on_summary(
        &mut self,
        now: Instant,
        attempt: u32,
        result: &Result<AssistantTurn, LlmError>,
    ) {
        let (before, elided) = self.pending_compaction.take().unwrap_or_default();
        let (cancelled, stopping) = self
            .run
            .as_ref()
            .map_or((false, false), |r| (r.halting(), r.stop.is_some()));
        let summary = match result {
            Ok(turn) => {
                self.spend(turn.usage.unwrap_or_default());
                Some(turn.message.answer().trim()).filter(|s| !s.is_empty())
            }
            Err(_) => None,
        };
        match summary {
            Some(summary) if !cancelled && !stopping => {
                self.transcript = compaction::compacted(&self.transcript, summary);
                self.compacted(before, elided, true);
            }
            _ => {
                if !cancelled && !stopping {
                    tracing::warn!(session = %self.id, "the summary for compaction failed; going on without it");
                }
                // What was elided stays elided: the journal must say so.
                if elided > 0 {
                    self.compacted(before, elided, false);
                }
            }
        }
        if cancelled {
            return self.end_halted(now);
        }
        if stopping {
            return self.end_stopped(now);
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
            turns: self.turns(),
        }]));
        self.publish(EventKind::Compacted {
            freed_tokens,
            elided,
            summarized,
        });
        tracing::info!(session = %self.id, freed_tokens, elided, summarized, "compacted the conversation");
    }

    /// The provider said the request passed the window: compact once and try
    /// again. False when this turn already had its one (the run fails as it
    /// would have).
    pub(super) fn compact_for_overflow(&mut self, now: Instant, attempt: u32) -> bool {
        let Some(run) = self.run.as_mut() else {
            return false;
        };
        if run.overflow_compacted {
            return false;
        }
        run.overflow_compacted = true;
        match self.compact(attempt + 1, true) {
            Compaction::Summarizing => true,
            Compaction::Elided(0) => false,
            Compaction::Elided(_) => {
                self.begin_turn(now, attempt + 1);
                true
            }
        }
    }
}
