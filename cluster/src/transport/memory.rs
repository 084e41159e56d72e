use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};

use tokio::time::Instant;

use super::{Reply, Request, TransportError};
use crate::server::Dispatcher;

/// An in-process network: nodes "listen" on made-up addresses and calls go straight to their
/// dispatcher, in the caller's task. For tests that need tokio's paused clock (real sockets and
/// paused time do not mix) and for the in-process examples. The real transport is TCP.
#[derive(Debug, Clone, Default)]
pub struct MemoryNetwork {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    nodes: Mutex<HashMap<SocketAddr, Weak<Dispatcher>>>,
    next_port: AtomicU16,
}

impl MemoryNetwork {
    /// An empty network.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn bind(&self, dispatcher: &Arc<Dispatcher>) -> SocketAddr {
        let port = self
            .inner
            .next_port
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        self.nodes().insert(addr, Arc::downgrade(dispatcher));
        addr
    }

    pub(crate) fn unbind(&self, addr: SocketAddr) {
        self.nodes().remove(&addr);
    }

    fn nodes(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, Weak<Dispatcher>>> {
        self.inner.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl MemoryNetwork {
    pub(crate) async fn send(
        &self,
        to: SocketAddr,
        request: Arc<Request>,
        deadline: Instant,
    ) -> Result<Reply, TransportError> {
        let target = self.nodes().get(&to).and_then(Weak::upgrade);
        let Some(dispatcher) = target else {
            return Err(TransportError::NotSent(format!(
                "connection refused: nothing listens on {to}"
            )));
        };
        // Dropping this future (the caller's timeout) drops the handler, as a real provider
        // does when the deadline that travels with the request passes.
        // No connection here to hold the caller's count: looked up per request.
        let caller = dispatcher.admission.caller(request.head.caller.as_ref());
        let handling = Contained(Some(Box::pin(
            dispatcher.handle(request, deadline, &caller),
        )));
        tokio::time::timeout_at(deadline, handling)
            .await
            .map_err(|_| TransportError::Timeout)
    }
}

/// The provider's side of one request, run in the caller's task as a connection's loop runs it
/// (`tcp/answering.rs`, `first_step`): a panic that escapes the dispatcher, or a handler whose
/// drop panics when the caller gives up, ends this request alone (no reply, so the caller's
/// timeout ends it), never the caller's task.
struct Contained<F: Future>(Option<Pin<Box<F>>>);

impl<F: Future> Future for Contained<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(handling) = self.0.as_mut() else {
            return Poll::Pending;
        };
        match catch_unwind(AssertUnwindSafe(|| handling.as_mut().poll(cx))) {
            Ok(polled) => polled,
            Err(panic) => {
                let message = crate::server::panic_message(&*panic);
                tracing::error!(
                    "a request's handler panicked outside the dispatcher's catch: {message}"
                );
                let left = self.0.take();
                let _ = catch_unwind(AssertUnwindSafe(move || drop((left, panic))));
                Poll::Pending
            }
        }
    }
}

impl<F: Future> Drop for Contained<F> {
    fn drop(&mut self) {
        let left = self.0.take();
        let _ = catch_unwind(AssertUnwindSafe(move || drop(left)));
    }
}
