//! Retry throttling: retries and hedges add at most a share of a node's calls of a service.
//!
//! When a provider fails every call, each client that retries multiplies the provider's load by
//! its attempts: a storm that keeps it down. Finagle's `RetryBudget` (and tower's, after it)
//! bounds retries by the calls that were made: every call deposits, every retry or hedge
//! withdraws, over a window, with a floor a second for a node that calls rarely. gRPC's token
//! bucket bounds them by the ratio of failures to successes instead; the share of calls is what
//! a provider's operator can reason about (at most 1.2 times the load at a ratio of 0.2), and it
//! treats hedges, which are not failures, the same way as retries.
//!
//! 1. A call's first attempt is counted ([`Throttle::called`]), in the slot of the second it
//!    started in.
//! 2. A retry or a hedge asks [`Throttle::may_retry`]: the retries counted over the last
//!    `window` seconds, plus this one, must stay within `ratio` times the calls counted over the
//!    same seconds, plus `floor` for each of those seconds. If they do, it is counted; if it is
//!    then not sent after all (the provider chosen cannot take the request's frame, the budget
//!    ran out in the pause), it is uncounted ([`Counted`]): only what reaches the wire spends
//!    the allowance.
//! 3. Otherwise the call fails at once with `RetryThrottled` (a hedge is simply not sent).
//!
//! One per service on a node, shared by every client of it there (`Peers::service`). The counts
//! are atomics in 64 one-second slots (a window is at most 60 s): a call costs one atomic add,
//! taken from both of the runtime's workers, and no lock. Two retries that check at the same
//! moment may both pass where only one had room: the bound is kept to within the retries in
//! flight at once, not to the unit.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::time::Instant;

use crate::options::RetryPolicy;

/// One-second slots: a minute and a little, so that the oldest second of a 60 s window is
/// never the one being written.
const SLOTS: usize = 64;

#[derive(Debug)]
pub(crate) struct Throttle {
    origin: Instant,
    calls: Slots,
    retries: Slots,
}

impl Throttle {
    pub(crate) fn new() -> Self {
        Self {
            origin: Instant::now(),
            calls: Slots::default(),
            retries: Slots::default(),
        }
    }

    /// Counts a call that started at `now`.
    pub(crate) fn called(&self, now: Instant) {
        self.calls.add(self.second(now));
    }

    /// Whether a retry or hedge at `now` stays within `policy`'s ratio and floor; if it does,
    /// it is counted, until the [`Counted`] returned is dropped without being [`Counted::sent`]:
    /// a retry or hedge that is not sent after all (the provider's frame is too small for the
    /// request, the budget ran out during the pause) gives its place back.
    pub(crate) fn may_retry(&self, now: Instant, policy: &RetryPolicy) -> Option<Counted<'_>> {
        let second = self.second(now);
        let window = u32::try_from(policy.window.as_secs().clamp(1, 60)).unwrap_or(60);
        let calls = self.calls.sum(second, window);
        let retries = self.retries.sum(second, window);
        let allowed = policy.ratio * calls as f64 + f64::from(policy.floor) * f64::from(window);
        if (retries + 1) as f64 > allowed {
            return None;
        }
        self.retries.add(second);
        Some(Counted {
            throttle: self,
            second,
        })
    }

    /// Whole seconds since the throttle was made (wraps after 136 years).
    fn second(&self, now: Instant) -> u32 {
        now.saturating_duration_since(self.origin).as_secs() as u32
    }
}

/// A retry or hedge counted by [`Throttle::may_retry`]: uncounted when dropped, unless it was
/// sent.
#[must_use = "dropped, the retry is uncounted: call `sent` once it is sent"]
pub(crate) struct Counted<'a> {
    throttle: &'a Throttle,
    second: u32,
}

impl Counted<'_> {
    /// The retry or hedge was sent: it stays counted.
    pub(crate) fn sent(self) {
        std::mem::forget(self);
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.throttle.retries.sub(self.second);
    }
}

impl std::fmt::Debug for Counted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counted")
            .field("second", &self.second)
            .finish()
    }
}

