//! The bound on requests in flight on one connection. A counter and a `Notify` rather than
//! tokio's `Semaphore`, whose release takes a lock on every call: here taking and returning a
//! place are one atomic operation each while the bound is not reached.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Debug)]
pub(super) struct InFlightLimit {
    limit: usize,
    in_flight: AtomicUsize,
    waiting: AtomicUsize,
    freed: Notify,
}

/// One request in flight; its place is returned when dropped.
pub(super) struct Place<'a>(&'a InFlightLimit);

impl InFlightLimit {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            limit: limit.max(1),
            in_flight: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            freed: Notify::new(),
        }
    }

    fn try_take(&self) -> Option<Place<'_>> {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .ok()
            .map(|_| Place(self))
    }

    /// A place, waiting for one until `deadline`; `None` if none came free by then.
    pub(super) async fn take(&self, deadline: Instant) -> Option<Place<'_>> {
        if let Some(place) = self.try_take() {
            return Some(place);
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let place = tokio::time::timeout_at(deadline, async {
            loop {
                if let Some(place) = self.try_take() {
                    return place;
                }
                // A place freed between the check and here left a permit in `freed`
                // (`notify_one` stores one when nobody waits), so this wakes at once.
                self.freed.notified().await;
            }
        })
        .await
        .ok();
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        if place.is_none() && self.in_flight.load(Ordering::SeqCst) < self.limit {
            // This waiter may have taken the wake meant for a place it no longer wants.
            self.freed.notify_one();
        }
        place
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
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
        assert!(limit.take(soon).await.is_none(), "none came free");
        let waiter = tokio::spawn({
            let limit = limit.clone();
            async move {
                let far = Instant::now() + Duration::from_secs(10);
                limit.take(far).await.is_some()
            }
        });
        tokio::time::sleep(Duration::from_millis(1)).await;
        drop(first);
        assert!(waiter.await.unwrap());
        assert_eq!(limit.in_flight.load(Ordering::SeqCst), 0);
    }
}
