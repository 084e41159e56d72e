//! The delta window: the latest change of each instance within the retention time.
//!
//! Eureka keeps every change for 180 s, so an instance whose metadata changes every second has
//! 180 full copies in the window and in every delta read. A client applies a delta's entries in
//! order and keeps only the outcome, so the latest entry per instance carries everything it
//! needs: older ones are dropped when a newer one arrives.
//!
//! The window is bounded: an instance registered and cancelled under a new id each time would
//! otherwise add an entry per request for the whole retention time. Past the bound the oldest
//! entries go early; a client that missed them sees its hashcode differ from the server's, and
//! fetches the whole registry, as Eureka's clients do.

use std::collections::{BTreeMap, HashMap};

use super::lease::Change;

/// Changes in the order they were made, at most one per (application, instance id).
#[derive(Debug)]
pub(super) struct Deltas {
    /// By sequence number: (when, the change).
    entries: BTreeMap<u64, (u64, Change)>,
    /// The sequence number of each instance's entry.
    latest: HashMap<(String, String), u64>,
    next: u64,
    /// The most entries kept (`usize::MAX` by default).
    max: usize,
}

impl Default for Deltas {
    fn default() -> Self {
        Self::bounded(usize::MAX)
    }
}

impl Deltas {
    /// A window of at most `max` entries (at least 1).
    pub(super) fn bounded(max: usize) -> Self {
        Self {
            entries: BTreeMap::new(),
            latest: HashMap::new(),
            next: 0,
            max: max.max(1),
        }
    }

    /// Records a change, replacing the instance's earlier one.
    pub(super) fn push(&mut self, at: u64, change: Change) {
        let i = change.instance();
        let key = (i.app.clone(), i.id().to_owned());
        let seq = self.next;
        self.next = self.next.wrapping_add(1);
        if let Some(old) = self.latest.insert(key, seq) {
            self.entries.remove(&old);
        }
        self.entries.insert(seq, (at, change));
        while self.entries.len() > self.max {
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        if let Some((_, (_, c))) = self.entries.pop_first() {
            let i = c.instance();
            self.latest.remove(&(i.app.clone(), i.id().to_owned()));
        }
    }

    /// Forgets the changes older than `retention` ms.
    pub(super) fn trim(&mut self, now: u64, retention: u64) {
        while self
            .entries
            .first_key_value()
            .is_some_and(|(_, (at, _))| now.saturating_sub(*at) > retention)
        {
            self.pop_oldest();
        }
    }

    /// How many changes are kept.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The changes, oldest first.
    pub(super) fn changes(&self) -> impl Iterator<Item = &Change> {
        self.entries.values().map(|(_, c)| c)
    }

    /// The changes, oldest first, as the delta shows them.
    #[cfg(test)]
    pub(super) fn iter(&self) -> impl Iterator<Item = crate::model::Instance> + '_ {
        self.entries.values().map(|(_, c)| c.view())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ActionType, Instance};
    use crate::server::store::lease::Lease;

    fn change(i: Instance) -> Change {
        let lease = Lease {
            instance: std::sync::Arc::new(i),
            registered_ms: 0,
            last_seen_ms: 0,
            service_up_ms: 0,
            duration_ms: 0,
            grace_until_ms: 0,
        };
        Change::new(&lease, ActionType::Added)
    }

    #[test]
    fn one_entry_per_instance_the_latest_in_change_order() {
        let mut d = Deltas::default();
        for k in 0..100 {
            d.push(
                k,
                change(
                    Instance::new("a", "h", 1)
                        .with_id("x")
                        .meta("k", k.to_string()),
                ),
            );
        }
        d.push(100, change(Instance::new("a", "h", 1).with_id("y")));
        d.push(101, change(Instance::new("b", "h", 1).with_id("x")));
        let kept: Vec<_> = d
            .iter()
            .map(|i| (i.app.clone(), i.id().to_owned()))
            .collect();
        let kept: Vec<_> = kept.iter().map(|(a, i)| (a.as_str(), i.as_str())).collect();
        assert_eq!(kept, [("A", "x"), ("A", "y"), ("B", "x")]);
        assert_eq!(d.iter().next().unwrap().metadata["k"], "99");
        d.trim(200, 100);
        let kept: Vec<_> = d.iter().map(|i| i.id().to_owned()).collect();
        assert_eq!(
            kept,
            ["y", "x"],
            "the entry at 99 is past 100 ms old at 200"
        );
        d.push(201, change(Instance::new("a", "h", 1).with_id("x")));
        assert_eq!(d.iter().count(), 3);
    }

    #[test]
    fn past_its_bound_the_oldest_entries_go_early() {
        let mut d = Deltas::bounded(3);
        for k in 0..1_000 {
            d.push(
                k,
                change(Instance::new("a", "h", 1).with_id(format!("gone-{k}"))),
            );
        }
        let kept: Vec<_> = d.iter().map(|i| i.id().to_owned()).collect();
        assert_eq!(kept, ["gone-997", "gone-998", "gone-999"]);
        assert_eq!(d.latest.len(), 3, "the index is bounded too");
    }
}