/// A count per second: each slot holds the second it counts (high 32 bits) and the count (low
/// 32), so that a slot reused a minute later starts again at zero.
#[derive(Debug)]
struct Slots([AtomicU64; SLOTS]);

impl Default for Slots {
    fn default() -> Self {
        Self(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl Slots {
    fn add(&self, second: u32) {
        let slot = &self.0[second as usize % SLOTS];
        let mut current = slot.load(Ordering::Relaxed);
        loop {
            let next = if (current >> 32) as u32 == second {
                current
                    .saturating_add(1)
                    .min((u64::from(second) << 32) | u64::from(u32::MAX))
            } else {
                (u64::from(second) << 32) | 1
            };
            match slot.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// Takes one back from `second`'s count, if the slot still counts that second.
    fn sub(&self, second: u32) {
        let slot = &self.0[second as usize % SLOTS];
        let _ = slot.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |current| {
            ((current >> 32) as u32 == second && current & u64::from(u32::MAX) > 0)
                .then(|| current - 1)
        });
    }

    /// The counts of the `window` seconds up to and including `second`.
    fn sum(&self, second: u32, window: u32) -> u64 {
        (0..window)
            .filter_map(|back| second.checked_sub(back))
            .map(|s| {
                let slot = self.0[s as usize % SLOTS].load(Ordering::Relaxed);
                if (slot >> 32) as u32 == s {
                    slot & u64::from(u32::MAX)
                } else {
                    0
                }
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::options::{CallOptions, ResolvedOptions, Source};

    fn policy(ratio: f64, window: u64, floor: u32) -> RetryPolicy {
        let layer = CallOptions::new()
            .retry_ratio(ratio)
            .retry_window(Duration::from_secs(window))
            .retry_floor(floor);
        ResolvedOptions::merge(&[(Source::Client, &layer)]).retry
    }

    /// Sends the retry if it was let through.
    fn sent(counted: Option<Counted<'_>>) -> bool {
        counted.map(Counted::sent).is_some()
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_counted_and_not_sent_gives_its_place_back() {
        let throttle = Throttle::new();
        let p = policy(0.0, 1, 1);
        let now = Instant::now();
        for _ in 0..5 {
            // Counted, then not sent (its provider's frame is too small): uncounted.
            assert!(throttle.may_retry(now, &p).is_some());
        }
        assert!(
            sent(throttle.may_retry(now, &p)),
            "the floor's one is still there"
        );
        assert!(!sent(throttle.may_retry(now, &p)), "and spent once sent");
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stay_within_the_ratio_of_calls_over_the_window_plus_the_floor() {
        let throttle = Throttle::new();
        let p = policy(0.2, 10, 0);
        let now = Instant::now();
        for _ in 0..100 {
            throttle.called(now);
        }
        let allowed = (0..50)
            .filter(|_| sent(throttle.may_retry(now, &p)))
            .count();
        assert_eq!(allowed, 20, "a fifth of 100 calls");
        // Ten seconds on, those calls and retries are out of the window.
        let later = now + Duration::from_secs(10);
        assert!(
            !sent(throttle.may_retry(later, &p)),
            "no calls in the window"
        );
        throttle.called(later);
        throttle.called(later);
        throttle.called(later);
        throttle.called(later);
        throttle.called(later);
        assert!(sent(throttle.may_retry(later, &p)), "one fifth of five");
        assert!(!sent(throttle.may_retry(later, &p)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_floor_lets_a_node_that_calls_rarely_retry() {
        let throttle = Throttle::new();
        let p = policy(0.2, 10, 1);
        let now = Instant::now();
        throttle.called(now);
        let allowed = (0..30)
            .filter(|_| sent(throttle.may_retry(now, &p)))
            .count();
        assert_eq!(
            allowed, 10,
            "one a second over ten seconds; a fifth of one call is none"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_reused_a_minute_later_starts_from_zero() {
        let throttle = Throttle::new();
        let p = policy(1.0, 1, 0);
        let now = Instant::now();
        for _ in 0..5 {
            throttle.called(now);
        }
        let minute = now + Duration::from_secs(SLOTS as u64);
        assert!(
            !sent(throttle.may_retry(minute, &p)),
            "last minute's calls do not count"
        );
    }
}
