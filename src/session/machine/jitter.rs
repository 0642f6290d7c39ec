//! The retry jitter: a seeded generator, so the machine stays reproducible.

use crate::llm::retry::{SPLITMIX_STEP, unit_sample};

/// Samples for the retry jitter (SplitMix64): seeded, so a machine's retry delays
/// are reproducible in tests, and different per session, so a fan-out's retries
/// spread out.
#[derive(Debug)]
pub(super) struct Jitter(pub(super) u64);

impl Jitter {
    /// A sample in `[0, 1)`.
    pub(super) fn sample(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(SPLITMIX_STEP);
        unit_sample(self.0)
    }
}
