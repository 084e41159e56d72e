use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, Weak};

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
        tokio::time::timeout_at(deadline, dispatcher.handle(request, deadline, &caller))
            .await
            .map_err(|_| TransportError::Timeout)
    }
}
