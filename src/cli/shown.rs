//! What a run shows of its events: the display, the `--json` lines, the
//! sessions still open, and what ends the run (the lead's answer to the
//! prompt); and how an outcome is reported, with the exit code it makes.

use std::io::Write;
use std::process::ExitCode;

use super::exit;
use crate::events::EventStream;
use crate::protocol::{Event, EventKind, Outcome, SessionId};
use crate::ui::display::Display;

/// The prompts `kind` answers, when it is a terminal event.
pub(super) fn prompts_of(kind: &EventKind) -> Vec<u64> {
    match kind {
        EventKind::Terminal { prompts, .. } => prompts.clone(),
        _ => Vec::new(),
    }
}

/// The outcome `kind` ends the run with: the answer to `prompt`, or with no
/// prompt, any terminal event.
pub(super) fn ends_run(kind: &EventKind, prompt: Option<u64>) -> Option<&Outcome> {
    match (kind, prompt) {
        (kind, Some(prompt)) => kind.answer_to(prompt),
        (EventKind::Terminal { outcome, .. }, None) => Some(outcome),
        (_, None) => None,
    }
}

/// Where the run's events are shown: the display, the `--json` lines, and the
/// sessions still open; and what ends the run: the lead's answer to the prompt.
pub(super) struct Shown {
    pub(super) display: Display,
    /// Sessions that started and have not ended yet: sub-agents cancelled with
    /// the lead end a moment after it, and their ends are worth showing.
    pub(super) open: std::collections::HashSet<SessionId>,
    pub(super) json: bool,
    pub(super) lead: SessionId,
    pub(super) prompt: Option<u64>,
    /// Nothing ends the run now (an interactive session waits for a line).
    pub(super) idle: bool,
    /// The whole run's agents, across the prompts of an interactive session
    /// (each prompt's display shows its own); none outside one.
    pub(super) run: Option<crate::ui::progress::Board>,
    /// When the run began here.
    pub(super) began: std::time::Instant,
    /// The prompts the last answer shown answered (a follow-up that joined
    /// a run is answered with it).
    pub(super) answered: Vec<u64>,
}

/// What showing the events waiting came to.
pub(super) enum Drained {
    /// One of them ended the run.
    Ended(Outcome),
    /// More are waiting than were shown.
    More,
    /// None is left.
    Empty,
}

impl Shown {
    /// Shows `event`; returns the outcome when it ends the run.
    pub(super) fn show(
        &mut self,
        event: &Event,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Option<Outcome> {
        if self.json {
            print_json(out, event);
        }
        // A warning said while the prompt line waits (a refused follow-up)
        // shows the prompt line again after it.
        if self.display.show(event, err) && self.idle {
            let _ = write!(err, "{}", super::interactive::MARK);
            let _ = err.flush();
        }
        if let Some(run) = self.run.as_mut() {
            run.apply(event, self.began.elapsed());
        }
        track(&mut self.open, event);
        let ended = (!self.idle && event.session == self.lead)
            .then(|| ends_run(&event.kind, self.prompt).cloned())
            .flatten();
        if ended.is_some() {
            self.answered = prompts_of(&event.kind);
        }
        ended
    }

    /// Shows at most `at_most` of the events waiting in `events`, up to the one
    /// that ends the run.
    pub(super) fn drain(
        &mut self,
        events: &mut EventStream,
        at_most: usize,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Drained {
        for _ in 0..at_most {
            let Some(event) = events.try_recv() else {
                return Drained::Empty;
            };
            if let Some(outcome) = self.show(&event, out, err) {
                return Drained::Ended(outcome);
            }
        }
        Drained::More
    }
}

/// Keeps the set of sessions that started and have not ended.
fn track(open: &mut std::collections::HashSet<SessionId>, event: &Event) {
    if matches!(event.kind, EventKind::SessionStarted { .. }) {
        open.insert(event.session);
    } else if matches!(event.kind, EventKind::Terminal { .. }) {
        open.remove(&event.session);
    }
}

fn print_json(out: &mut dyn Write, event: &Event) {
    if let Ok(line) = serde_json::to_string(event) {
        // A closed pipe (`| head`) is not an error worth reporting.
        let _ = writeln!(out, "{}", crate::ui::escape::json_line(&line));
    }
}

pub(super) fn report(
    json: bool,
    outcome: Option<Outcome>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> ExitCode {
    match outcome {
        Some(Outcome::Completed {
            text, truncated, ..
        }) => {
            if !json {
                let _ = writeln!(out, "{text}");
            }
            if truncated {
                let _ = writeln!(
                    err,
                    "orchestrate: the answer was cut at the model's output limit"
                );
            }
            let _ = out.flush();
            ExitCode::from(exit::DONE)
        }
        Some(Outcome::Failed {
            message, partial, ..
        }) => {
            if !json && !partial.is_empty() {
                let _ = writeln!(out, "{partial}");
            }
            let _ = writeln!(err, "orchestrate: {message}");
            ExitCode::from(exit::FAILED)
        }
        Some(Outcome::Cancelled { partial, .. }) => {
            if !json && !partial.is_empty() {
                let _ = writeln!(out, "{partial}");
            }
            let _ = writeln!(err, "orchestrate: cancelled");
            ExitCode::from(exit::CANCELLED)
        }
        Some(Outcome::Partial {
            reason, partial, ..
        }) => {
            if !json && !partial.is_empty() {
                let _ = writeln!(out, "{partial}");
            }
            let _ = writeln!(
                err,
                "orchestrate: stopped ({reason}) before the lead finished"
            );
            ExitCode::from(exit::FAILED)
        }
        Some(Outcome::TimedOut { partial, .. }) => {
            if !json && !partial.is_empty() {
                let _ = writeln!(out, "{partial}");
            }
            let _ = writeln!(
                err,
                "orchestrate: timed out before the lead finished; what ran was stopped"
            );
            ExitCode::from(exit::FAILED)
        }
        None => {
            let _ = writeln!(err, "orchestrate: the session ended without a result");
            ExitCode::from(exit::FAILED)
        }
    }
}
