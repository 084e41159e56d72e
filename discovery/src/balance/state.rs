//! What the balancer remembers of one endpoint: requests in flight, and the cool-down after
//! a failed connection. Only a connection that failed starts one: an instance that answered,
//! even with an error, is up, and its answers are its service's business.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::resolve::Endpoint;

/// Each failure in a row doubles the cool-down, up to this many times (2 s .. 32 s).
const MAX_DOUBLINGS: u32 = 4;

/// The longest cool-down taken: a year.
const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

#[derive(Debug, Default)]
pub(super) struct Slot {
    in_flight: AtomicUsize,
    cooling: Mutex<Cooling>,
}

#[derive(Debug, Default)]
struct Cooling {
    until: Option<Instant>,
    /// Failed connections since the last success: the next cool-down doubles with each.
    failures: u32,
}

impl Slot {
    pub(super) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Whether the endpoint is being passed over at `now`.
    pub(super) fn cooling(&self, now: Instant) -> bool {
        self.lock().until.is_some_and(|u| now < u)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cooling> {
        self.cooling.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An endpoint chosen for one request, counted in flight until dropped. Say how the attempt
/// went with [`Pick::connect_failed`] or [`Pick::reached`].
#[derive(Debug)]
pub struct Pick {
    endpoint: Endpoint,
    slot: Arc<Slot>,
    cool_down: Duration,
}

impl Pick {
    pub(super) fn new(endpoint: Endpoint, slot: Arc<Slot>, cool_down: Duration) -> Self {
        slot.in_flight.fetch_add(1, Ordering::Relaxed);
        Self {
            endpoint,
            slot,
            cool_down,
        }
    }

    /// The instance's address.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// No connection could be made (refused, unreachable, timed out): the endpoint is passed
    /// over for the cool-down, doubled for each such failure in a row.
    pub fn connect_failed(&self) {
        let mut c = self.slot.lock();
        let doublings = c.failures.min(MAX_DOUBLINGS);
        c.failures = c.failures.saturating_add(1);
        let now = Instant::now();
        let wait = self.cool_down.saturating_mul(1 << doublings);
        // A cool-down configured absurdly long saturates rather than overflow the clock.
        c.until = Some(now.checked_add(wait).unwrap_or(now + LONGEST));
    }

    /// The instance was reached (it answered, whatever it said): its failures in a row end.
    pub fn reached(&self) {
        let mut c = self.slot.lock();
        c.failures = 0;
        c.until = None;
    }
}

impl Drop for Pick {
    fn drop(&mut self) {
        self.slot.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}
