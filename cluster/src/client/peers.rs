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
        self.map
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(addr)
            .or_default()
            .clone()
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
        let until = Instant::now() + self.cooldown;
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
