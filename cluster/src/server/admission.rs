//! Admission control and draining: a bound on concurrent calls, and a node that refuses new
//! calls while it finishes those it has. Both refusals happen before the function runs, so
//! clients retry them elsewhere, whatever the function.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::error::Reason;

/// The default bound on calls running at once on one node.
pub const DEFAULT_MAX_CONCURRENT_CALLS: usize = 1024;

#[derive(Debug)]
pub(crate) struct Admission {
    limit: usize,
    running: AtomicUsize,
    draining: AtomicBool,
    idle: Notify,
}

/// One admitted call; lets the next in when dropped.
pub(crate) struct Permit<'a>(&'a Admission);

impl Admission {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            running: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            idle: Notify::new(),
        }
    }

    /// Admits a call, or says why not: the node is draining, or at its limit. Never queues.
    pub(crate) fn admit(&self) -> Result<Permit<'_>, (Reason, String)> {
        // Counted first, checked second: a drain that starts in between either sees this call
        // running (and waits for it) or is seen by it (and refuses it).
        let before = self.running.fetch_add(1, Ordering::SeqCst);
        if self.draining.load(Ordering::SeqCst) {
            self.release();
            return Err((Reason::Draining, "the node is shutting down".to_owned()));
        }
        if before >= self.limit {
            self.release();
            return Err((
                Reason::Overloaded,
                format!("the node runs {} calls, its limit", self.limit),
            ));
        }
        Ok(Permit(self))
    }

    fn release(&self) {
        if self.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }

    pub(crate) fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// From now on every new call is refused with `Draining`.
    pub(crate) fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Waits until no call runs, or `timeout` passes; whether it got idle.
    pub(crate) async fn idle_within(&self, timeout: Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.idle.notified();
                if self.running() == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_refuses_before_running_and_never_queues() {
        let admission = Admission::new(2);
        let a = admission.admit().unwrap();
        let _b = admission.admit().unwrap();
        assert_eq!(admission.admit().err().unwrap().0, Reason::Overloaded);
        drop(a);
        assert!(admission.admit().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn draining_refuses_new_calls_and_waits_for_running_ones() {
        let admission = std::sync::Arc::new(Admission::new(8));
        let permit = admission.admit().unwrap();
        admission.drain();
        assert_eq!(admission.admit().err().unwrap().0, Reason::Draining);
        assert!(!admission.idle_within(Duration::from_millis(10)).await);
        drop(permit);
        assert!(admission.idle_within(Duration::from_millis(10)).await);
    }
}
