//! Deadlines that cannot overflow: a duration from a user, a registry entry or the wire may be
//! anything up to `Duration::MAX`, and `Instant + Duration` panics past the clock's range.

use std::time::Duration;

use tokio::time::Instant;

/// How far out "no limit" is.
const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `from + by`, saturating far in the future instead of overflowing: a duration such as
/// `Duration::MAX` means "no limit".
pub(crate) fn later(from: Instant, by: Duration) -> Instant {
    // A clock whose range ends sooner than `FAR` still gets a far deadline, never `from`
    // (which would read as "expired").
    from.checked_add(by.min(FAR))
        .or_else(|| from.checked_add(by.min(crate::transport::tcp::MAX_DEADLINE)))
        .unwrap_or(from)
}
