use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use super::{Listener, Node, NodeInner};
use crate::client::peers::{DEFAULT_COOLDOWN, Peers};
use crate::registry::{MemoryRegistry, NodeInfo, Registry, RegistryError};
use crate::server::{DEFAULT_MAX_CONCURRENT_CALLS, Dispatcher};
use crate::transport::tcp::{self, TcpConnector};
use crate::transport::{Connector, DEFAULT_MAX_FRAME, ENVELOPE_OVERHEAD, MemoryNetwork};

/// Configures and starts a [`Node`].
///
/// | setting | default |
/// |---|---|
/// | `name` | `node-<generation>` |
/// | `listen` | `127.0.0.1:0` (a port the OS picks) |
/// | `registry` | a private [`MemoryRegistry`]: the node sees only itself |
/// | `memory` | off: real TCP |
/// | `max_frame` | 8 MiB |
/// | `outlier_cooldown` | 2 s |
/// | `max_concurrent_calls` | 1024: more are refused before they run, never queued |
/// | `drain_timeout` | 30 s: how long a shutdown waits for running calls |
#[derive(Default)]
#[must_use]
pub struct NodeBuilder {
    name: Option<String>,
    listen: Option<SocketAddr>,
    registry: Option<Arc<dyn Registry>>,
    memory: Option<MemoryNetwork>,
    max_frame: Option<usize>,
    outlier_cooldown: Option<Duration>,
    max_concurrent_calls: Option<usize>,
    drain_timeout: Option<Duration>,
}

/// A node could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The listener could not be bound.
    #[error("cannot listen on {addr}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The registry refused the node.
    #[error("the registry refused the node")]
    Registry(#[from] RegistryError),
}

impl NodeBuilder {
    /// The node's name, unique in the cluster.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The address to serve calls on.
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = Some(addr);
        self
    }

    /// The registry to share with the other nodes.
    pub fn registry(mut self, registry: impl Registry) -> Self {
        self.registry = Some(Arc::new(registry));
        self
    }

    /// Uses an in-process network instead of TCP (tests with a paused clock).
    pub fn memory(mut self, network: &MemoryNetwork) -> Self {
        self.memory = Some(network.clone());
        self
    }

    /// The largest frame this node sends or accepts, in bytes.
    pub fn max_frame(mut self, bytes: usize) -> Self {
        self.max_frame = Some(bytes);
        self
    }

    /// How long a peer whose connection failed is passed over while others can serve.
    pub fn outlier_cooldown(mut self, cooldown: Duration) -> Self {
        self.outlier_cooldown = Some(cooldown);
        self
    }

    /// The most calls that run at once here; more are refused with `Overloaded` before they
    /// run, and clients retry them elsewhere.
    pub fn max_concurrent_calls(mut self, limit: usize) -> Self {
        self.max_concurrent_calls = Some(limit);
        self
    }

    /// How long [`Node::shutdown`] waits for running calls to finish.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = Some(timeout);
        self
    }

    /// Starts listening and joins the registry.
    pub async fn start(self) -> Result<Node, StartError> {
        let generation = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let max_frame = self.max_frame.unwrap_or(DEFAULT_MAX_FRAME);
        let dispatcher = Arc::new(Dispatcher::new(
            max_frame.saturating_sub(ENVELOPE_OVERHEAD),
            self.max_concurrent_calls
                .unwrap_or(DEFAULT_MAX_CONCURRENT_CALLS),
        ));
        let registry = self
            .registry
            .unwrap_or_else(|| Arc::new(MemoryRegistry::new()));

        let (addr, listener, connector): (SocketAddr, Listener, Connector) = match self.memory {
            Some(network) => {
                let addr = network.bind(&dispatcher);
                (
                    addr,
                    Listener::Memory {
                        network: network.clone(),
                    },
                    Connector::Memory(network),
                )
            }
            None => {
                let addr = self
                    .listen
                    .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
                let (stop, stopped) = watch::channel(false);
                let (local, task) = tcp::serve(addr, dispatcher.clone(), max_frame, stopped)
                    .await
                    .map_err(|source| StartError::Listen { addr, source })?;
                (
                    local,
                    Listener::Tcp { stop, task },
                    Connector::Tcp(TcpConnector::new(max_frame)),
                )
            }
        };
        let name = self.name.unwrap_or_else(|| format!("node-{generation}"));
        let info = NodeInfo::new(name, addr, generation).with_max_frame(Some(max_frame));
        registry.join(info.clone()).await?;
        tracing::info!("node {info} started");
        Ok(Node {
            inner: Arc::new(NodeInner {
                info,
                registry,
                connector,
                max_frame,
                peers: Peers::new(self.outlier_cooldown.unwrap_or(DEFAULT_COOLDOWN)),
                dispatcher,
                supervisors: Mutex::default(),
                stopped: Default::default(),
                drain_timeout: self.drain_timeout.unwrap_or(Duration::from_secs(30)),
                listener: Mutex::new(Some(listener)),
            }),
        })
    }
}
