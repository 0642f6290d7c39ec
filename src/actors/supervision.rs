//! The restart policy, plain code with no runtime: OTP restart types, a
//! restart intensity window, and backoff with jitter between restarts.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// When a child is restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartType {
    /// Always.
    Permanent,
    /// Only after an abnormal exit.
    Transient,
    /// Never.
    Temporary,
}

/// How a child exited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It finished cleanly, or failed with a final error.
    Normal,
    /// It crashed, or failed with a retryable error.
    Abnormal,
}

/// What the supervisor does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start it again after `after`.
    Restart {
        /// The backoff before the restart.
        after: Duration,
        /// Restarts inside the window, this one included.
        restarts: u32,
    },
    /// Let it go: the exit is final.
    Stop,
    /// Too many restarts inside the window: give up and tell the parent.
    Escalate {
        /// Restarts inside the window.
        restarts: u32,
    },
}

/// At most `max_restarts` within `window`, with exponential backoff between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Intensity {
    /// Restarts allowed inside the window.
    pub max_restarts: u32,
    /// The window.
    pub window: Duration,
    /// The first backoff.
    pub backoff_base: Duration,
    /// The longest backoff.
    pub backoff_max: Duration,
}

impl Default for Intensity {
    fn default() -> Self {
        Self {
            max_restarts: 3,
            window: Duration::from_secs(60),
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
        }
    }
}

/// The restart history of one child.
#[derive(Clone, Debug)]
pub struct RestartTracker {
    kind: RestartType,
    intensity: Intensity,
    restarts: VecDeque<Instant>,
}

impl RestartTracker {
    /// A child with no restarts yet.
    pub fn new(kind: RestartType, intensity: Intensity) -> Self {
        Self {
            kind,
            intensity,
            restarts: VecDeque::new(),
        }
    }

    /// Decides what to do about an exit at `now`; `jitter` is a sample in `[0, 1)`.
    pub fn on_exit(&mut self, exit: Exit, now: Instant, jitter: f64) -> Decision {
        let restart = match (self.kind, exit) {
            (RestartType::Permanent, _) | (RestartType::Transient, Exit::Abnormal) => true,
            (RestartType::Transient, Exit::Normal) | (RestartType::Temporary, _) => false,
        };
        if !restart {
            return Decision::Stop;
        }
        let window = self.intensity.window;
        while self
            .restarts
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            self.restarts.pop_front();
        }
        let recent = self.restarts.len() as u32;
        if recent >= self.intensity.max_restarts {
            return Decision::Escalate { restarts: recent };
        }
        self.restarts.push_back(now);
        let exp = self
            .intensity
            .backoff_base
            .saturating_mul(1u32 << recent.min(16))
            .min(self.intensity.backoff_max);
        Decision::Restart {
            after: exp.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0)),
            restarts: recent + 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(kind: RestartType) -> RestartTracker {
        RestartTracker::new(kind, Intensity::default())
    }

    #[test]
    fn restart_types_follow_otp() {
        let now = Instant::now();
        assert!(matches!(
            tracker(RestartType::Permanent).on_exit(Exit::Normal, now, 0.0),
            Decision::Restart { .. }
        ));
        assert!(matches!(
            tracker(RestartType::Transient).on_exit(Exit::Abnormal, now, 0.0),
            Decision::Restart { .. }
        ));
        assert_eq!(
            tracker(RestartType::Transient).on_exit(Exit::Normal, now, 0.0),
            Decision::Stop
        );
        assert_eq!(
            tracker(RestartType::Temporary).on_exit(Exit::Abnormal, now, 0.0),
            Decision::Stop
        );
    }

    #[test]
    fn past_the_intensity_the_failure_escalates() {
        let mut t = tracker(RestartType::Transient);
        let now = Instant::now();
        let mut afters = Vec::new();
        for n in 1..=3 {
            match t.on_exit(Exit::Abnormal, now, 1.0) {
                Decision::Restart { after, restarts } => {
                    assert_eq!(restarts, n);
                    afters.push(after);
                }
                other => panic!("restart {n}: {other:?}"),
            }
        }
        assert_eq!(
            afters,
            [
                Duration::from_millis(100),
                Duration::from_millis(200),
                Duration::from_millis(400)
            ]
        );
        assert_eq!(
            t.on_exit(Exit::Abnormal, now, 1.0),
            Decision::Escalate { restarts: 3 }
        );
    }

    #[test]
    fn restarts_outside_the_window_are_forgotten() {
        let mut t = tracker(RestartType::Transient);
        let start = Instant::now();
        for _ in 0..3 {
            t.on_exit(Exit::Abnormal, start, 0.0);
        }
        let later = start + Duration::from_secs(61);
        assert_eq!(
            t.on_exit(Exit::Abnormal, later, 1.0),
            Decision::Restart {
                after: Duration::from_millis(100),
                restarts: 1
            }
        );
    }
}
