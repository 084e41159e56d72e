//! Connections that have not yet said how they open (no handshake, no first frame yet). Each
//! costs a socket and a task until it speaks or its opening timeout ends it; a peer that opens
//! many and says nothing would hold the node's file handles and lock legitimate callers out.
//! So at most `cap` may be opening at once: a new connection past that ends the one that has
//! been opening longest of the address that has the most opening. A legitimate caller speaks
//! within a round trip; a silent one is the oldest soon; and a flood from one address evicts its
//! own connections, not those of the callers beside it.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::task::AbortHandle;

/// The default bound on connections opening at once.
pub const DEFAULT_MAX_OPENING_CONNECTIONS: usize = 256;

/// The connections opening now, oldest first.
pub(super) struct Openings {
    cap: usize,
    queue: Mutex<VecDeque<Opening>>,
    next: AtomicU64,
}

/// One connection opening: its id, its peer's address, and its serving task once spawned.
type Opening = (u64, IpAddr, Arc<OnceLock<AbortHandle>>);

/// A connection's place among the opening ones; given up when it has opened or ended.
pub(super) struct OpeningSlot {
    openings: Arc<Openings>,
    id: u64,
}

impl Openings {
    pub(super) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            cap: cap.max(1),
            queue: Mutex::default(),
            next: AtomicU64::new(0),
        })
    }

    /// Counts a new connection from `from`, whose serving task `serving` will hold, as
    /// opening; if that makes one too many, ends the oldest one opening from the address with
    /// the most. Whether one was ended.
    pub(super) fn admit(
        self: &Arc<Self>,
        from: IpAddr,
        serving: Arc<OnceLock<AbortHandle>>,
    ) -> (OpeningSlot, bool) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        queue.push_back((id, from, serving));
        let mut evicted = false;
        if queue.len() > self.cap {
            let mut counts: HashMap<IpAddr, usize> = HashMap::new();
            for (_, ip, _) in queue.iter() {
                *counts.entry(*ip).or_default() += 1;
            }
            // Ties go to the address whose oldest connection is oldest: `max_by_key` keeps
            // the last maximum, so the queue is walked newest first.
            let busiest = queue
                .iter()
                .rev()
                .map(|(_, ip, _)| (counts[ip], *ip))
                .max_by_key(|(n, _)| *n)
                .map(|(_, ip)| ip);
            let at = busiest.and_then(|b| queue.iter().position(|(_, ip, _)| *ip == b));
            if let Some((_, _, oldest)) = at.and_then(|at| queue.remove(at)) {
                if let Some(task) = oldest.get() {
                    task.abort();
                }
                evicted = true;
            }
        }
        let opening = OpeningSlot {
            openings: self.clone(),
            id,
        };
        (opening, evicted)
    }
}

impl Drop for OpeningSlot {
    fn drop(&mut self) {
        let mut queue = self
            .openings
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(at) = queue.iter().position(|(id, _, _)| *id == self.id) {
            queue.remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn past_the_cap_the_oldest_opening_connection_is_ended() {
        let openings = Openings::new(2);
        let mut tasks = Vec::new();
        let mut places = Vec::new();
        let mut evictions = Vec::new();
        let from: IpAddr = [127, 0, 0, 1].into();
        for _ in 0..3 {
            let serving = Arc::new(OnceLock::new());
            let (place, evicted) = openings.admit(from, serving.clone());
            let task = tokio::spawn(std::future::pending::<()>());
            let _ = serving.set(task.abort_handle());
            tasks.push(task);
            places.push(place);
            evictions.push(evicted);
        }
        assert_eq!(evictions, [false, false, true]);
        let first = tasks.remove(0);
        assert!(
            first.await.unwrap_err().is_cancelled(),
            "the oldest was ended"
        );
        // One that has opened gives its place up: the next one ends nobody.
        drop(places.remove(1));
        let (_fourth, evicted) = openings.admit(from, Arc::new(OnceLock::new()));
        assert!(!evicted);
    }

    #[tokio::test]
    async fn a_flood_from_one_address_evicts_its_own_connections() {
        let openings = Openings::new(3);
        let caller: IpAddr = [127, 0, 0, 1].into();
        let flood: IpAddr = [127, 0, 0, 2].into();
        let pending = || {
            let serving = Arc::new(OnceLock::new());
            let task = tokio::spawn(std::future::pending::<()>());
            let _ = serving.set(task.abort_handle());
            (serving, task)
        };
        let (serving, legit) = pending();
        let (_caller_slot, _) = openings.admit(caller, serving);
        let mut slots = Vec::new();
        for _ in 0..20 {
            let (serving, _task) = pending();
            slots.push(openings.admit(flood, serving));
        }
        assert!(slots[19].1, "past the cap, one was ended");
        tokio::task::yield_now().await;
        assert!(!legit.is_finished(), "the caller's connection was not");
    }
}
