//! What this node has seen of each peer it calls, shared by every client on the node: requests
//! outstanding (for load balancing) and failures in a row (failure accrual: outlier ejection). The registry says who is alive; this says who answered us
//! lately, and is never written back to the registry. `docs/registry.md`, "Lookup and routing".

use std::collections::HashMap;

use crate::fast_map::FastMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::time::Instant;

/// How long a peer is passed over the first time it is ejected, when others can serve.
pub(crate) const DEFAULT_COOLDOWN: Duration = Duration::from_secs(2);

/// The share of a service's replicas that may fail their health check and be passed over:
/// past it, all are called (Envoy's healthy panic threshold is also half).
pub(crate) const DEFAULT_PANIC_THRESHOLD: f64 = 0.5;

/// Failures in a row (timeouts, panics, overload refusals) that eject a peer. A connection
/// that fails ejects it at once: a dead socket says more than one slow answer.
pub(crate) const EJECT_AFTER: u32 = 3;

/// Each ejection in a row doubles the cool-down, up to this many doublings (2 s .. 32 s).
const MAX_DOUBLINGS: u32 = 4;

/// How many peers are remembered before idle ones are forgotten.
const PRUNE_AT: usize = 1024;

#[derive(Debug)]
pub(crate) struct Peers {
    map: RwLock<FastMap<SocketAddr, Arc<Peer>>>,
    cooldown: Duration,
    /// The share of a service's replicas that may fail their health check and be passed over;
    /// past it, all are called.
    pub(crate) panic_threshold: f64,
    // Whose turn it is, per service: shared by every client of the service on this node, so a
    // client made per request spreads its calls as one kept for the process does.
    turns: Mutex<HashMap<String, Arc<AtomicUsize>>>,
    // Retry throttling per service (`throttle.rs`), shared the same way.
    throttles: Mutex<HashMap<String, Arc<super::throttle::Throttle>>>,
    // When each service last had its failing replicas routed to (the panic threshold): said
    // at WARN once per interval, not once per call.
    panicked: Mutex<HashMap<String, Instant>>,
    // Ejections so far: a route cached while none of its peers was ejected holds while this
    // has not moved (`client/route.rs`).
    ejections: AtomicU64,
}

#[derive(Debug, Default)]
pub(crate) struct Peer {
    outstanding: AtomicUsize,
    state: Mutex<State>,
}

/// A peer is an address; a node restarted there is a new process, whose predecessor's
/// failures are not its own.

#[derive(Debug, Default)]
struct State {
    // The newest generation of the node seen at this address.
    generation: u64,
    ejected_until: Option<Instant>,
    // Failures since the last success.
    failures: u32,
    // Ejections since the last success: the next cool-down doubles with each.
    ejections: u32,
}

/// How an attempt to a peer ended, as failure accrual counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// An answer (the function's own error included).
    Answered,
    /// No connection, it broke, or the node is draining: ejected at once (a draining node
    /// will not serve again; its successor is a new generation, with a clean record).
    Unreachable,
    /// A timeout, a panic or an overload refusal: [`EJECT_AFTER`] in a row eject.
    Failed,
    /// Says nothing about the peer's health (a stale registry entry, a wire mismatch).
    Neutral,
}

impl Peers {
    pub(crate) fn new(cooldown: Duration, panic_threshold: f64) -> Self {
        Self {
            map: RwLock::default(),
            cooldown,
            panic_threshold,
            turns: Mutex::default(),
            throttles: Mutex::default(),
            panicked: Mutex::default(),
            ejections: AtomicU64::new(0),
        }
    }

    /// The peer at `addr`, where a node of `generation` now runs: a newer generation than seen
    /// there before starts with a clean record.
    pub(crate) fn get(&self, addr: SocketAddr, generation: u64) -> Arc<Peer> {
        let peer = self.entry(addr);
        let mut state = peer.lock();
        if generation > state.generation {
            *state = State {
                generation,
                ..State::default()
            };
        }
        drop(state);
        peer
    }

