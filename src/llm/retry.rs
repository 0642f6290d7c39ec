//! Retry timing: the server's `Retry-After` / `retry-after-ms`, else exponential
//! backoff with jitter, within a bounded number of attempts. Pure code.

use std::time::{Duration, SystemTime};

use crate::error::ErrorClass;

/// How a session retries failed model turns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Requests made at most for one turn, the first included.
    pub max_attempts: u32,
    /// The first backoff delay.
    pub base_delay: Duration,
    /// No computed delay exceeds this.
    pub max_delay: Duration,
    /// A server-requested delay is honoured up to this.
    pub max_server_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_server_delay: Duration::from_secs(300),
        }
    }
}

/// What follows a failed attempt at a model turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterFailure {
    /// Try again after this long.
    Retry(Duration),
    /// The error was worth retrying, but the attempts are spent.
    Exhausted,
    /// Trying again would not help.
    Fatal,
}

impl RetryPolicy {
    /// Decides by the error's class what follows failed attempt `attempt`
    /// (1-based); `jitter` is a sample in `[0, 1)`.
    pub fn after_failure(&self, class: ErrorClass, attempt: u32, jitter: f64) -> AfterFailure {
        let server = match class {
            ErrorClass::Retryable { after } => after,
            // The stream task crashed: a transient child, restarted like a
            // retryable failure.
            ErrorClass::Crash => None,
            ErrorClass::ContextOverflow
            | ErrorClass::Permanent
            | ErrorClass::Cancelled
            | ErrorClass::ToolFailure => return AfterFailure::Fatal,
        };
        if attempt < self.max_attempts {
            AfterFailure::Retry(self.delay(attempt, server, jitter))
        } else {
            AfterFailure::Exhausted
        }
    }

    /// The delay before attempt `attempt + 1`, after `attempt` failed (1-based).
    /// `server` is what the server asked for; `jitter` is a sample in `[0, 1)`.
    pub fn delay(&self, attempt: u32, server: Option<Duration>, jitter: f64) -> Duration {
        if let Some(asked) = server {
            return asked.min(self.max_server_delay);
        }
        let exp = self
            .base_delay
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(self.max_delay);
        // "Equal jitter": half fixed, half random, so parallel sessions spread out
        // without ever retrying instantly.
        exp.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
    }
}

/// Reads the delay a response asks for: `retry-after-ms` (milliseconds), then
/// `retry-after` as seconds or as an HTTP date.
pub fn retry_after(headers: &reqwest::header::HeaderMap, now: SystemTime) -> Option<Duration> {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    // Any number a server sends is taken without overflow: past what a
    // `Duration` holds is as long as it holds (callers clamp it).
    let seconds = |secs: f64| {
        (secs.is_finite() && secs >= 0.0)
            .then(|| Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
    };
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && let Some(after) = seconds(ms / 1000.0)
    {
        return Some(after);
    }
    let value = get("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return seconds(secs);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The step of a SplitMix64 generator, the jitter both retries and the rate
/// governor draw from.
pub const SPLITMIX_STEP: u64 = 0x9E37_79B9_7F4A_7C15;

/// A sample in `[0, 1)` from a SplitMix64 state (advanced by
/// [`SPLITMIX_STEP`] for each draw).
pub fn unit_sample(state: u64) -> f64 {
    let mut z = state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use reqwest::header::{HeaderMap, HeaderValue};

    use super::*;

    #[test]
    fn the_class_and_the_attempts_left_decide_what_follows_a_failure() {
        let policy = RetryPolicy {
            max_attempts: 3,
            ..RetryPolicy::default()
        };
        let asked = Some(Duration::from_secs(2));
        assert_eq!(
            policy.after_failure(ErrorClass::Retryable { after: asked }, 1, 0.5),
            AfterFailure::Retry(Duration::from_secs(2))
        );
        assert_eq!(
            policy.after_failure(ErrorClass::Crash, 2, 0.0),
            AfterFailure::Retry(policy.delay(2, None, 0.0))
        );
        assert_eq!(
            policy.after_failure(ErrorClass::Retryable { after: None }, 3, 0.5),
            AfterFailure::Exhausted
        );
        for fatal in [
            ErrorClass::Permanent,
            ErrorClass::ContextOverflow,
            ErrorClass::Cancelled,
            ErrorClass::ToolFailure,
        ] {
            assert_eq!(policy.after_failure(fatal, 1, 0.5), AfterFailure::Fatal);
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn retry_after_reads_seconds_dates_and_milliseconds() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            retry_after(&headers(&[("retry-after", "2")]), now),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "0.5")]), now),
            Some(Duration::from_millis(500))
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(7));
        assert_eq!(
            retry_after(&headers(&[("retry-after", &later)]), now),
            Some(Duration::from_secs(7))
        );
        let past = httpdate::fmt_http_date(now - Duration::from_secs(7));
        assert_eq!(
            retry_after(&headers(&[("retry-after", &past)]), now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after-ms", "1500"), ("retry-after", "9")]),
                now
            ),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        // Past what a duration holds: as long as it holds, no panic.
        assert_eq!(
            retry_after(&headers(&[("retry-after", "1e20")]), now),
            Some(Duration::MAX)
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after-ms", "1e300")]), now),
            Some(Duration::MAX)
        );
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn backoff_grows_exponentially_with_bounded_jitter() {
        let p = RetryPolicy {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
            ..RetryPolicy::default()
        };
        assert_eq!(p.delay(1, None, 1.0), Duration::from_millis(100));
        assert_eq!(p.delay(1, None, 0.0), Duration::from_millis(50));
        assert_eq!(p.delay(3, None, 1.0), Duration::from_millis(400));
        assert_eq!(p.delay(30, None, 1.0), Duration::from_secs(1));
    }

    #[test]
    fn the_server_delay_wins_but_is_bounded() {
        let p = RetryPolicy::default();
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(3)), 0.3),
            Duration::from_secs(3)
        );
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(10_000)), 0.3),
            p.max_server_delay
        );
    }
}
