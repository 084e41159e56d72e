//! What peers can make a node hold in memory: the bytes of frames being received, of requests
//! in flight and of replies not yet written, per connection and node-wide.
//!
//! A connection reserves a frame's bytes when its length prefix arrives, before the body is
//! read; without a reservation it is not read from, so the bytes wait in the peer's socket, not
//! here. The reservation becomes the request's [`Hold`].
//!
//! Each connection may hold a small allowance (`floor`) without touching the node's budget, so
//! that a legitimate caller's small request gets through while others hold the whole budget;
//! past that, bytes come from the node-wide budget, and one connection may hold at most
//! `per_connection` of it. So may one peer over all its connections ([`Budget::share`]; a peer
//! is its certificate's name, or its address on an insecure node, as in `established.rs`):
//! a member that opens a hundred connections holds no more of the budget than with one, only
//! their floors. A connection that may not reserve waits, unread: that is the
//! backpressure on a peer that sends requests and never reads the replies.
//!
//! A request's hold is given back when its reply is handed to the writer, or when the request is
//! cancelled or expires (`frames.rs` follows the ids as the serving loop does); its reply's bytes
//! are added to it when the handler returns ([`Account::add_reply`]), and the writer keeps what it
//! has not yet written counted ([`Account::force`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use super::established::Peer;
use crate::fast_map::FastMap;
use crate::shares::{Share, Shares};

/// The default node-wide budget for bytes held for peers.
pub const DEFAULT_MAX_BUFFERED_BYTES: usize = 32 << 20;

/// The bytes each connection may hold outside the node's budget: a few small requests.
pub(crate) const FLOOR: usize = 16 << 10;

/// The node-wide budget.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: usize,
    used: AtomicUsize,
    /// Connections waiting for bytes, by connection: woken when bytes come back.
    waiting: Mutex<FastMap<u64, Waker>>,
    next_connection: AtomicU64,
    /// Each peer's bytes of the budget, shared by its connections' accounts.
    peers: Shares<Peer>,
}

impl Budget {
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
            waiting: Mutex::default(),
            next_connection: AtomicU64::new(0),
            peers: Shares::default(),
        })
    }

    /// `peer`'s share: the bytes of the budget its connections hold together.
    pub(super) fn share(&self, peer: &Peer) -> Share<Peer> {
        self.peers.of(peer)
    }

    /// Bytes held now, node-wide (outside the connections' floors).
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    fn try_take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used.saturating_add(n) <= self.limit).then_some(used + n)
            })
            .is_ok()
    }

    /// Takes `n` even past the limit: bytes that exist already (a reply) are counted, so that
    /// the connection holding them reads no more until they are gone.
    fn force(&self, n: usize) {
        self.used.fetch_add(n, Ordering::AcqRel);
    }

    fn give_back(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.used.fetch_sub(n, Ordering::AcqRel);
        let woken: Vec<Waker> = lock(&self.waiting).drain().map(|(_, w)| w).collect();
        woken.into_iter().for_each(Waker::wake);
    }
}

/// What one connection may hold, and holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionLimits {
    /// Requests in flight (read, reply not yet handed to the writer).
    pub(crate) max_in_flight: usize,
    /// Bytes held, floor included.
    pub(crate) per_connection: usize,
}

/// One connection's account.
#[derive(Debug)]
pub(super) struct Account {
    budget: Arc<Budget>,
    /// Its peer's bytes of the budget, over all the peer's connections.
    peer: Share<Peer>,
    limits: ConnectionLimits,
    id: u64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Bytes held by this connection: reservations and holds.
    held: usize,
    /// Of which within the floor.
    floor: usize,
    /// Requests in flight, by request id, with the bytes of their replies once they have
    /// one: a second request with an id in flight is an error, never silently dropped.
    ids: FastMap<u64, usize>,
    /// The connection's reader, waiting for a request to end.
    reader: Option<Waker>,
}

/// Bytes reserved for one frame (or held for one request): given back when dropped.
#[derive(Debug)]
pub(super) struct Reservation {
    account: Arc<Account>,
    floor: usize,
    node: usize,
}

/// One request in flight: its id and bytes, given back when dropped.
#[derive(Debug)]
pub(super) struct Hold {
    bytes: Reservation,
    id: u64,
}

