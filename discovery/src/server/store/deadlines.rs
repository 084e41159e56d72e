//! When each lease goes quiet, counted by time: how many leases there are and how many are quiet
//! now, without visiting them.
//!
//! The registry is settled before every operation (the protocol decides expiry and
//! self-preservation at the moment of a read or a heartbeat). Counting the quiet leases by
//! visiting every lease made each request cost the whole registry: 100,000 leases scanned per
//! heartbeat. Here a request costs a lookup of the deadlines already past, which is none in a
//! healthy registry; the leases themselves are visited only when one of them is due to expire.

use std::collections::BTreeMap;

/// A multiset of deadlines (epoch ms after which a lease is quiet).
#[derive(Debug, Default)]
pub(super) struct Deadlines {
    counts: BTreeMap<u64, u32>,
    len: usize,
}

impl Deadlines {
    pub(super) fn add(&mut self, deadline: u64) {
        *self.counts.entry(deadline).or_default() += 1;
        self.len += 1;
    }

    pub(super) fn remove(&mut self, deadline: u64) {
        if let Some(n) = self.counts.get_mut(&deadline) {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(&deadline);
            }
            self.len -= 1;
        }
    }

    /// How many leases there are.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// How many are quiet at `now` (their deadline is before it). Costs the number of distinct
    /// deadlines already past: none while every lease renews.
    pub(super) fn quiet(&self, now: u64) -> usize {
        self.counts.range(..now).map(|(_, n)| *n as usize).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_is_past_and_forgets_what_is_removed() {
        let mut d = Deadlines::default();
        for t in [10, 10, 20, 30] {
            d.add(t);
        }
        assert_eq!(
            (d.len(), d.quiet(10), d.quiet(11), d.quiet(31)),
            (4, 0, 2, 4)
        );
        d.remove(10);
        d.remove(99); // not there: no change
        assert_eq!((d.len(), d.quiet(11)), (3, 1));
        d.remove(10);
        assert!(!d.counts.contains_key(&10), "no empty buckets kept");
    }
}