    fn entry(&self, addr: SocketAddr) -> Arc<Peer> {
        if let Some(peer) = self.read().get(&addr) {
            return peer.clone();
        }
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        // Every deploy brings new addresses; forget idle ones once there are many, so the map
        // does not grow with the cluster's history.
        if map.len() >= PRUNE_AT {
            let now = Instant::now();
            map.retain(|_, peer| {
                peer.outstanding.load(Ordering::Relaxed) > 0
                    || peer.lock().ejected_until.is_some_and(|u| now < u)
                    || Arc::strong_count(peer) > 1
            });
        }
        map.entry(addr).or_default().clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, FastMap<SocketAddr, Arc<Peer>>> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The turn counter of `service`, for [`Client`](super::Client)s to share.
    pub(crate) fn turn(&self, service: &str) -> Arc<AtomicUsize> {
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        // Services come from static descriptions, so this is bounded by the program's code;
        // the bound here only guards a program that makes descriptions at run time.
        if turns.len() >= PRUNE_AT && !turns.contains_key(service) {
            turns.retain(|_, turn| Arc::strong_count(turn) > 1);
        }
        turns.entry(service.to_owned()).or_default().clone()
    }

    /// The retry throttle of `service`, for [`Client`](super::Client)s to share.
    pub(crate) fn throttle(&self, service: &str) -> Arc<super::throttle::Throttle> {
        let mut throttles = self.throttles.lock().unwrap_or_else(|p| p.into_inner());
        if throttles.len() >= PRUNE_AT && !throttles.contains_key(service) {
            throttles.retain(|_, throttle| Arc::strong_count(throttle) > 1);
        }
        throttles
            .entry(service.to_owned())
            .or_insert_with(|| Arc::new(super::throttle::Throttle::new()))
            .clone()
    }

    /// Whether a line about `service` routing to failing replicas is due (one per
    /// [`LOG_EVERY`](crate::rate_limited::LOG_EVERY)).
    pub(crate) fn panic_line_due(&self, service: &str) -> bool {
        let now = Instant::now();
        let mut said = self.panicked.lock().unwrap_or_else(|p| p.into_inner());
        if said.len() >= PRUNE_AT && !said.contains_key(service) {
            said.retain(|_, at| now.duration_since(*at) < crate::rate_limited::LOG_EVERY);
        }
        match said.get(service) {
            Some(at) if now.duration_since(*at) < crate::rate_limited::LOG_EVERY => false,
            _ => {
                said.insert(service.to_owned(), now);
                true
            }
        }
    }

    /// Requests outstanding to `addr`, and the instant its ejection ends if the node of
    /// `generation` there is ejected (a restarted node is not: its predecessor was).
    pub(crate) fn load(&self, addr: SocketAddr, generation: u64) -> Load {
        let map = self.read();
        let Some(peer) = map.get(&addr) else {
            return Load::default();
        };
        let now = Instant::now();
        let state = peer.lock();
        Load {
            outstanding: peer.outstanding.load(Ordering::Relaxed),
            ejected_until: state
                .ejected_until
                .filter(|until| now < *until && generation <= state.generation),
        }
    }

    /// Counts how an attempt to `peer`, to the node of `generation` there, ended. An attempt to
    /// a node since restarted at the address says nothing of its successor.
    pub(crate) fn saw(&self, peer: &Peer, generation: u64, seen: Seen) {
        let mut state = peer.lock();
        if generation < state.generation {
            return;
        }
        match seen {
            Seen::Answered => {
                state.failures = 0;
                state.ejections = 0;
                state.ejected_until = None;
            }
            Seen::Failed => {
                state.failures = state.failures.saturating_add(1);
                if state.failures >= EJECT_AFTER {
                    self.eject(&mut state, Instant::now());
                }
            }
            Seen::Unreachable => self.eject(&mut state, Instant::now()),
            Seen::Neutral => {}
        }
    }

    /// Ejections so far, on any peer.
    pub(crate) fn ejections(&self) -> u64 {
        self.ejections.load(Ordering::Acquire)
    }

    fn eject(&self, state: &mut State, now: Instant) {
        self.ejections.fetch_add(1, Ordering::Release);
        let doublings = state.ejections.min(MAX_DOUBLINGS);
        let cooldown = self.cooldown.saturating_mul(1 << doublings);
        // A cool-down too long for the clock means "for good", never an overflow.
        state.ejected_until = Some(crate::deadline::later(now, cooldown));
        state.ejections = state.ejections.saturating_add(1);
        state.failures = 0;
    }
}

impl Peer {
    /// Requests outstanding to it from this node.
    pub(crate) fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A peer's standing for one choice.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Load {
    pub(crate) outstanding: usize,
    pub(crate) ejected_until: Option<Instant>,
}

/// Counts one request outstanding to a peer while it lives.
pub(crate) struct InFlight(Arc<Peer>);

impl InFlight {
    pub(crate) fn start(peer: Arc<Peer>) -> Self {
        peer.outstanding.fetch_add(1, Ordering::Relaxed);
        Self(peer)
    }