impl Account {
    pub(super) fn new(budget: Arc<Budget>, peer: &Peer, limits: ConnectionLimits) -> Arc<Self> {
        let id = budget.next_connection.fetch_add(1, Ordering::Relaxed);
        Arc::new(Self {
            peer: budget.share(peer),
            budget,
            limits,
            id,
            state: Mutex::default(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Requests in flight on this connection.
    pub(super) fn in_flight(&self) -> usize {
        self.state().ids.len()
    }

    /// Reserves `n` bytes for a frame, or registers to be woken when that may succeed.
    pub(super) fn poll_reserve(
        self: &Arc<Self>,
        n: usize,
        cx: &mut Context<'_>,
    ) -> Poll<Reservation> {
        let mut state = self.state();
        let peer = self.peer.load(Ordering::Acquire);
        let busy = state.ids.len() >= self.limits.max_in_flight
            // A frame alone may always be held (the frame limit bounds it); past that, the
            // connection waits for its own requests to end, and so does every connection of a
            // peer past its part: replies are counted even past the limits (they exist), and
            // a peer that reads them slowly on many connections must not go on sending
            // requests through each one's floor while they pile up.
            || (state.held > 0
                && (state.held.saturating_add(n) > self.limits.per_connection
                    || peer.saturating_add(n) > self.limits.per_connection));
        if busy {
            state.reader = Some(cx.waker().clone());
            return Poll::Pending;
        }
        if state.floor.saturating_add(n) <= FLOOR {
            state.floor += n;
            state.held += n;
            return Poll::Ready(self.reservation(n, 0));
        }
        // Registered before trying, so that bytes given back in between wake this reader.
        lock(&self.budget.waiting).insert(self.id, cx.waker().clone());
        if self.take(n) {
            lock(&self.budget.waiting).remove(&self.id);
            state.held += n;
            return Poll::Ready(self.reservation(0, n));
        }
        // Woken by the budget or by one of its own requests ending.
        state.reader = Some(cx.waker().clone());
        Poll::Pending
    }

    /// `n` bytes of the node's budget, within the peer's share of it (`per_connection`, as
    /// one connection: a frame alone always fits a peer holding nothing).
    fn take(&self, n: usize) -> bool {
        let within_share = self
            .peer
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used.saturating_add(n) <= self.limits.per_connection).then_some(used + n)
            })
            .is_ok();
        if !within_share {
            return false;
        }
        if self.budget.try_take(n) {
            return true;
        }
        self.peer.fetch_sub(n, Ordering::AcqRel);
        false
    }

    fn reservation(self: &Arc<Self>, floor: usize, node: usize) -> Reservation {
        Reservation {
            account: self.clone(),
            floor,
            node,
        }
    }

    /// The request `id` read with `bytes`: now in flight. `Err` when a request with that id is
    /// in flight already.
    pub(super) fn hold(&self, id: u64, bytes: Reservation) -> Result<Hold, Reservation> {
        let mut state = self.state();
        if state.ids.contains_key(&id) {
            return Err(bytes);
        }
        state.ids.insert(id, 0);
        Ok(Hold { bytes, id })
    }

    /// Counts the reply of request `id`, `n` bytes, which exist already: until the request's
    /// hold ends, the connection reads no more than its share allows.
    pub(crate) fn add_reply(&self, id: u64, n: usize) {
        let mut state = self.state();
        if let Some(reply) = state.ids.get_mut(&id) {
            *reply += n;
            state.held += n;
            self.peer.fetch_add(n, Ordering::AcqRel);
            self.budget.force(n);
        }
    }

    /// Counts `n` bytes that exist already (replies being written), even past the limits.
    pub(super) fn force(self: &Arc<Self>, n: usize) -> Reservation {
        self.peer.fetch_add(n, Ordering::AcqRel);
        self.budget.force(n);
        self.state().held += n;
        self.reservation(0, n)
    }

    fn release(&self, floor: usize, node: usize, id: Option<u64>) {
        let (reader, node) = {
            let mut state = self.state();
            let reply = id.and_then(|id| state.ids.remove(&id)).unwrap_or(0);
            state.floor -= floor;
            state.held -= floor + node + reply;
            (state.reader.take(), node + reply)
        };
        // The peer's share first: the budget wakes the connections waiting, this peer's too.
        self.peer.fetch_sub(node, Ordering::AcqRel);
        self.budget.give_back(node);
        if let Some(reader) = reader {
            reader.wake();
        }
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        lock(&self.budget.waiting).remove(&self.id);
    }
}

impl Reservation {
    /// Takes over `other`'s bytes: one reservation for all the bytes a writer holds.
    pub(super) fn absorb(&mut self, mut other: Reservation) {
        self.floor += std::mem::take(&mut other.floor);
        self.node += std::mem::take(&mut other.node);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.account.release(self.floor, self.node, None);
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        // Its bytes go back with the id, in one step; the reservation then gives back nothing.
        let (floor, node) = (
            std::mem::take(&mut self.bytes.floor),
            std::mem::take(&mut self.bytes.node),
        );
        self.bytes.account.release(floor, node, Some(self.id));
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use super::*;

    fn poll(account: &Arc<Account>, n: usize) -> Option<Reservation> {
        let mut cx = Context::from_waker(Waker::noop());
        match account.poll_reserve(n, &mut cx) {
            Poll::Ready(r) => Some(r),
            Poll::Pending => None,
        }
    }

    const LIMITS: ConnectionLimits = ConnectionLimits {
        max_in_flight: 3,
        per_connection: 1 << 20,
    };

    /// A peer's second connection holds no more of the budget than its first left it: a
    /// member opening many connections gains only their floors. Another peer gets the rest.
    #[test]
    fn one_peers_connections_share_one_connections_part_of_the_budget() {
        let budget = Budget::new(4 << 20);
        let member = Peer::test(1);
        let (first, second) = (
            Account::new(budget.clone(), &member, LIMITS),
            Account::new(budget.clone(), &member, LIMITS),
        );
        let held = poll(&first, 1 << 20).expect("a frame alone fits");
        assert!(
            poll(&second, 100).is_some(),
            "the floor is each connection's"
        );
        assert!(
            poll(&second, FLOOR + 1).is_none(),
            "the peer's part is taken"
        );
        let other = Account::new(budget.clone(), &Peer::test(2), LIMITS);
        assert!(poll(&other, 1 << 20).is_some(), "another peer's is not");
        drop(held);
        assert!(poll(&second, FLOOR + 1).is_some(), "given back to the peer");
    }

    /// Replies a peer does not read are counted past the limits; once its part is taken, a
    /// connection of its that holds anything reads nothing more, floor or not.
    #[test]
    fn a_peer_past_its_part_in_unread_replies_reads_no_more_on_any_connection_holding_some() {
        let budget = Budget::new(4 << 20);
        let member = Peer::test(1);
        let connections: Vec<_> = (0..4)
            .map(|_| Account::new(budget.clone(), &member, LIMITS))
            .collect();
        // Each has a small request in flight, from its floor, and its reply waits unwritten.
        let mut holds = Vec::new();
        for (id, account) in connections.iter().enumerate() {
            let hold = account
                .hold(id as u64, poll(account, 100).expect("a floor"))
                .unwrap();
            account.add_reply(id as u64, 200 << 10);
            holds.push(hold);
        }
        assert!(
            poll(&connections[0], 100).is_some(),
            "under the peer's part"
        );
        connections[1].add_reply(1, 1 << 20);
        for account in &connections {
            assert!(poll(account, 100).is_none(), "the peer's part is taken");
        }
        let fresh = Account::new(budget.clone(), &member, LIMITS);
        assert!(
            poll(&fresh, 100).is_some(),
            "a connection holding nothing has its floor"
        );
        drop(holds);
        assert!(
            poll(&connections[1], 100).is_some(),
            "read again once written"
        );
    }

    #[test]
    fn small_frames_use_the_floor_and_large_ones_the_budget() {
        let budget = Budget::new(1 << 20);
        let a = Account::new(budget.clone(), &Peer::test(1), LIMITS);
        let small = poll(&a, 1000).expect("within the floor");
        assert_eq!(budget.used(), 0);
        let large = poll(&a, 512 << 10).expect("from the budget");
        assert_eq!(budget.used(), 512 << 10);
        drop(large);
        assert_eq!(budget.used(), 0);
        drop(small);
        assert_eq!(a.state().held, 0);
    }

    #[test]
    fn an_exhausted_budget_leaves_every_connection_its_floor() {
        let budget = Budget::new(1 << 20);
        let hog = Account::new(budget.clone(), &Peer::test(1), LIMITS);
        let _all = poll(&hog, 1 << 20).expect("the whole budget");
        assert!(poll(&hog, FLOOR + 1).is_none(), "nothing left");
        let other = Account::new(budget.clone(), &Peer::test(2), LIMITS);
        assert!(poll(&other, 100).is_some(), "a small request still gets in");
        assert!(poll(&other, FLOOR + 1).is_none());
    }

    #[test]
    fn requests_in_flight_and_reused_ids_are_bounded() {
        let budget = Budget::new(1 << 20);
        let a = Account::new(budget, &Peer::test(1), LIMITS);
        let mut holds: Vec<Hold> = (0..3)
            .map(|id| a.hold(id, poll(&a, 10).unwrap()).unwrap())
            .collect();
        assert!(poll(&a, 10).is_none(), "three in flight, the limit");
        holds.pop();
        let again = poll(&a, 10).unwrap();
        assert!(a.hold(0, again).is_err(), "id 0 is in flight");
        holds.clear();
        assert_eq!(a.in_flight(), 0);
        assert_eq!(a.state().held, 0);
    }

    #[test]
    fn a_reply_is_counted_until_its_hold_ends() {
        let budget = Budget::new(1 << 20);
        let a = Account::new(budget.clone(), &Peer::test(1), LIMITS);
        let hold = a.hold(1, poll(&a, 10).unwrap()).unwrap();
        a.add_reply(1, 2 << 20);
        a.add_reply(99, 1 << 30);
        assert_eq!(budget.used(), 2 << 20, "counted past the limit");
        assert!(poll(&a, FLOOR + 1).is_none());
        drop(hold);
        assert_eq!(budget.used(), 0);
        assert_eq!(a.state().held, 0);
    }
}
