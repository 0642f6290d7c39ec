//! The rate governor: one per provider endpoint, shared by every
//! session of the process that talks to it. A 429 or 529 answered to one session
//! puts every request to that endpoint into the same cooldown (as long as the
//! answer's Retry-After says, else a second); requests in flight at once are
//! limited by a ceiling that starts at the configured cap (`--max-parallel`),
//! halves on a rate limit (once per cooldown: the 429s of one burst are one
//! signal) and grows by one per success, back up to the cap. Waiters leave a
//! cooldown spread by a little jitter, so a fan-out of hundreds never comes back
//! as one herd.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;

use crate::llm::retry::{SPLITMIX_STEP, unit_sample};
use tokio::time::Instant;

/// The cooldown after a rate limit that says nothing about when to come back.
pub const DEFAULT_COOLDOWN: Duration = Duration::from_secs(1);

/// The longest cooldown a server may impose: as long as one session would wait
/// for a retry (`RetryPolicy::max_server_delay`).
pub const MAX_COOLDOWN: Duration = Duration::from_secs(300);

/// The cap of every endpoint's ceiling; unbounded (`usize::MAX`) unless set.
static CAP: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Caps every endpoint's ceiling at `cap` requests in flight (the CLI's
/// `--max-parallel`).
pub fn set_cap(cap: usize) {
    CAP.store(cap.max(1), Ordering::Relaxed);
}

/// The governor of the endpoint at `url`, shared by every client of it.
pub fn for_endpoint(url: &str) -> Arc<Governor> {
    static ALL: OnceLock<Mutex<HashMap<String, Arc<Governor>>>> = OnceLock::new();
    let mut all = ALL
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    all.entry(url.to_owned())
        .or_insert_with(|| Arc::new(Governor::new(CAP.load(Ordering::Relaxed))))
        .clone()
}

/// One endpoint's shared state.
#[derive(Debug)]
pub struct Governor {
    state: Mutex<State>,
    freed: Notify,
    cap: usize,
    jitter: AtomicU64,
}

#[derive(Debug)]
struct State {
    /// Requests allowed in flight at once.
    ceiling: usize,
    in_flight: usize,
    /// No request starts before this.
    cooldown_until: Option<Instant>,
}

/// What a waiting request is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The endpoint is cooling down for this long.
    Cooldown(Duration),
}

/// A request's place in flight; freed when dropped.
#[derive(Debug)]
pub struct Permit {
    governor: Arc<Governor>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut state = self.governor.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        drop(state);
        self.governor.freed.notify_waiters();
    }
}

