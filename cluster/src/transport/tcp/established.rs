//! The bound on connections past their handshake, shared fairly between the peers that hold
//! them. A peer is its certificate's node name on a secure node (proven), its IP address on an
//! insecure one (a name there is only a claim).
//!
//! At the bound, a newcomer from peer A closes a connection of the peer B that holds the most,
//! if B holds at least two more than A would; it is refused otherwise. So one peer that opens
//! connections without end holds at most an equal share once others need theirs, and a peer
//! with none always gets one: that is the reserve. Of B's connections, the one idle longest
//! (nothing in flight) goes first.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tokio::task::AbortHandle;

use super::budget::Account;

/// The default bound on established connections (lowered to half the process's file limit).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// Who holds a connection, for fairness.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Peer {
    Named(Arc<str>),
    Address(IpAddr),
}

pub(super) struct Established {
    cap: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    total: usize,
    next: u64,
    by_peer: HashMap<Peer, Vec<Entry>>,
}

struct Entry {
    id: u64,
    serving: Arc<OnceLock<AbortHandle>>,
    account: Arc<Account>,
}

/// A connection's place among the established ones; given up when dropped.
pub(super) struct Place {
    established: Arc<Established>,
    peer: Peer,
    id: u64,
}

/// Why a connection was not admitted.
pub(super) struct Full {
    pub(super) cap: usize,
    pub(super) theirs: usize,
}

impl Established {
    pub(super) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            cap: cap.max(1),
            inner: Mutex::default(),
        })
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a connection of `peer`, closing another peer's if the bound is reached and that
    /// peer holds more than its share.
    pub(super) fn admit(
        self: &Arc<Self>,
        peer: Peer,
        serving: Arc<OnceLock<AbortHandle>>,
        account: Arc<Account>,
    ) -> Result<Place, Full> {
        let mut inner = self.inner();
        let theirs = inner.by_peer.get(&peer).map_or(0, Vec::len);
        if inner.total >= self.cap {
            let largest = inner
                .by_peer
                .iter()
                .map(|(p, entries)| (entries.len(), p))
                .max_by_key(|(n, _)| *n)
                .filter(|(n, _)| *n >= theirs + 2)
                .map(|(_, p)| p.clone());
            let Some(largest) = largest else {
                return Err(Full {
                    cap: self.cap,
                    theirs,
                });
            };
            let entries = inner.by_peer.get_mut(&largest).expect("just found");
            // The oldest with nothing in flight, else the oldest.
            let at = entries
                .iter()
                .position(|e| e.account.in_flight() == 0)
                .unwrap_or(0);
            let evicted = entries.remove(at);
            inner.total -= 1;
            if let Some(task) = evicted.serving.get() {
                task.abort();
            }
            tracing::debug!(
                "{} connections established, the limit: closed one of {largest:?}'s for {peer:?}",
                self.cap
            );
        }
        let id = inner.next;
        inner.next += 1;
        inner.total += 1;
        inner.by_peer.entry(peer.clone()).or_default().push(Entry {
            id,
            serving,
            account,
        });
        Ok(Place {
            established: self.clone(),
            peer,
            id,
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut inner = self.established.inner();
        let Some(entries) = inner.by_peer.get_mut(&self.peer) else {
            return;
        };
        let Some(at) = entries.iter().position(|e| e.id == self.id) else {
            // Evicted: counted out already.
            return;
        };
        entries.remove(at);
        if entries.is_empty() {
            inner.by_peer.remove(&self.peer);
        }
        inner.total -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::super::budget::{Budget, ConnectionLimits};
    use super::*;

    fn account() -> Arc<Account> {
        let limits = ConnectionLimits {
            max_in_flight: 10,
            per_connection: 1 << 20,
        };
        Account::new(Budget::new(1 << 20), limits)
    }

    #[tokio::test]
    async fn at_the_bound_a_newcomer_closes_one_of_the_largest_holder_and_no_more() {
        let established = Established::new(4);
        let hog = Peer::Address([10, 0, 0, 1].into());
        let mut places = Vec::new();
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let serving = Arc::new(OnceLock::new());
            let task = tokio::spawn(std::future::pending::<()>());
            let _ = serving.set(task.abort_handle());
            tasks.push(task);
            let place = established.admit(hog.clone(), serving, account());
            places.push(place.ok().expect("under the bound"));
        }
        assert!(
            established
                .admit(hog.clone(), Arc::default(), account())
                .is_err(),
            "the hog itself gets no more"
        );
        let caller = Peer::Named("caller".into());
        let first = established.admit(caller.clone(), Arc::default(), account());
        assert!(first.is_ok(), "a peer with none gets one");
        assert!(tasks.remove(0).await.unwrap_err().is_cancelled());
        let _second = established.admit(caller.clone(), Arc::default(), account());
        // Now 2 and 2: a third for the caller would leave the hog fewer than it.
        assert!(
            established
                .admit(caller, Arc::default(), account())
                .is_err()
        );
        assert_eq!(established.inner().total, 4);
        drop(places);
        assert_eq!(established.inner().total, 2);
    }
}
