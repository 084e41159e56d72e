//! Admission control and draining: a bound on concurrent calls, and a node that refuses new
//! calls while it finishes those it has. Both refusals happen before the function runs, so
//! clients retry them elsewhere, whatever the function.
//!
//! The last eighth of the bound is a reserve: past seven eighths, a caller (the node that opened
//! the connection) with more than a few calls running is refused, so one caller with slow calls
//! cannot take every place and lock the others out.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::error::Reason;
use crate::shares::{Share, Shares};

/// The default bound on calls running at once on one node.
pub const DEFAULT_MAX_CONCURRENT_CALLS: usize = 1024;

#[derive(Debug)]
pub(crate) struct Admission {
    limit: usize,
    running: AtomicUsize,
    draining: AtomicBool,
    idle: Notify,
    /// Calls running, by caller: each caller's count is looked up when its connection opens
    /// ([`Admission::caller`]), so a request counts itself with atomics alone.
    by_caller: Shares<Arc<str>>,
}

/// A connection's hold on the count of calls its caller has running over all its connections.
pub(crate) type CallerCount = Share<Arc<str>>;

/// One admitted call; lets the next in when dropped.
pub(crate) struct Permit<'a> {
    admission: &'a Admission,
    caller: &'a CallerCount,
    /// Handed over to an [`OwnedPermit`], which lets go when it is dropped instead.
    detached: bool,
}

impl Admission {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            running: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            idle: Notify::new(),
            by_caller: Shares::default(),
        }
    }

    /// The count of `caller`'s running calls, for a connection of its to admit its calls
    /// against; an unnamed caller (a wire 1 connection) counts as one caller, "".
    pub(crate) fn caller(&self, caller: Option<&Arc<str>>) -> CallerCount {
        match caller {
            Some(name) => self.by_caller.of(name),
            None => self.by_caller.of(&Arc::from("")),
        }
    }

    /// Admits a call of `caller`, or says why not: the node is draining, at its limit, or in its
    /// reserve and the caller has its share running. Never queues.
    pub(crate) fn admit<'a>(
        &'a self,
        caller: &'a CallerCount,
    ) -> Result<Permit<'a>, (Reason, String)> {
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
                format!("the node runs as many calls as its limit, {}", self.limit),
            ));
        }
        let reserve = self.limit / 8;
        let share = (reserve / 8).max(1);
        // Counted first here too: two calls of one caller admitted at once see each other.
        let mine = caller.fetch_add(1, Ordering::SeqCst);
        if before >= self.limit - reserve && mine >= share {
            caller.fetch_sub(1, Ordering::SeqCst);
            self.release();
            return Err((
                Reason::Overloaded,
                format!(
                    "the node runs {before} calls, {mine} of them this caller's; its last {reserve} places are kept for callers with fewer than {share}"
                ),
            ));
        }
        Ok(Permit {
            admission: self,
            caller,
            detached: false,
        })
    }

    fn release(&self) {
        if self.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }

    pub(crate) fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Whether new calls are refused with `Draining`.
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
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

impl Permit<'_> {
    /// The same permit, owning its hold on `admission` (which must be the one it came from):
    /// for an at-most-once call's handler, which runs on after its attempt is given up
    /// (`server/record.rs`), and still counts as running.
    pub(crate) fn detach(mut self, admission: Arc<Admission>) -> OwnedPermit {
        debug_assert!(std::ptr::eq(self.admission, &*admission));
        self.detached = true;
        OwnedPermit {
            admission,
            caller: self.caller.count().clone(),
        }
    }
}

/// A [`Permit`] that owns its hold on the node's admission.
pub(crate) struct OwnedPermit {
    admission: Arc<Admission>,
    /// The caller's count, which this permit keeps even when its connections are all gone.
    caller: Arc<AtomicUsize>,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if !self.detached {
            self.admission.let_go(self.caller);
        }
    }
}

impl Drop for OwnedPermit {
    fn drop(&mut self) {
        self.admission.let_go(&self.caller);
    }
}

impl Admission {
    /// A call of `caller` has ended.
    fn let_go(&self, caller: &AtomicUsize) {
        caller.fetch_sub(1, Ordering::SeqCst);
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_refuses_before_running_and_never_queues() {
        let admission = Admission::new(2);
        let unnamed = admission.caller(None);
        let a = admission.admit(&unnamed).unwrap();
        let _b = admission.admit(&unnamed).unwrap();
        assert_eq!(
            admission.admit(&unnamed).err().unwrap().0,
            Reason::Overloaded
        );
        drop(a);
        assert!(admission.admit(&unnamed).is_ok());
    }

    #[test]
    fn past_seven_eighths_a_caller_with_its_share_running_is_refused_and_others_get_in() {
        let admission = Admission::new(64);
        // The hog over two connections, each with the count its caller shares.
        let hog = admission.caller(Some(&Arc::from("hog")));
        let hog_again = admission.caller(Some(&Arc::from("hog")));
        let other = admission.caller(Some(&Arc::from("web-1")));
        let mut held: Vec<_> = (0..56)
            .map(|n| {
                admission
                    .admit(if n % 2 == 0 { &hog } else { &hog_again })
                    .unwrap()
            })
            .collect();
        assert!(admission.admit(&hog_again).is_err());
        let refused = admission.admit(&hog).err().unwrap();
        assert_eq!(refused.0, Reason::Overloaded);
        assert!(
            refused.1.contains("56 of them this caller's"),
            "{}",
            refused.1
        );
        // The reserve of 8 goes one each to callers with none running.
        let a = admission.admit(&other).unwrap();
        assert!(admission.admit(&other).is_err(), "its share is 1");
        drop(a);
        assert_eq!(other.load(Ordering::SeqCst), 0, "refusals leave no count");
        held.pop();
        assert!(admission.admit(&hog).is_ok(), "back under seven eighths");
    }

    #[tokio::test(start_paused = true)]
    async fn draining_refuses_new_calls_and_waits_for_running_ones() {
        let admission = std::sync::Arc::new(Admission::new(8));
        let unnamed = admission.caller(None);
        let permit = admission.admit(&unnamed).unwrap();
        admission.drain();
        assert_eq!(admission.admit(&unnamed).err().unwrap().0, Reason::Draining);
        assert!(!admission.idle_within(Duration::from_millis(10)).await);
        drop(permit);
        assert!(admission.idle_within(Duration::from_millis(10)).await);
    }
}
