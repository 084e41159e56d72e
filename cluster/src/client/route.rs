//! The route a client keeps per function: the providers the last full choice found eligible
//! (`select.rs`), each with its peer's state and the options merged for it, stamped with the
//! registry copy's generation and the peers' ejection count. While neither has moved, a call's
//! first attempt takes its turn among them and compares the two peers' outstanding requests,
//! and skips the lookup, the version, wire and shape checks and the options merge: about 1.3 k
//! instructions of a call (`docs/benchmarks.md`). Retries, a call's own `newest_only`, and any
//! moment a stamp moved or a replica was ejected or passed over take the full choice.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::ClientCore;
use super::peers::Peer;
use super::select::Chosen;
use crate::options::ResolvedOptions;
use crate::registry::ServiceEntry;

/// One eligible provider of a route.
pub(crate) struct Routed {
    pub(crate) entry: Arc<ServiceEntry>,
    /// The function's index in the entry's description.
    pub(crate) function: usize,
    pub(crate) peer: Arc<Peer>,
    /// Provider service < provider function < client: the merge without a call's overrides.
    pub(crate) options: ResolvedOptions,
}

/// The providers a full choice found, while the stamps hold.
pub(crate) struct Route {
    /// [`LocalCopy::generation`](crate::registry::LocalCopy) before the lookup it was built from.
    pub(crate) registry: u64,
    /// [`Peers::ejections`](super::peers::Peers) before their loads were read.
    pub(crate) ejections: u64,
    pub(crate) candidates: Box<[Routed]>,
}

/// The routes of a client, one slot per function of its description; shared by its clones.
pub(crate) struct Routes(Box<[Mutex<Option<Arc<Route>>>]>);

impl Routes {
    pub(crate) fn new(functions: usize) -> Arc<Self> {
        Arc::new(Self((0..functions).map(|_| Mutex::new(None)).collect()))
    }

    fn slot(&self, function: usize) -> std::sync::MutexGuard<'_, Option<Arc<Route>>> {
        self.0[function].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `route` for `function`.
    pub(crate) fn keep(&self, function: usize, route: Route) {
        if !route.candidates.is_empty() {
            *self.slot(function) = Some(Arc::new(route));
        }
    }

    /// The first attempt's provider from the kept route, if its stamps still hold: the next
    /// turn's pair, the one with fewer requests outstanding (as `choose` takes it).
    pub(crate) fn choose(
        &self,
        client: &ClientCore,
        function: usize,
        registry: u64,
    ) -> Option<Chosen> {
        let route = self.slot(function).clone()?;
        if route.registry != registry || route.ejections != client.node.peers.ejections() {
            return None;
        }
        let count = route.candidates.len();
        let turn = client.turn.fetch_add(1, Ordering::Relaxed) % count;
        let first = &route.candidates[turn];
        let second = &route.candidates[(turn + 1) % count];
        let chosen = if second.peer.outstanding() < first.peer.outstanding() {
            second
        } else {
            first
        };
        Some(Chosen {
            entry: chosen.entry.clone(),
            function: chosen.function,
            peer: Some(chosen.peer.clone()),
            options: Some(chosen.options),
        })
    }
}
