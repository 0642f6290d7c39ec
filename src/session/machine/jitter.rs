//! The retry jitter: a seeded generator, so the machine stays reproducible.

/// Samples for the retry jitter (SplitMix64): seeded, so a machine's retry delays
/// are reproducible in tests, and different per session, so a fan-out's retries
/// spread out.
#[derive(Debug)]
pub(super) struct Jitter(pub(super) u64);

impl Jitter {
    /// A sample in `[0, 1)`.
    pub(super) fn sample(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}
