//! The bound on connections past their handshake, shared fairly between the peers that hold
//! them. A peer is its certificate's node name on a secure node (proven), its IP address on an
//! insecure one (a name there is only a claim).
//!
//! At the bound, a newcomer from peer A closes a connection of the peer B that holds the most,
//! if B holds at least two more than A would; failing that, one of A's own with nothing in
//! flight; it is refused otherwise. So one peer that opens connections without end holds at
//! most an equal share once others need theirs, a peer with none always gets one (the
//! reserve), and a caller that shares an address with a flood (insecure nodes tell peers by
//! address) still gets in while the flood's connections are idle. Of B's connections, the
//! oldest with nothing in flight goes first.
//!
//! A named peer (a certificate's node) holds at most a quarter of the bound at any time: its
//! newcomer past that closes one of its own idle connections, or is refused. A node opens one
//! connection per provider it calls; a compromised member that opens a thousand holds 256, and
//! the memory they cost (about 28 KiB each past TLS) stays inside its share
//! (`docs/reliability.md`, "What one member can make a node hold"). Insecure peers, told apart
//! only by address, have no such cap: the callers behind one address may be many.

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

#[cfg(test)]
impl Peer {
    /// The peer at 10.0.0.`n`, as an insecure node knows it.
    pub(super) fn test(n: u8) -> Self {
        Peer::Address(IpAddr::from([10, 0, 0, n]))
    }
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

