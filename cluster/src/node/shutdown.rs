//! Leaving cleanly: out of every lookup first, then refuse new calls, finish running ones (which
//! may still call others: the node keeps its registry copy until then), leave, close. And the
//! crash, for tests.

use std::time::Duration;

use super::{Listener, Node};

/// How long a drained node keeps answering `Draining` before it closes its connections, for a
/// client that chose it just before it heard of the departure: such a call is refused before
/// it runs (and retried elsewhere) instead of being cut off mid-flight.
const LINGER: Duration = Duration::from_millis(100);

impl Node {
    /// Leaves cleanly, each step logged:
    ///
    /// 1. withdraws every service of the node from the registry and propagates that (clients
    ///    stop choosing this node), while the node keeps reading the registry;
    /// 2. refuses new calls with `Draining`, which clients retry elsewhere for any function,
    ///    since the function never ran;
    /// 3. lets running calls finish, up to the drain timeout: a handler that calls another
    ///    service meanwhile still finds its providers;
    /// 4. leaves the registry, then closes the listener and every connection.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        tracing::info!(
            "node {} is draining: leaving the registry so that clients stop choosing it",
            inner.info
        );
        self.stop_supervisors().await;
        if let Err(e) = inner.registry.withdraw(&inner.info.name).await {
            tracing::warn!(
                "node {} could not withdraw from the registry: {e}",
                inner.info
            );
        }
        let admission = &inner.dispatcher.admission;
        admission.drain();
        tracing::info!(
            "node {} refuses new calls; waiting for {} running calls (at most {:?})",
            inner.info,
            admission.running(),
            inner.drain_timeout
        );
        if !admission.idle_within(inner.drain_timeout).await {
            tracing::warn!(
                "node {}: {} calls still running after the drain timeout are cut off",
                inner.info,
                admission.running()
            );
        }
        inner.dispatcher.stop_detached();
        tokio::time::sleep(LINGER).await;
        if let Err(e) = inner.registry.leave(&inner.info.name).await {
            tracing::warn!("node {} could not leave the registry: {e}", inner.info);
        }
        self.stop_listening().await;
        tracing::info!("node {} stopped", inner.info);
    }

    /// Waits for SIGTERM or ctrl-c, then [`shutdown`](Self::shutdown)s.
    pub async fn shutdown_on_signal(&self) {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            match signal(SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = term.recv() => tracing::info!("node {} got SIGTERM", self.inner.info),
                        _ = tokio::signal::ctrl_c() => tracing::info!("node {} got ctrl-c", self.inner.info),
                    }
                }
                Err(e) => {
                    tracing::warn!("no SIGTERM handler ({e}); waiting for ctrl-c only");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        self.shutdown().await;
    }

    /// Stops at once without telling anyone, as a crashed node would: gossip stops, connections
    /// close, running handlers are dropped, and the others find out through failure detection
    /// (a `MemoryRegistry` has none: the node's entries stay in it). For tests.
    pub async fn kill(&self) {
        self.inner.dispatcher.stop_detached();
        self.stop_supervisors().await;
        self.inner.registry.halt_node(self.name()).await;
        self.stop_listening().await;
    }

    async fn stop_supervisors(&self) {
        let supervisors: Vec<_> = self
            .inner
            .supervisors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for supervisor in supervisors {
            supervisor.stop().await;
        }
    }

    async fn stop_listening(&self) {
        self.inner
            .stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.inner.connector.close();
        let listener = self
            .inner
            .listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        match listener {
            Some(Listener::Tcp { stop, task }) => {
                let _ = stop.send(true);
                let _ = task.await;
            }
            Some(Listener::Memory { network }) => network.unbind(self.inner.info.addr),
            None => {}
        }
        let endpoint = self
            .inner
            .metrics_endpoint
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(endpoint) = endpoint {
            endpoint.stop().await;
        }
    }
}
