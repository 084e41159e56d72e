//! What waits to go to one peer. At most one item per instance and kind of write, so the queue
//! grows with the registry's size, not with how long a peer stays away; a batch the peer did
//! not take goes back in (unless something newer replaced it) until it is too old to matter.
//! Cancellations of instances that are gone stay until sent, so a client registering and
//! cancelling new ids could still grow it: past `max` items the oldest is given up.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::wire::{Action, Item};

/// How long a write keeps being offered to a peer that does not take it. Past that the peer
/// has been away long enough to pull the registry when it comes back (a starting server syncs
/// from its peers); a heartbeat is worth nothing after one renewal interval anyway.
pub(super) const GIVE_UP_AFTER: Duration = Duration::from_secs(600);

/// The kinds of write that supersede each other per instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// A registration (also a metadata update) or a cancellation: the instance's existence.
    Lifecycle,
    /// A status override set or removed.
    Status,
    /// A renewal.
    Heartbeat,
}

fn kind(action: Action) -> Kind {
    match action {
        Action::Register | Action::Cancel => Kind::Lifecycle,
        Action::StatusUpdate | Action::DeleteStatusOverride => Kind::Status,
        Action::Heartbeat => Kind::Heartbeat,
    }
}

type Key = (String, String, Kind);

/// A write waiting, with its place in the order of arrival and when it was first queued.
#[derive(Debug, Clone)]
pub(super) struct Queued {
    seq: u64,
    since: Instant,
    pub(super) item: Item,
}

/// One peer's pending writes and the signal that there are some.
#[derive(Debug)]
pub(super) struct Outbox {
    pending: Mutex<Pending>,
    pub(super) wake: Notify,
    closed: std::sync::atomic::AtomicBool,
    /// The most items held.
    max: usize,
}

impl Default for Outbox {
    fn default() -> Self {
        Self::bounded(usize::MAX)
    }
}

#[derive(Debug, Default)]
struct Pending {
    next: u64,
    items: HashMap<Key, Queued>,
}

impl Outbox {
    /// An outbox of at most `max` items (at least 1).
    pub(super) fn bounded(max: usize) -> Self {
        Self {
            pending: Mutex::default(),
            wake: Notify::new(),
            closed: std::sync::atomic::AtomicBool::new(false),
            max: max.max(1),
        }
    }