impl Governor {
    /// A governor whose ceiling never passes `cap`.
    pub fn new(cap: usize) -> Self {
        Self {
            state: Mutex::new(State {
                ceiling: cap.max(1),
                in_flight: 0,
                cooldown_until: None,
            }),
            freed: Notify::new(),
            cap: cap.max(1),
            jitter: AtomicU64::new(SPLITMIX_STEP),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until a request may start; `told` hears each cooldown waited out.
    pub async fn acquire(self: &Arc<Self>, told: impl Fn(Wait)) -> Permit {
        loop {
            let freed = self.freed.notified();
            let wait = {
                let mut state = self.lock();
                let now = Instant::now();
                match state.cooldown_until.filter(|until| *until > now) {
                    Some(until) => Some(until - now),
                    None if state.in_flight < state.ceiling => {
                        state.in_flight += 1;
                        return Permit {
                            governor: self.clone(),
                        };
                    }
                    None => None,
                }
            };
            match wait {
                Some(cooldown) => {
                    told(Wait::Cooldown(cooldown));
                    tokio::time::sleep(cooldown + self.spread(cooldown)).await;
                }
                None => freed.await,
            }
        }
    }

    /// A request was answered: the ceiling grows by one, up to the cap.
    pub fn succeeded(&self) {
        let mut state = self.lock();
        state.ceiling = state.ceiling.saturating_add(1).min(self.cap);
        drop(state);
        self.freed.notify_waiters();
    }

    /// The endpoint said it is overloaded (429, 529): every request waits out
    /// `retry_after` (or [`DEFAULT_COOLDOWN`]; at most [`MAX_COOLDOWN`]), and the
    /// ceiling halves, unless a cooldown was already running (the same burst said
    /// so already).
    pub fn rate_limited(&self, retry_after: Option<Duration>) {
        let mut state = self.lock();
        let now = Instant::now();
        let until = now + retry_after.unwrap_or(DEFAULT_COOLDOWN).min(MAX_COOLDOWN);
        let cooling = state.cooldown_until.is_some_and(|u| u > now);
        state.cooldown_until = Some(state.cooldown_until.map_or(until, |u| u.max(until)));
        if !cooling {
            let current = state.ceiling.min(state.in_flight.max(1));
            state.ceiling = (current / 2).max(1);
        }
    }

    /// The ceiling now.
    pub fn ceiling(&self) -> usize {
        self.lock().ceiling
    }

    /// A waiter's extra delay past a cooldown: up to a tenth of it (at most a
    /// second), different for each waiter.
    fn spread(&self, cooldown: Duration) -> Duration {
        let state = self.jitter.fetch_add(SPLITMIX_STEP, Ordering::Relaxed);
        let share = unit_sample(state.wrapping_add(SPLITMIX_STEP));
        (cooldown / 10).min(Duration::from_secs(1)).mul_f64(share)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_cooldown_is_never_longer_than_five_minutes_whatever_the_server_says() {
        let governor = Governor::new(4);
        let before = Instant::now();
        governor.rate_limited(Some(Duration::MAX));
        let until = governor.lock().cooldown_until.unwrap();
        assert_eq!(until - before, MAX_COOLDOWN);
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_limit_holds_every_request_until_the_cooldown_is_over() {
        let governor = Arc::new(Governor::new(8));
        let first = governor.acquire(|_| {}).await;
        governor.rate_limited(Some(Duration::from_secs(2)));
        drop(first);
        let start = Instant::now();
        let told = Mutex::new(Vec::new());
        let _next = governor.acquire(|w| told.lock().unwrap().push(w)).await;
        let waited = start.elapsed();
        assert!(waited >= Duration::from_secs(2), "{waited:?}");
        assert!(waited <= Duration::from_millis(2200), "{waited:?}");
        assert_eq!(
            *told.lock().unwrap(),
            [Wait::Cooldown(Duration::from_secs(2))]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_ceiling_halves_on_a_rate_limit_and_grows_by_one_per_success() {
        let governor = Arc::new(Governor::new(6));
        let mut permits = Vec::new();
        for _ in 0..6 {
            permits.push(governor.acquire(|_| {}).await);
        }
        assert_eq!(governor.ceiling(), 6, "the cap to begin with");
        governor.rate_limited(None);
        assert_eq!(governor.ceiling(), 3);
        governor.rate_limited(None);
        assert_eq!(governor.ceiling(), 3, "the same burst halves once");
        tokio::time::sleep(Duration::from_secs(2)).await;
        governor.rate_limited(None);
        assert_eq!(governor.ceiling(), 1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        governor.rate_limited(None);
        assert_eq!(governor.ceiling(), 1, "never below one");
        permits.clear();
        tokio::time::sleep(Duration::from_secs(2)).await;
        // One at a time now: a second request waits for the first to end.
        let one = governor.acquire(|_| {}).await;
        let g = governor.clone();
        let second = tokio::spawn(async move { g.acquire(|_| {}).await });
        tokio::task::yield_now().await;
        assert!(!second.is_finished());
        governor.succeeded();
        assert_eq!(governor.ceiling(), 2);
        let _two = second.await.unwrap();
        drop(one);
        for _ in 0..10 {
            governor.succeeded();
        }
        assert_eq!(governor.ceiling(), 6, "never past the cap");
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_leave_a_cooldown_spread_out() {
        let governor = Arc::new(Governor::new(100));
        governor.rate_limited(Some(Duration::from_secs(5)));
        let start = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let g = governor.clone();
            tasks.push(tokio::spawn(async move {
                let _permit = g.acquire(|_| {}).await;
                Instant::now()
            }));
        }
        let mut times = Vec::new();
        for t in tasks {
            times.push(t.await.unwrap() - start);
        }
        assert!(times.iter().all(|t| *t >= Duration::from_secs(5)));
        times.sort();
        times.dedup();
        assert!(times.len() > 10, "{times:?}");
    }
}
