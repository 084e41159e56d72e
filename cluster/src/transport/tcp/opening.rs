//! Connections that have not yet said how they open (no handshake, no first frame yet). Each
//! costs a socket and a task until it speaks or its opening timeout ends it; a peer that opens
//! many and says nothing would hold the node's file handles and lock legitimate callers out.
//! So at most `cap` may be opening at once: a new connection past that ends the one that has
//! been opening longest. A legitimate caller speaks within a round trip; a silent one is the
//! oldest soon.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::task::AbortHandle;

/// The default bound on connections opening at once.
pub const DEFAULT_MAX_OPENING_CONNECTIONS: usize = 256;

/// The connections opening now, oldest first.
pub(super) struct Openings {
    cap: usize,
    queue: Mutex<VecDeque<(u64, Arc<OnceLock<AbortHandle>>)>>,
    next: AtomicU64,
}

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

    /// Counts a new connection, whose serving task `serving` will hold, as opening; ends the
    /// oldest one still opening if that makes one too many. Whether one was ended.
    pub(super) fn admit(
        self: &Arc<Self>,
        serving: Arc<OnceLock<AbortHandle>>,
    ) -> (OpeningSlot, bool) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        queue.push_back((id, serving));
        let mut evicted = false;
        if queue.len() > self.cap
            && let Some((_, oldest)) = queue.pop_front()
        {
            if let Some(task) = oldest.get() {
                task.abort();
            }
            evicted = true;
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
        if let Some(at) = queue.iter().position(|(id, _)| *id == self.id) {
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
        for _ in 0..3 {
            let serving = Arc::new(OnceLock::new());
            let (place, evicted) = openings.admit(serving.clone());
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
        let (_fourth, evicted) = openings.admit(Arc::new(OnceLock::new()));
        assert!(!evicted);
    }
}
