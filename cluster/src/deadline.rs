//! Deadlines that cannot overflow: a duration from a user, a registry entry or the wire may be
//! anything up to `Duration::MAX`, and `Instant + Duration` panics past the clock's range.

use std::collections::BinaryHeap;
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

/// Refills a heap of deadlines with `live` alone, in the heap's own buffer. A connection's heaps
/// keep entries of requests that ended until they pile up, then are compacted: in place, that
/// allocates nothing on the path of a call.
pub(crate) fn refill<T: Ord>(heap: &mut BinaryHeap<T>, live: impl IntoIterator<Item = T>) {
    let mut entries = std::mem::take(heap).into_vec();
    entries.clear();
    entries.extend(live);
    *heap = BinaryHeap::from(entries);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn duration() -> impl Strategy<Value = Duration> {
        prop_oneof![
            Just(Duration::MAX),
            Just(FAR),
            (any::<u64>(), 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
            (0..FAR.as_secs(), 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
        ]
    }

    proptest! {
        #[test]
        fn later_never_panics_never_goes_back_and_adds_exactly_below_far(
            a in duration(),
            b in duration(),
        ) {
            let from = Instant::now();
            let (short, long) = (a.min(b), a.max(b));
            prop_assert!(later(from, short) >= from);
            prop_assert!(later(from, short) <= later(from, long));
            if short <= FAR {
                prop_assert_eq!(later(from, short), from + short);
            } else {
                prop_assert_eq!(later(from, short), from + FAR);
            }
        }
    }
}
