//! Deadlines that cannot overflow: a duration from a user, a registry entry or the wire may be
//! anything up to `Duration::MAX`, and `Instant + Duration` panics past the clock's range.

use std::time::Duration;

use tokio::time::Instant;

/// How far out "no limit" is.
const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `from + by`, saturating far in the future instead of overflowing: a duration such as
/// `Duration::MAX` means "no limit".
pub(crate) fn later(from: Instant, by: Duration) -> Instant {
    from.checked_add(by.min(FAR)).unwrap_or(from)
}
