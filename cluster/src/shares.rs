//! Counters that every connection of one peer shares: what a node counts per peer over all
//! its connections (bytes held, `transport/tcp/budget.rs`; calls running, `server/admission.rs`),
//! looked up under a lock once, when a connection opens, then counted with atomics alone, so
//! that no request takes a node-wide lock for it.

use std::hash::Hash;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, Weak};

use crate::fast_map::FastMap;

/// Peers remembered before the map is pruned of those with no connection left: about the
/// connections a node holds at once. Entries of live connections stay, so the map holds at
/// most about as many as there are connections, and their peers.
const BEFORE_PRUNING: usize = 2048;

/// Each peer's counter, kept while one of its connections holds it.
#[derive(Debug)]
pub(crate) struct Shares<K> {
    by_peer: Mutex<FastMap<K, Weak<AtomicUsize>>>,
}

impl<K> Default for Shares<K> {
    fn default() -> Self {
        Self {
            by_peer: Mutex::default(),
        }
    }
}

impl<K: Hash + Eq + Clone> Shares<K> {
    /// `peer`'s counter, shared with its other connections; zero if it has none.
    pub(crate) fn of(&self, peer: &K) -> Arc<AtomicUsize> {
        let mut by_peer = self.by_peer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(share) = by_peer.get(peer).and_then(Weak::upgrade) {
            return share;
        }
        if by_peer.len() >= BEFORE_PRUNING {
            by_peer.retain(|_, share| share.strong_count() > 0);
        }
        let share = Arc::new(AtomicUsize::new(0));
        by_peer.insert(peer.clone(), Arc::downgrade(&share));
        share
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_peer.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    #[test]
    fn connections_of_one_peer_share_a_counter_and_a_gone_peer_is_pruned() {
        let shares = Shares::<String>::default();
        let a = shares.of(&"a".to_owned());
        let a2 = shares.of(&"a".to_owned());
        a.fetch_add(3, Ordering::Relaxed);
        assert_eq!(a2.load(Ordering::Relaxed), 3);
        // A peer whose connections are all gone starts again from zero.
        drop((a, a2));
        assert_eq!(shares.of(&"a".to_owned()).load(Ordering::Relaxed), 0);
        // Past the pruning size, peers with no connection left are forgotten.
        let kept = shares.of(&"kept".to_owned());
        for n in 0..BEFORE_PRUNING + 10 {
            drop(shares.of(&n.to_string()));
        }
        assert!(shares.len() < BEFORE_PRUNING, "{} entries", shares.len());
        assert!(Arc::ptr_eq(&kept, &shares.of(&"kept".to_owned())));
    }
}
