//! The node's background tasks (its listener, one task per connection, the registry's loops, a
//! service's supervisor), spawned boxed: tokio's task code is then compiled once for all of
//! them, not once per future type, which was a twelfth of this crate's generated code and of
//! every user's first build. A task spawned per request is not boxed here, because the box is
//! one more allocation on the call path.

use std::future::Future;
use std::pin::Pin;

use tokio::task::JoinHandle;

/// `tokio::spawn` of `task`, boxed.
pub(crate) fn spawn(task: impl Future<Output = ()> + Send + 'static) -> JoinHandle<()> {
    let boxed: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(task);
    tokio::spawn(boxed)
}
