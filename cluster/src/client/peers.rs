//! What this node has seen of each peer it calls: requests outstanding (for load balancing)
//! and recent connection failures (outlier ejection). The registry says who is alive; this
//! says who answered us lately, and is never written back to the registry.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::time::Instant;

/// How long a peer whose connection just failed is passed over, when others can serve.
pub(crate) const DEFAULT_COOLDOWN: Duration = Duration::from_secs(2);

/// How many peers are remembered before idle ones are forgotten.
const PRUNE_AT: usize = 1024;

#[derive(Debug)]
pub(crate) struct Peers {
    map: RwLock<HashMap<SocketAddr, Arc<Peer>>>,
    cooldown: Duration,
}

#[derive(Debug, Default)]
pub(crate) struct Peer {
    outstanding: AtomicUsize,
    ejected_until: Mutex<Option<Instant>>,
}

impl Peers {
    pub(crate) fn new(cooldown: Duration) -> Self {
        Self {
            map: RwLock::default(),
            cooldown,
        }
    }

    pub(crate) fn get(&self, addr: SocketAddr) -> Arc<Peer> {
        if let Some(peer) = self
            .map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&addr)
        {
            return peer.clone();
        }
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        // Every deploy brings new addresses; forget idle ones once there are many, so the map
        // does not grow with the cluster's history.
        if map.len() >= PRUNE_AT {
            let now = Instant::now();
            map.retain(|_, peer| {
                let ejected = peer
                    .ejected_until
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_some_and(|u| now < u);
                peer.outstanding.load(Ordering::Relaxed) > 0
                    || ejected
                    || Arc::strong_count(peer) > 1
            });
        }
        map.entry(addr).or_default().clone()
    }

    /// Requests outstanding to `addr`, without creating an entry for it.
    pub(crate) fn outstanding(&self, addr: SocketAddr) -> usize {
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&addr)
            .map_or(0, |p| p.outstanding.load(Ordering::Relaxed))
    }

    /// Whether `addr` failed to connect or lost its connection within the cool-down.
    pub(crate) fn is_ejected(&self, addr: SocketAddr) -> bool {
        let map = self.map.read().unwrap_or_else(|p| p.into_inner());
        let Some(peer) = map.get(&addr) else {
            return false;
        };
        let until = *peer.ejected_until.lock().unwrap_or_else(|p| p.into_inner());
        until.is_some_and(|until| Instant::now() < until)
    }

    pub(crate) fn eject(&self, addr: SocketAddr) {
        // A cool-down too long for the clock means "for good", never an overflow.
        let until = crate::deadline::later(Instant::now(), self.cooldown);
        *self
            .get(addr)
            .ejected_until
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(until);
    }

    pub(crate) fn restore(&self, peer: &Peer) {
        let mut until = peer.ejected_until.lock().unwrap_or_else(|p| p.into_inner());
        if until.is_some() {
            *until = None;
        }
    }
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

    #[tokio::test(start_paused = true)]
    async fn idle_peers_are_forgotten_and_busy_or_ejected_ones_kept() {
        let peers = Peers::new(DEFAULT_COOLDOWN);
        let addr = |i: u16| SocketAddr::from(([127, 0, 0, 1], i));
        let busy = InFlight::start(peers.get(addr(1)));
        peers.eject(addr(2));
        for i in 3..3000 {
            drop(peers.get(addr(i)));
        }
        let len = peers.map.read().unwrap().len();
        assert!(len <= PRUNE_AT + 1, "{len} peers remembered");
        assert_eq!(peers.outstanding(addr(1)), 1, "a busy peer is kept");
        assert!(peers.is_ejected(addr(2)), "an ejected peer is kept");
        drop(busy);
    }
}