    /// Connections established now.
    pub(super) fn count(&self) -> usize {
        self.inner().total
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
        let mut theirs = inner.by_peer.get(&peer).map_or(0, Vec::len);
        let idle = |entries: &Vec<Entry>| entries.iter().position(|e| e.account.in_flight() == 0);
        if matches!(peer, Peer::Named(_)) && theirs >= self.per_name() {
            let Some(at) = inner.by_peer.get(&peer).and_then(idle) else {
                return Err(Full {
                    cap: self.per_name(),
                    theirs,
                });
            };
            Self::evict(&mut inner, &peer, at);
            theirs -= 1;
            tracing::debug!(
                "{peer:?} holds {} connections, its most: closed its oldest idle one",
                self.per_name()
            );
        }
        if inner.total >= self.cap {
            let largest = inner
                .by_peer
                .iter()
                .map(|(p, entries)| (entries.len(), p))
                .max_by_key(|(n, _)| *n)
                .filter(|(n, _)| *n >= theirs + 2)
                .map(|(_, p)| p.clone());
            // The largest holder's oldest idle connection, else its oldest; or one of the
            // newcomer's own peer's, if idle.
            let victim = match largest {
                Some(largest) => {
                    let at = inner.by_peer.get(&largest).and_then(idle).unwrap_or(0);
                    Some((largest, at))
                }
                None => inner
                    .by_peer
                    .get(&peer)
                    .and_then(idle)
                    .map(|at| (peer.clone(), at)),
            };
            let Some((largest, at)) = victim else {
                return Err(Full {
                    cap: self.cap,
                    theirs,
                });
            };
            if !Self::evict(&mut inner, &largest, at) {
                return Err(Full {
                    cap: self.cap,
                    theirs,
                });
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

impl Established {
    /// The most connections one named peer holds: a quarter of the bound, and at least two
    /// (a connection being replaced is still there while its successor opens).
    fn per_name(&self) -> usize {
        (self.cap / 4).max(2)
    }

    /// Closes `peer`'s connection at `at`; false if there is none.
    fn evict(inner: &mut Inner, peer: &Peer, at: usize) -> bool {
        let Some(entries) = inner.by_peer.get_mut(peer) else {
            return false;
        };
        if at >= entries.len() {
            return false;
        }
        let evicted = entries.remove(at);
        inner.total -= 1;
        if let Some(task) = evicted.serving.get() {
            task.abort();
        }
        true
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
    use std::task::{Context, Poll, Waker};

    use super::super::budget::{Budget, ConnectionLimits, Hold};
    use super::*;

    fn account() -> Arc<Account> {
        let limits = ConnectionLimits {
            max_in_flight: 10,
            per_connection: 1 << 20,
        };
        Account::new(Budget::new(1 << 20), &Peer::test(1), limits)
    }

    /// An account with a request in flight, and the hold that keeps it so.
    fn busy() -> (Arc<Account>, Hold) {
        let account = account();
        let mut cx = Context::from_waker(Waker::noop());
        let Poll::Ready(bytes) = account.poll_reserve(10, &mut cx) else {
            panic!("a small frame is always reserved");
        };
        let hold = account.hold(1, bytes).expect("a new id");
        (account, hold)
    }

    /// A connection's serving task, to see it ended.
    fn serving() -> (Arc<OnceLock<AbortHandle>>, tokio::task::JoinHandle<()>) {
        let serving = Arc::new(OnceLock::new());
        let task = tokio::spawn(std::future::pending::<()>());
        let _ = serving.set(task.abort_handle());
        (serving, task)
    }

    async fn ended(task: tokio::task::JoinHandle<()>) -> bool {
        task.await.is_err_and(|e| e.is_cancelled())
    }

    /// A member past a quarter of the bound closes its own oldest idle connection, well
    /// before the bound; with none idle it is refused. Others are untouched.
    #[tokio::test]
    async fn a_named_peer_holds_at_most_a_quarter_of_the_bound() {
        let established = Established::new(16);
        let member = Peer::Named("mallory-1".into());
        let other = Peer::Named("web-1".into());
        let mut places = Vec::new();
        let (serving_other, other_task) = serving();
        places.push(
            established
                .admit(other, serving_other, account())
                .ok()
                .unwrap(),
        );
        let mut tasks = std::collections::VecDeque::new();
        for _ in 0..6 {
            let (serving, task) = serving();
            tasks.push_back(task);
            places.push(
                established
                    .admit(member.clone(), serving, account())
                    .ok()
                    .expect("admitted, closing its own past four"),
            );
        }
        assert_eq!(established.inner().by_peer[&member].len(), 4);
        assert_eq!(established.inner().total, 5);
        assert!(ended(tasks.pop_front().unwrap()).await, "its oldest closed");
        assert!(ended(tasks.pop_front().unwrap()).await);
        assert!(!other_task.is_finished(), "another peer's untouched");
        // All four busy: refused.
        let busy_member = Established::new(16);
        let mut holds = Vec::new();
        for _ in 0..4 {
            let (account, hold) = busy();
            holds.push(hold);
            places.push(
                busy_member
                    .admit(member.clone(), Arc::default(), account)
                    .ok()
                    .unwrap(),
            );
        }
        assert!(
            busy_member
                .admit(member, Arc::default(), account())
                .is_err()
        );
    }

    #[tokio::test]
    async fn at_the_bound_a_newcomer_closes_one_of_the_largest_holder_and_no_more() {
        let established = Established::new(4);
        let hog = Peer::Address([10, 0, 0, 1].into());
        let mut places = Vec::new();
        let mut tasks = std::collections::VecDeque::new();
        for _ in 0..4 {
            let (serving, task) = serving();
            tasks.push_back(task);
            let place = established.admit(hog.clone(), serving, account());
            places.push(place.ok().expect("under the bound"));
        }
        // A fifth of the hog's own replaces its oldest idle one.
        let (serving, task) = serving();
        places.push(
            established
                .admit(hog.clone(), serving, account())
                .ok()
                .unwrap(),
        );
        tasks.push_back(task);
        assert!(ended(tasks.pop_front().unwrap()).await);
        assert_eq!(established.inner().total, 4);

        // A peer with none gets one, and a second: the hog loses two of its four.
        let caller = Peer::Named("caller".into());
        let (a, _hold_a) = busy();
        let (b, _hold_b) = busy();
        let first = established.admit(caller.clone(), Arc::default(), a);
        assert!(first.is_ok(), "a peer with none gets one");
        assert!(ended(tasks.pop_front().unwrap()).await);
        let second = established.admit(caller.clone(), Arc::default(), b);
        assert!(second.is_ok());
        assert!(ended(tasks.pop_front().unwrap()).await);
        // Now 2 and 2, and the caller's are busy: a third would leave the hog fewer than it.
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