    /// Queues a write, replacing what it supersedes: a cancellation everything queued for the
    /// instance, a registration its queued renewal, any write the older one of its kind. When
    /// the outbox is full the oldest item is given up for it: how many were (0 or 1).
    pub(super) fn push(&self, item: Item) -> usize {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let (app, id, k) = (item.app_name.clone(), item.id.clone(), kind(item.action));
        match item.action {
            Action::Cancel => pending
                .items
                .retain(|(a, i, _), _| !(*a == app && *i == id)),
            Action::Register => {
                pending
                    .items
                    .remove(&(app.clone(), id.clone(), Kind::Heartbeat));
            }
            _ => {}
        }
        let key = (app, id, k);
        let mut given_up = 0;
        if pending.items.len() >= self.max && !pending.items.contains_key(&key) {
            let oldest = pending
                .items
                .iter()
                .min_by_key(|(_, q)| q.seq)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                pending.items.remove(&oldest);
                given_up = 1;
            }
        }
        let seq = pending.next;
        pending.next = pending.next.wrapping_add(1);
        pending.items.insert(
            key,
            Queued {
                seq,
                since: Instant::now(),
                item,
            },
        );
        drop(pending);
        self.wake.notify_one();
        given_up
    }

    /// Takes up to `max` writes, oldest first.
    pub(super) fn take(&self, max: usize) -> Vec<Queued> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let mut oldest: Vec<(u64, Key)> = pending
            .items
            .iter()
            .map(|(k, q)| (q.seq, k.clone()))
            .collect();
        oldest.sort_unstable_by_key(|(seq, _)| *seq);
        oldest.truncate(max);
        oldest
            .into_iter()
            .filter_map(|(_, key)| pending.items.remove(&key))
            .collect()
    }

    /// Puts back writes a peer did not take, unless a newer write replaced them meanwhile or
    /// they are too old; how many were given up.
    pub(super) fn put_back(&self, batch: Vec<Queued>) -> usize {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let mut given_up = 0;
        for queued in batch {
            if queued.since.elapsed() > GIVE_UP_AFTER {
                given_up += 1;
                continue;
            }
            let key = (
                queued.item.app_name.clone(),
                queued.item.id.clone(),
                kind(queued.item.action),
            );
            let cancelled = pending.items.iter().any(|((a, i, k), q)| {
                *k == Kind::Lifecycle
                    && q.item.action == Action::Cancel
                    && *a == key.0
                    && *i == key.1
                    && q.seq > queued.seq
            });
            if cancelled || pending.items.contains_key(&key) {
                continue;
            }
            if pending.items.len() >= self.max {
                given_up += 1; // newer writes took its place meanwhile
                continue;
            }
            pending.items.insert(key, queued);
        }
        given_up
    }

    /// Ends the forwarding task (the server is gone).
    pub(super) fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        self.wake.notify_one();
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .items
            .is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actions(outbox: &Outbox) -> Vec<(String, Action)> {
        outbox
            .take(usize::MAX)
            .into_iter()
            .map(|q| (q.item.id, q.item.action))
            .collect()
    }

    #[test]
    fn renewals_of_one_instance_take_one_place_however_long_the_peer_is_away() {
        let outbox = Outbox::default();
        for _ in 0..10_000 {
            outbox.push(Item::new(Action::Heartbeat, "orders", "o-1"));
        }
        outbox.push(Item::new(Action::Heartbeat, "orders", "o-2"));
        assert_eq!(
            actions(&outbox),
            [
                ("o-1".into(), Action::Heartbeat),
                ("o-2".into(), Action::Heartbeat)
            ]
        );
    }

    #[test]
    fn a_status_override_is_not_lost_behind_later_renewals() {
        let outbox = Outbox::default();
        outbox.push(Item::new(Action::StatusUpdate, "orders", "o-1"));
        outbox.push(Item::new(Action::Heartbeat, "orders", "o-1"));
        outbox.push(Item::new(Action::Heartbeat, "orders", "o-1"));
        assert_eq!(
            actions(&outbox),
            [
                ("o-1".into(), Action::StatusUpdate),
                ("o-1".into(), Action::Heartbeat)
            ]
        );
    }

    #[test]
    fn a_cancellation_supersedes_everything_queued_for_the_instance() {
        let outbox = Outbox::default();
        outbox.push(Item::new(Action::Register, "orders", "o-1"));
        outbox.push(Item::new(Action::StatusUpdate, "orders", "o-1"));
        outbox.push(Item::new(Action::Cancel, "orders", "o-1"));
        assert_eq!(actions(&outbox), [("o-1".into(), Action::Cancel)]);
    }

    #[test]
    fn past_its_bound_the_oldest_write_is_given_up() {
        let outbox = Outbox::bounded(3);
        let mut given_up = 0;
        for k in 0..1_000 {
            given_up += outbox.push(Item::new(Action::Cancel, "orders", &format!("gone-{k}")));
        }
        assert_eq!(given_up, 997);
        let ids: Vec<_> = actions(&outbox).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["gone-997", "gone-998", "gone-999"]);
        assert_eq!(
            outbox.push(Item::new(Action::Cancel, "orders", "gone-1")),
            0,
            "room again once taken"
        );
    }

    #[test]
    fn a_batch_not_taken_goes_back_unless_something_newer_replaced_it() {
        let outbox = Outbox::default();
        outbox.push(Item::new(Action::StatusUpdate, "orders", "o-1"));
        outbox.push(Item::new(Action::Heartbeat, "orders", "o-2"));
        let batch = outbox.take(10);
        outbox.push(Item::new(Action::Heartbeat, "orders", "o-2")); // newer
        assert_eq!(outbox.put_back(batch), 0);
        let back = outbox.take(10);
        assert_eq!(back.len(), 2);
        assert!(
            back.iter().any(|q| q.item.action == Action::StatusUpdate),
            "the override is retried"
        );
        assert!(outbox.is_empty());
    }
}
