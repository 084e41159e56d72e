//! A request to etcd takes no time on tokio's paused clock.
//!
//! The core's call-path tests run on a paused clock (`tokio::time::pause`), which jumps to the
//! next timer whenever every task waits. A registry write waiting on etcd's real socket would
//! let it jump: a retry's pause or a call's deadline would pass "during" a registration that
//! the in-process registry makes at one instant. Tokio does not jump while a blocking task
//! runs, so each request to etcd keeps one parked for as long as it is out. Only on a
//! current-thread runtime (the one a paused clock needs); elsewhere this does nothing.

use std::future::Future;
use std::sync::mpsc;

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs `request` with the paused clock held still.
pub(crate) async fn held<F: Future>(request: F) -> F::Output {
    let _still = Still::new();
    request.await
}

/// Dropping it (the sender) ends the parked task.
struct Still {
    _release: Option<mpsc::Sender<()>>,
}

impl Still {
    fn new() -> Self {
        let current_thread =
            Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::CurrentThread);
        if !current_thread {
            return Self { _release: None };
        }
        let (release, released) = mpsc::channel::<()>();
        // Parked until the sender is dropped: `recv` then fails and the task ends.
        tokio::task::spawn_blocking(move || {
            let _ = released.recv();
        });
        Self {
            _release: Some(release),
        }
    }
}
