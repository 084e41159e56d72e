//! Counters that every connection of one peer shares: what a node counts per peer over all
//! its connections (bytes held, `transport/tcp/budget.rs`; calls running, `server/admission.rs`),
//! looked up under a lock once, when a connection opens, then counted with atomics alone, so
//! that no request takes a node-wide lock for it. A peer's entry goes when its last connection
//! does: a peer that opens and closes connections under ever new names (an insecure node's
//! callers name themselves, up to a handshake's 16 KiB) leaves nothing behind.

use std::hash::Hash;
use std::ops::Deref;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::fast_map::FastMap;

/// Entries kept before the map is pruned of those no connection holds: only counters taken
/// out of their connection's hold (an at-most-once call's handler that runs on after its
/// connection closed) can leave such an entry.
const BEFORE_PRUNING: usize = 2048;

type ByPeer<K> = Mutex<FastMap<K, Weak<AtomicUsize>>>;

/// Each peer's counter, kept while one of its connections holds it.
#[derive(Debug)]
pub(crate) struct Shares<K> {
    by_peer: Arc<ByPeer<K>>,
}

impl<K> Default for Shares<K> {
    fn default() -> Self {
        Self {
            by_peer: Arc::default(),
        }
    }
}

fn lock<K>(by_peer: &ByPeer<K>) -> MutexGuard<'_, FastMap<K, Weak<AtomicUsize>>> {
    by_peer.lock().unwrap_or_else(|p| p.into_inner())
}

impl<K: Hash + Eq + Clone> Shares<K> {
    /// A connection's hold on `peer`'s counter, shared with the peer's other connections; zero
    /// if it has none.
    pub(crate) fn of(&self, peer: &K) -> Share<K> {
        let mut by_peer = lock(&self.by_peer);
        let count = match by_peer.get(peer).and_then(Weak::upgrade) {
            Some(count) => count,
            None => {
                if by_peer.len() >= BEFORE_PRUNING {
                    by_peer.retain(|_, count| count.strong_count() > 0);
                }
                let count = Arc::new(AtomicUsize::new(0));
                by_peer.insert(peer.clone(), Arc::downgrade(&count));
                count
            }
        };
        Share {
            count,
            peer: peer.clone(),
            by_peer: self.by_peer.clone(),
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.by_peer).len()
    }
}

/// One connection's hold on its peer's counter.
#[derive(Debug)]
pub(crate) struct Share<K: Hash + Eq> {
    count: Arc<AtomicUsize>,
    peer: K,
    by_peer: Arc<ByPeer<K>>,
}

impl<K: Hash + Eq> Share<K> {
    /// The counter itself, for what outlives the connection's hold on it.
    pub(crate) fn count(&self) -> &Arc<AtomicUsize> {
        &self.count
    }
}

impl<K: Hash + Eq> Deref for Share<K> {
    type Target = AtomicUsize;

    fn deref(&self) -> &AtomicUsize {
        &self.count
    }
}

impl<K: Hash + Eq> Drop for Share<K> {
    fn drop(&mut self) {
        let mut by_peer = lock(&self.by_peer);
        // Under the map's lock no connection can take this counter (`of` takes it under the
        // lock), so a count of one is this hold's alone: the peer's last connection is going.
        if Arc::strong_count(&self.count) == 1
            && by_peer
                .get(&self.peer)
                .is_some_and(|kept| kept.as_ptr() == Arc::as_ptr(&self.count))
        {
            by_peer.remove(&self.peer);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    #[test]
    fn connections_of_one_peer_share_a_counter_and_the_last_to_go_takes_the_entry() {
        let shares = Shares::<String>::default();
        let a = shares.of(&"a".to_owned());
        let a2 = shares.of(&"a".to_owned());
        a.fetch_add(3, Ordering::Relaxed);
        assert_eq!(a2.load(Ordering::Relaxed), 3);
        drop(a);
        assert_eq!(shares.len(), 1, "a connection of the peer is left");
        drop(a2);
        assert_eq!(shares.len(), 0, "the peer's last connection took its entry");
        // A peer back after all its connections went starts again from zero.
        assert_eq!(shares.of(&"a".to_owned()).load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_counter_kept_past_its_connections_is_pruned_once_it_is_dropped() {
        let shares = Shares::<String>::default();
        let outliving = shares.of(&"gone".to_owned()).count().clone();
        assert_eq!(
            shares.len(),
            1,
            "the counter outlives the hold: the entry stays"
        );
        drop(outliving);
        let held: Vec<_> = (1..BEFORE_PRUNING)
            .map(|n| shares.of(&n.to_string()))
            .collect();
        assert_eq!(shares.len(), BEFORE_PRUNING);
        let new = shares.of(&"new".to_owned());
        assert_eq!(
            shares.len(),
            BEFORE_PRUNING,
            "the dead entry went, the new one came"
        );
        assert!(Arc::ptr_eq(
            held[0].count(),
            shares.of(&"1".to_owned()).count()
        ));
        drop((held, new));
        assert_eq!(shares.len(), 0);
    }
}