    pub(crate) fn peer(&self) -> &Peer {
        &self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(i: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], i))
    }

    #[tokio::test(start_paused = true)]
    async fn idle_peers_are_forgotten_and_busy_or_ejected_ones_kept() {
        let peers = Peers::new(DEFAULT_COOLDOWN, DEFAULT_PANIC_THRESHOLD);
        let busy = InFlight::start(peers.get(addr(1), 1));
        peers.saw(&peers.get(addr(2), 1), 1, Seen::Unreachable);
        for i in 3..3000 {
            drop(peers.get(addr(i), 1));
        }
        let len = peers.read().len();
        assert!(len <= PRUNE_AT + 1, "{len} peers remembered");
        assert_eq!(peers.load(addr(1), 1).outstanding, 1, "a busy peer is kept");
        assert!(
            peers.load(addr(2), 1).ejected_until.is_some(),
            "an ejected peer is kept"
        );
        drop(busy);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_in_a_row_eject_for_a_doubling_cooldown_and_an_answer_forgives() {
        let peers = Peers::new(DEFAULT_COOLDOWN, DEFAULT_PANIC_THRESHOLD);
        let peer = peers.get(addr(1), 1);
        for _ in 1..EJECT_AFTER {
            peers.saw(&peer, 1, Seen::Failed);
        }
        assert_eq!(peers.load(addr(1), 1).ejected_until, None, "not yet");
        peers.saw(&peer, 1, Seen::Answered);
        for _ in 1..EJECT_AFTER {
            peers.saw(&peer, 1, Seen::Failed);
        }
        assert_eq!(
            peers.load(addr(1), 1).ejected_until,
            None,
            "an answer restarts the count"
        );
        let mut cooldowns = Vec::new();
        for _ in 0..6 {
            for _ in 0..EJECT_AFTER {
                peers.saw(&peer, 1, Seen::Failed);
            }
            let until = peers.load(addr(1), 1).ejected_until.expect("ejected");
            cooldowns.push((until - Instant::now()).as_secs());
            tokio::time::advance(until - Instant::now()).await;
            assert_eq!(peers.load(addr(1), 1).ejected_until, None, "back after it");
        }
        assert_eq!(cooldowns, [2, 4, 8, 16, 32, 32]);
        peers.saw(&peer, 1, Seen::Unreachable);
        assert_eq!(
            (peers.load(addr(1), 1).ejected_until.unwrap() - Instant::now()).as_secs(),
            32,
            "a dead socket ejects at once, and the streak goes on"
        );
        peers.saw(&peer, 1, Seen::Answered);
        peers.saw(&peer, 1, Seen::Unreachable);
        assert_eq!(
            (peers.load(addr(1), 1).ejected_until.unwrap() - Instant::now()).as_secs(),
            2,
            "an answer resets the cool-down"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_restarted_at_the_address_is_not_ejected_for_its_predecessor() {
        let peers = Peers::new(DEFAULT_COOLDOWN, DEFAULT_PANIC_THRESHOLD);
        peers.saw(&peers.get(addr(1), 7), 7, Seen::Unreachable);
        assert!(peers.load(addr(1), 7).ejected_until.is_some());
        assert_eq!(
            peers.load(addr(1), 8).ejected_until,
            None,
            "generation 8 is new"
        );
        let restarted = peers.get(addr(1), 8);
        for _ in 1..EJECT_AFTER {
            peers.saw(&restarted, 8, Seen::Failed);
        }
        assert_eq!(peers.load(addr(1), 8).ejected_until, None, "a clean record");
        peers.saw(&restarted, 8, Seen::Failed);
        assert_eq!(
            (peers.load(addr(1), 8).ejected_until.unwrap() - Instant::now()).as_secs(),
            2,
            "its own first ejection"
        );
        // A call to the predecessor that ends only now is not held against the successor.
        let fresh = peers.get(addr(2), 8);
        peers.saw(&fresh, 7, Seen::Unreachable);
        assert_eq!(peers.load(addr(2), 8).ejected_until, None);
    }

    #[test]
    fn clients_of_one_service_share_its_turn() {
        let peers = Peers::new(DEFAULT_COOLDOWN, DEFAULT_PANIC_THRESHOLD);
        let (a, b) = (peers.turn("search"), peers.turn("search"));
        a.fetch_add(1, Ordering::Relaxed);
        assert_eq!(b.load(Ordering::Relaxed), 1);
        assert_eq!(peers.turn("orders").load(Ordering::Relaxed), 0);
    }
}
