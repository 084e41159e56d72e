//! A node: serves its own services, calls others', and holds the registry copy both use.

mod builder;
mod describe;
mod health;
mod metrics;
mod serve;
mod shutdown;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

pub use builder::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_FRAME_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION, NodeBuilder, StartError,
};
pub use describe::{DescribeError, Described, Describer};
pub use health::{Health, ServiceStatus};
pub use serve::Registration;
use serve::Supervisor;

use crate::client::peers::Peers;
use crate::context::RequestId;
use crate::layer::ClientLayer;
use crate::registry::{NodeInfo, Registry};
use crate::server::Dispatcher;
use crate::transport::{Connector, MemoryNetwork};

/// A member of the cluster. Cheap to clone: clones share the node.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// // `certs/` as `cluster-node init` and `cluster-node issue search-1` wrote it.
/// let identity = cluster::Identity::from_dir("certs", "search-1")?;
/// let node = cluster::Node::builder().identity(identity).start().await?;
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
    // The node's name as every request it sends carries it: shared, not copied per call.
    pub(crate) name: Arc<str>,
    // The wire versions it speaks.
    pub(crate) wire: std::ops::RangeInclusive<u32>,
    // Numbers the request ids of calls made here.
    requests: std::sync::atomic::AtomicU64,
    pub(crate) client_layers: Arc<[Arc<dyn ClientLayer>]>,
    pub(crate) registry: Arc<dyn Registry>,
    pub(crate) connector: Connector,
    pub(crate) max_frame: usize,
    pub(crate) peers: Peers,
    dispatcher: Arc<Dispatcher>,
    // The supervisor of each service served here (health checks, bound tasks).
    supervisors: Mutex<Vec<Supervisor>>,
    // Set once the node has shut down or been killed: its clients fail at once.
    pub(crate) stopped: std::sync::atomic::AtomicBool,
    listener: Mutex<Option<Listener>>,
    drain_timeout: std::time::Duration,
    // Metrics (`crate::meters`): `None` when off, and the call path then pays one branch.
    pub(crate) meters: Option<Arc<crate::meters::Meters>>,
    // What the metrics read when rendered: the listener's connections, the gossip registry's
    // traffic (when the registry is one).
    incoming: Option<crate::transport::tcp::Incoming>,
    gossip: Option<crate::registry::GossipRegistry>,
    metrics_addr: Option<SocketAddr>,
    metrics_endpoint: Mutex<Option<metrics::Endpoint>>,
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

impl Node {
    /// Configures a node.
    pub fn builder() -> NodeBuilder {
        NodeBuilder::default()
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.inner.info.name
    }

    /// Where other nodes call this one: the address it advertises ([`NodeBuilder::advertise`]),
    /// which is the one it listens on unless that was set.
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
}

impl NodeInner {
    /// A request id no other call in the cluster has: this process's generation and a count.
    pub(crate) fn next_request_id(&self) -> RequestId {
        let n = self
            .requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        RequestId::new(self.info.generation, n)
    }
}
