//! A stream's idle timeout: it runs out once no event has come for a while.

use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// The idle timer of one stream. One timer serves the whole stream: an event only
/// notes when it came, and the timer is moved on when it fires while events are
/// still coming (registering and dropping a timer for every event was a few per
/// cent of a fan-out's CPU).
#[derive(Debug)]
pub(super) struct Quiet {
    idle: Duration,
    last: Instant,
    timer: Pin<Box<Sleep>>,
}

impl Quiet {
    /// A timer that runs out `idle` from now unless an event is heard.
    pub(super) fn new(idle: Duration) -> Self {
        Self {
            idle,
            last: Instant::now(),
            timer: Box::pin(tokio::time::sleep(idle)),
        }
    }

    /// An event came now.
    pub(super) fn heard(&mut self) {
        self.last = Instant::now();
    }

    /// Resolves once no event has come for `idle`. Cancel-safe: dropped before
    /// it resolves, it keeps its place.
    pub(super) async fn expired(&mut self) {
        loop {
            self.timer.as_mut().await;
            let Some(due) = self.last.checked_add(self.idle) else {
                // Further away than the clock goes (`--idle-timeout` of u64::MAX
                // seconds, say): never.
                return std::future::pending().await;
            };
            if Instant::now() >= due {
                return;
            }
            self.timer.as_mut().reset(due);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;
    use std::task::Poll;

    use super::*;

    const IDLE: Duration = Duration::from_millis(100);

    #[tokio::test(start_paused = true)]
    async fn it_runs_out_idle_after_the_last_event_not_after_the_first() {
        let start = Instant::now();
        let mut quiet = Quiet::new(IDLE);
        tokio::time::advance(Duration::from_millis(60)).await;
        quiet.heard();
        // Past the first deadline, 60 ms after the event: not yet.
        tokio::time::advance(Duration::from_millis(60)).await;
        assert_eq!(
            futures::poll!(pin!(quiet.expired())),
            Poll::Pending,
            "it ran out while events were coming"
        );
        quiet.expired().await;
        assert_eq!(start.elapsed(), Duration::from_millis(160));
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_past_the_end_of_time_never_runs_out() {
        let mut quiet = Quiet::new(Duration::MAX);
        quiet.heard();
        // Past tokio's far future (thirty years), where a plain sleep of it wakes.
        tokio::time::advance(Duration::from_secs(40 * 365 * 24 * 3600)).await;
        assert_eq!(futures::poll!(pin!(quiet.expired())), Poll::Pending);
    }

    #[tokio::test(start_paused = true)]
    async fn with_no_event_it_runs_out_idle_after_it_started() {
        let start = Instant::now();
        let mut quiet = Quiet::new(IDLE);
        quiet.expired().await;
        assert_eq!(start.elapsed(), IDLE);
    }
}
