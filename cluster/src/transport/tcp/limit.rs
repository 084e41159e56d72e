//! The bound on requests in flight on one connection, and its idle close. A counter and a
//! `Notify` rather than tokio's `Semaphore`, whose release takes a lock on every call: here
//! taking and returning a place are one atomic operation each while the bound is not reached.
//!
//! A connection idle long enough is closed by setting the counter from 0 to [`CLOSED`] in one
//! step: a request either took its place before (and the connection stays) or finds it closed
//! before anything was sent, and opens a new one.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The count of a closed connection: above any limit, so no place is ever taken.
const CLOSED: usize = usize::MAX / 2;

#[derive(Debug)]
pub(super) struct InFlightLimit {
    limit: usize,
    in_flight: AtomicUsize,
    waiting: AtomicUsize,
    freed: Notify,
    /// When a place was last taken or given back, in ms after `born`.
    last_active: AtomicU64,
    born: Instant,
}

/// Why no place was taken.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum NoPlace {
    /// Every place stayed taken until the deadline.
    Full,
    /// The connection was closed for being idle: open another.
    Closed,
}

/// One request in flight; its place is returned when dropped.
pub(super) struct Place(Arc<InFlightLimit>);

impl InFlightLimit {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            limit: limit.max(1),
            in_flight: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            freed: Notify::new(),
            last_active: AtomicU64::new(0),
            born: Instant::now(),
        }
    }

    fn touch(&self) {
        let ms = self.born.elapsed().as_millis() as u64;
        self.last_active.store(ms, Ordering::Relaxed);
    }

    /// When a place was last taken or given back.
    pub(super) fn last_active(&self) -> Instant {
        self.born + Duration::from_millis(self.last_active.load(Ordering::Relaxed))
    }

    /// Closes the connection if nothing is in flight and nothing was for `idle`; whether it did.
    pub(super) fn close_if_idle(&self, idle: Duration) -> bool {
        if self.last_active().elapsed() < idle {
            return false;
        }
        let closed = self
            .in_flight
            .compare_exchange(0, CLOSED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if closed {
            self.freed.notify_waiters();
        }
        closed
    }

    fn is_closed(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) >= CLOSED
    }

    fn try_take(self: &Arc<Self>) -> Option<Place> {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .ok()
            // Not touched here: a connection with a request in flight is never idle (see
            // `close_if_idle`), and the place's drop touches it when the request ends.
            .map(|_| Place(self.clone()))
    }

    /// A place, waiting for one until `deadline`.
    pub(super) async fn take(self: &Arc<Self>, deadline: Instant) -> Result<Place, NoPlace> {
        if let Some(place) = self.try_take() {
            return Ok(place);
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let place = tokio::time::timeout_at(deadline, async {
            loop {
                if let Some(place) = self.try_take() {
                    return Ok(place);
                }
                if self.is_closed() {
                    return Err(NoPlace::Closed);
                }
                // A place freed between the check and here left a permit in `freed`
                // (`notify_one` stores one when nobody waits), so this wakes at once.
                self.freed.notified().await;
            }
        })
        .await
        .unwrap_or(Err(NoPlace::Full));
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        if place.is_err() && self.in_flight.load(Ordering::SeqCst) < self.limit {
            // This waiter may have taken the wake meant for a place it no longer wants.
            self.freed.notify_one();
        }
        place
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        if self.0.waiting.load(Ordering::SeqCst) > 0 {
            self.0.freed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_place_freed_goes_to_a_waiter_and_a_waiter_gives_up_at_its_deadline() {
        let limit = std::sync::Arc::new(InFlightLimit::new(1));
        let first = limit.try_take().expect("a free place");
        let soon = Instant::now() + Duration::from_millis(10);
        assert_eq!(
            limit.take(soon).await.err(),
            Some(NoPlace::Full),
            "none came free"
        );
        let waiter = tokio::spawn({
            let limit = limit.clone();
            async move {
                let far = Instant::now() + Duration::from_secs(10);
                limit.take(far).await.is_ok()
            }
        });
        tokio::time::sleep(Duration::from_millis(1)).await;
        drop(first);
        assert!(waiter.await.unwrap());
        assert_eq!(limit.in_flight.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_closes_only_with_nothing_in_flight() {
        let limit = Arc::new(InFlightLimit::new(2));
        let idle = Duration::from_secs(60);
        let place = limit.take(Instant::now()).await.unwrap();
        tokio::time::advance(idle * 2).await;
        assert!(!limit.close_if_idle(idle), "a request is in flight");
        drop(place);
        assert!(!limit.close_if_idle(idle), "it just ended");
        tokio::time::advance(idle).await;
        assert!(limit.close_if_idle(idle));
        let later = Instant::now() + idle;
        assert_eq!(limit.take(later).await.err(), Some(NoPlace::Closed));
    }
}
