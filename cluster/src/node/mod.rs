//! A node: serves its own services, calls others', and holds the registry copy both use.

mod builder;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

pub use builder::{NodeBuilder, StartError};

use crate::client::peers::Peers;
use crate::registry::{NodeInfo, Registry, RegistryError, ServiceEntry};
use crate::server::{Dispatcher, Provide};
use crate::transport::{Connector, MemoryNetwork};

/// A member of the cluster. Cheap to clone: clones share the node.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let node = cluster::Node::builder().name("search-1").start().await?;
/// println!("{} listens on {}", node.name(), node.addr());
/// node.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Node {
    pub(crate) inner: Arc<NodeInner>,
}

pub(crate) struct NodeInner {
    pub(crate) info: NodeInfo,
    pub(crate) registry: Arc<dyn Registry>,
    pub(crate) connector: Arc<dyn Connector>,
    pub(crate) max_frame: usize,
    pub(crate) peers: Peers,
    dispatcher: Arc<Dispatcher>,
    served: Mutex<Vec<String>>,
    listener: Mutex<Option<Listener>>,
}

enum Listener {
    Tcp {
        stop: watch::Sender<bool>,
        task: tokio::task::JoinHandle<()>,
    },
    Memory {
        network: MemoryNetwork,
    },
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("name", &self.inner.info.name)
            .field("addr", &self.inner.info.addr)
            .finish()
    }
}

/// A service served by a node. Dropping it keeps the service registered; call
/// [`Registration::deregister`] to withdraw it.
#[derive(Debug)]
#[must_use = "dropping a Registration keeps the service up; keep it to deregister later"]
pub struct Registration {
    node: Node,
    service: String,
}

impl Registration {
    /// The service's name.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// Removes the service from the registry (every node stops routing to it), then stops
    /// serving it here. Calls already running finish.
    pub async fn deregister(self) -> Result<(), RegistryError> {
        let inner = &self.node.inner;
        let result = inner
            .registry
            .deregister(&inner.info.name, &self.service)
            .await;
        inner.dispatcher.unhost(&self.service);
        inner
            .served
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|s| s != &self.service);
        result
    }
}

impl Node {
    /// Configures a node.
    pub fn builder() -> NodeBuilder {
        NodeBuilder::default()
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.inner.info.name
    }

    /// Where the node serves calls.
    pub fn addr(&self) -> SocketAddr {
        self.inner.info.addr
    }

    /// The node as the registry knows it.
    pub fn info(&self) -> &NodeInfo {
        &self.inner.info
    }

    /// The registry this node reads and writes.
    pub fn registry(&self) -> &Arc<dyn Registry> {
        &self.inner.registry
    }

    /// Serves a provider here and registers it, so that every node can route calls to it.
    pub async fn serve<P: Provide>(&self, provider: P) -> Result<Registration, RegistryError> {
        let description = provider.description();
        let service = description.name.clone();
        self.inner.dispatcher.host(Arc::new(provider));
        let entry = ServiceEntry::new(self.inner.info.clone(), Arc::new(description.clone()));
        if let Err(e) = self.inner.registry.register(entry).await {
            self.inner.dispatcher.unhost(&service);
            return Err(e);
        }
        self.inner
            .served
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(service.clone());
        Ok(Registration {
            node: self.clone(),
            service,
        })
    }

    /// Leaves cleanly: withdraws every service and the node from the registry first, so that no
    /// client is routed here any more, then closes the listener and every connection.
    pub async fn shutdown(&self) {
        if let Err(e) = self.inner.registry.leave(&self.inner.info.name).await {
            tracing::warn!("node {} could not leave the registry: {e}", self.inner.info);
        }
        self.inner
            .served
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.stop_listening().await;
        tracing::info!("node {} stopped", self.inner.info);
    }

    /// Stops at once without telling the registry, as a crashed node would: connections close,
    /// handlers are dropped, and the registry keeps listing the node until it notices. For tests.
    pub async fn kill(&self) {
        self.inner.registry.halt().await;
        self.stop_listening().await;
    }

    async fn stop_listening(&self) {
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
    }
}
