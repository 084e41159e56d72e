//! Numbers from the wire, kept in range before they become arithmetic: a lease of 0 or of
//! `u64::MAX` seconds, a timestamp years ahead, a duration too long for milliseconds.

use std::time::Duration;

use crate::server::RegisterError;

/// A duration in milliseconds, `u64::MAX` for one longer than that (`as_millis` is a `u128`,
/// and `as u64` would wrap it to anything).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A lease's duration or renewal interval in seconds as the store keeps it: 0 (the client did
/// not say) is `default`; the result is at least 1 s and at most `max`, so that a lease is
/// never already over when it starts, and never outlives its process by more than `max`.
pub(crate) fn lease_secs(asked: u64, default: Duration, max: Duration) -> u64 {
    let max = max.as_secs().max(1);
    let secs = if asked == 0 { default.as_secs() } else { asked };
    secs.clamp(1, max)
}

/// Refuses a `lastDirtyTimestamp` more than `skew` ahead of `now` (epoch ms): the newer copy of
/// an instance wins, so one dated years ahead would win over every later registration of it.
pub(crate) fn check_dirty(found: u64, now: u64, skew: Duration) -> Result<u64, RegisterError> {
    if found > now.saturating_add(millis(skew)) {
        return Err(RegisterError::AheadOfClock {
            found,
            now,
            max_secs: skew.as_secs(),
        });
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn leases_of_zero_take_the_default_and_huge_ones_the_maximum() {
        let default = Duration::from_secs(90);
        assert_eq!(lease_secs(0, default, DAY), 90);
        assert_eq!(lease_secs(3, default, DAY), 3);
        assert_eq!(lease_secs(u64::MAX, default, DAY), 86_400);
        assert_eq!(lease_secs(0, Duration::ZERO, DAY), 1, "never 0");
        assert_eq!(lease_secs(0, Duration::MAX, DAY), 86_400);
        assert_eq!(lease_secs(5, default, Duration::ZERO), 1);
    }

    #[test]
    fn milliseconds_saturate_and_timestamps_ahead_are_refused() {
        assert_eq!(millis(Duration::MAX), u64::MAX);
        assert_eq!(millis(Duration::from_secs(2)), 2_000);
        assert_eq!(check_dirty(5, 0, DAY), Ok(5));
        assert_eq!(check_dirty(86_400_000, 0, DAY), Ok(86_400_000));
        assert!(check_dirty(86_400_001, 0, DAY).is_err());
        assert!(
            check_dirty(u64::MAX, u64::MAX - 1, DAY).is_ok(),
            "no overflow"
        );
        assert!(check_dirty(u64::MAX, 0, Duration::MAX).is_ok());
    }
}
