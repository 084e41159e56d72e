//! Step 3's pauses between attempts: exponential, with full jitter.
//!
//! Each pause has a ceiling that starts at `retry_after` and grows by `retry_factor` up to
//! `retry_max_after`; with jitter (the default) the pause is drawn uniformly between
//! [`MIN_RETRY_PAUSE`] and the ceiling ("full jitter", AWS's name for it). Clients that failed
//! at the same instant then retry at scattered instants instead of in lockstep, and a provider
//! that came back is not hit by every caller at once. Without jitter the pause is the ceiling.

use std::time::Duration;

use crate::options::{MIN_RETRY_PAUSE, RetryPolicy};

pub(crate) struct Pauses {
    ceiling: Duration,
    max: Duration,
    factor: f64,
    jitter: bool,
    // Whether a pause was already drawn under the time left rather than its ceiling: once per
    // call, so that the end of a budget is not a burst of ever shorter pauses.
    fitted: bool,
}

impl Pauses {
    pub(crate) fn new(policy: &RetryPolicy) -> Self {
        Self {
            ceiling: policy.after.min(policy.max_after),
            max: policy.max_after,
            factor: policy.factor,
            jitter: policy.jitter,
            fitted: false,
        }
    }

    /// The next pause, if one fits in the `left` of the call's budget; `None` ends the call.
    /// Without jitter, a pause that would reach the deadline does not fit: no "one last try"
    /// squeezed in (the seed's timing table). With jitter, a drawn pause that would leave no
    /// room for an attempt is drawn again under what is left, once per call: a random draw
    /// does not end a call that had time for another attempt, and the budget's end is not a
    /// burst of ever shorter pauses either.
    pub(crate) fn next_within(&mut self, left: Duration) -> Option<Duration> {
        let ceiling = self.ceiling;
        // The factor is clamped to 1..=100 by the merge; a product past what a Duration holds
        // is the maximum pause, never a panic.
        self.ceiling = Duration::try_from_secs_f64(ceiling.as_secs_f64() * self.factor)
            .unwrap_or(self.max)
            .min(self.max);
        if !self.jitter || ceiling <= MIN_RETRY_PAUSE {
            return (ceiling < left).then_some(ceiling);
        }
        // Room for the next attempt to start before the deadline.
        let room = left.saturating_sub(MIN_RETRY_PAUSE);
        let pause = draw(ceiling);
        if pause <= room {
            return Some(pause);
        }
        if self.fitted || room < MIN_RETRY_PAUSE {
            return None;
        }
        self.fitted = true;
        Some(draw(ceiling.min(room)))
    }

    /// Whether [`next_within`](Self::next_within) could give a pause in `left`, without
    /// drawing one: for an error that says a retry would have followed.
    pub(crate) fn could_fit(&self, left: Duration) -> bool {
        if !self.jitter || self.ceiling <= MIN_RETRY_PAUSE {
            return self.ceiling < left;
        }
        left.saturating_sub(MIN_RETRY_PAUSE) >= MIN_RETRY_PAUSE
    }

    #[cfg(test)]
    fn next(&mut self) -> Duration {
        self.next_within(Duration::MAX).unwrap_or(Duration::MAX)
    }
}

/// A pause drawn uniformly between [`MIN_RETRY_PAUSE`] and `ceiling` (at least the minimum).
fn draw(ceiling: Duration) -> Duration {
    let span = ceiling.saturating_sub(MIN_RETRY_PAUSE).as_nanos();
    let drawn = fastrand::u128(0..=span);
    MIN_RETRY_PAUSE + Duration::from_nanos(u64::try_from(drawn).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{CallOptions, ResolvedOptions, Source};

    fn policy(options: CallOptions) -> RetryPolicy {
        ResolvedOptions::merge(&[(Source::Call, &options)]).retry
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn ceilings_double_to_the_maximum_and_pauses_are_drawn_under_them() {
        let mut pauses = Pauses::new(&policy(CallOptions::new()));
        let ceilings = [100, 200, 400, 800, 1600, 3200, 5000, 5000];
        let mut drawn = Vec::new();
        for ceiling in ceilings {
            let pause = pauses.next();
            assert!(
                (MIN_RETRY_PAUSE..=ceiling * MS).contains(&pause),
                "{pause:?} over {ceiling} ms"
            );
            drawn.push(pause);
        }
        drawn.dedup();
        assert!(drawn.len() > 4, "jittered pauses differ: {drawn:?}");
    }

    #[test]
    fn without_jitter_the_pause_is_its_ceiling_and_a_constant_policy_stays_constant() {
        let options = CallOptions::new()
            .retry_jitter(false)
            .retry_factor(1.0)
            .retry_after(250 * MS);
        let mut pauses = Pauses::new(&policy(options));
        let taken: Vec<_> = (0..4).map(|_| pauses.next()).collect();
        assert_eq!(taken, [250 * MS; 4]);
    }

    #[test]
    fn a_jittered_pause_fits_in_what_is_left_and_a_constant_one_ends_the_call() {
        // Ceilings of 35,000 years: a pause drawn under one never fits in 300 ms by chance.
        let long = || {
            let years = Duration::from_secs(1 << 40);
            let options = CallOptions::new().retry_after(years).retry_max_after(years);
            Pauses::new(&policy(options))
        };
        for _ in 0..100 {
            let mut jittered = long();
            let pause = jittered.next_within(300 * MS).expect("fits");
            assert!((MIN_RETRY_PAUSE..=290 * MS).contains(&pause), "{pause:?}");
            // Once per call: the next one that does not fit ends it.
            assert_eq!(jittered.next_within(300 * MS), None);
        }
        assert_eq!(
            long().next_within(15 * MS),
            None,
            "no room left for an attempt"
        );
        let constant = CallOptions::new()
            .retry_jitter(false)
            .retry_factor(1.0)
            .retry_after(Duration::from_secs(1));
        let mut constant = Pauses::new(&policy(constant));
        assert_eq!(
            constant.next_within(Duration::from_secs(2)),
            Some(Duration::from_secs(1))
        );
        assert_eq!(constant.next_within(Duration::from_secs(1)), None);
    }

    #[test]
    fn huge_values_saturate() {
        let options = CallOptions::new()
            .retry_after(Duration::MAX)
            .retry_max_after(Duration::MAX)
            .retry_factor(100.0)
            .retry_jitter(false);
        let mut pauses = Pauses::new(&policy(options));
        for _ in 0..4 {
            assert_eq!(pauses.next(), Duration::MAX);
        }
    }

    #[test]
    fn many_clients_that_failed_together_do_not_retry_together() {
        // 1,000 clients' first pauses, in 10 ms buckets over the 100 ms ceiling.
        let mut buckets = [0u32; 10];
        for _ in 0..1000 {
            let pause = Pauses::new(&policy(CallOptions::new())).next();
            buckets[((pause.as_millis() as usize) / 10).min(9)] += 1;
        }
        assert!(
            buckets.iter().all(|&n| n < 200),
            "no 10 ms holds a fifth of the retries: {buckets:?}"
        );
    }
}
