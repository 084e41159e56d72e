//! Who provides what: the [`Registry`] trait every node reads its lookups from, the
//! in-process backend ([`MemoryRegistry`]) that several nodes of one process share, and the
//! gossip backend ([`GossipRegistry`]) that replicates between processes and machines.
//!
//! A registry is a local copy: [`Registry::lookup`] never leaves the node. `docs/registry.md`
//! explains how the copies converge and how fast.

mod entry;
pub(crate) mod gossip;
mod index;
mod memory;
mod summary;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::{broadcast, watch};

pub use entry::{NodeInfo, RegistryEvent, ServiceEntry};
pub use gossip::{GossipConfig, GossipRegistry, GossipTraffic};
pub use index::LocalCopy;
pub use memory::MemoryRegistry;
use semver::VersionReq;

/// A boxed future, as registry methods return them (the trait is used as `dyn Registry`).
pub type RegistryFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The registry a node looks providers up in and registers its own services with.
pub trait Registry: Send + Sync + 'static {
    /// Adds or replaces (same node, same service name) an entry, and tells every node.
    fn register(&self, entry: ServiceEntry) -> RegistryFuture<'_, Result<(), RegistryError>>;

    /// Removes the entry of `service` on `node`, and tells every node.
    fn deregister(
        &self,
        node: &str,
        service: &str,
    ) -> RegistryFuture<'_, Result<(), RegistryError>>;

    /// Told before [`join`](Self::join), by a node with an identity: the cluster its
    /// certificate is for. A backend bound to a cluster of its own (a gossip keyring's) refuses
    /// another. The default accepts any.
    fn bind_cluster(&self, cluster: &str) -> Result<(), RegistryError> {
        let _ = cluster;
        Ok(())
    }

    /// Told before [`join`](Self::join), by a node with an identity: the identity itself. A
    /// backend that proves names with certificates (the gossip registry's name claim) or signs
    /// what it publishes with the node's key (the gossip registry's state, `docs/security.md`,
    /// "Signed gossip") keeps it. The default binds the cluster its certificate is for
    /// ([`bind_cluster`](Self::bind_cluster)).
    fn bind_identity(&self, identity: &crate::Identity) -> Result<(), RegistryError> {
        self.bind_cluster(identity.cluster())
    }

    /// Adds a node (no services yet), so that others see it come up.
    fn join(&self, node: NodeInfo) -> RegistryFuture<'_, Result<(), RegistryError>>;

    /// Told once, when the node that joined has started, with the node itself: a backend that
    /// asks peers on the node's behalf (`cluster-discovery`'s resolver backend, through
    /// [`Node::describer`](crate::Node::describer)) starts from here. The default does nothing.
    fn started(&self, node: &crate::Node) {
        let _ = node;
    }

    /// Removes a node and every entry of it.
    fn leave(&self, node: &str) -> RegistryFuture<'_, Result<(), RegistryError>>;

    /// Stops offering a node's services to every node, while this node goes on reading the
    /// registry: the first step of a draining shutdown, whose running handlers may still call
    /// others. [`leave`](Self::leave) follows once they are done. The default withdraws each
    /// of the node's entries.
    fn withdraw(&self, node: &str) -> RegistryFuture<'_, Result<(), RegistryError>> {
        let node = node.to_owned();
        Box::pin(async move {
            for entry in self.services_on(&node) {
                self.deregister(&node, &entry.description.name).await?;
            }
            Ok(())
        })
    }

    /// The local copy every read below answers from. Every backend keeps one: lookups never
    /// leave the node. The call path reads it directly (its kept routes follow the copy's
    /// changes), so a backend's state reaches calls only through it.
    fn local_copy(&self) -> &LocalCopy;

    /// Until when a lookup that finds no entry may only mean that this node's copy has not yet
    /// heard from the rest of the cluster: a call that finds no provider before then waits for
    /// the copy to fill (within its budget), as if it had asked for `wait_for_provider`, rather
    /// than failing with `NoService` in a new node's first moments. `None` (the default) for a
    /// copy that is whole once its node has started.
    fn filling_until(&self) -> Option<tokio::time::Instant> {
        None
    }

    /// The entries named `service`, from the local copy. Cheap: no I/O, no allocation per entry.
    fn lookup(&self, service: &str) -> Arc<[Arc<ServiceEntry>]> {
        self.local_copy().lookup(service)
    }

    /// Every entry, from the local copy.
    fn services(&self) -> Vec<Arc<ServiceEntry>> {
        self.local_copy().services()
    }

    /// The nodes known to be up.
    fn nodes(&self) -> Vec<NodeInfo> {
        self.local_copy().nodes()
    }

    /// Service and node up/down events, from now on.
    fn events(&self) -> broadcast::Receiver<RegistryEvent> {
        self.local_copy().events()
    }

    /// A counter that changes whenever the registry does, for waiting on a provider to appear.
    fn changes(&self) -> watch::Receiver<u64> {
        self.local_copy().changes()
    }

    /// Stops replicating at once without telling anyone, as a crashed process would: the others
    /// find out through failure detection. For tests; a backend without replication does
    /// nothing.
    fn halt(&self) -> RegistryFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    /// [`halt`](Self::halt) for one node, as [`Node::kill`](crate::Node::kill) asks: a backend
    /// that several nodes of one process share (etcd's, a lease per node) stops only this
    /// node's part, and the others go on. The default halts the whole backend.
    fn halt_node(&self, node: &str) -> RegistryFuture<'_, ()> {
        let _ = node;
        self.halt()
    }

    /// The services of one node.
    fn services_on(&self, node: &str) -> Vec<Arc<ServiceEntry>> {
        self.services()
            .into_iter()
            .filter(|e| e.node.name == node)
            .collect()
    }

    /// The entries named `service` whose version meets `requirement` and that do not fail
    /// their health check, newest first.
    fn find(&self, service: &str, requirement: &VersionReq) -> Vec<Arc<ServiceEntry>> {
        let mut found: Vec<_> = self
            .lookup(service)
            .iter()
            .filter(|e| !e.failing && requirement.matches(&e.description.version))
            .cloned()
            .collect();
        found.sort_by(|a, b| b.description.version.cmp(&a.description.version));
        found
    }
}

/// A registry refused or failed an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistryError {
    /// The entry is larger than this backend can replicate.
    TooLarge {
        /// The service.
        service: String,
        /// Its encoded size.
        size: usize,
        /// The backend's limit.
        limit: usize,
    },
    /// The node's own entries would pass a limit its peers hold every node's state to (a
    /// gossip registry's `GossipConfig::max_keys_per_node` or `max_bytes_per_node`): they would
    /// drop the entry, so it is refused here.
    NodeFull {
        /// The service.
        service: String,
        /// The setting that bounds it.
        setting: &'static str,
        /// The node's keys or bytes with the entry.
        size: usize,
        /// The setting's value.
        limit: usize,
    },
    /// The backend has stopped, or has not started (a node joins it when it starts).
    Stopped,
    /// This backend holds only the entries of its own node.
    NotLocal {
        /// The node the entry names.
        node: String,
        /// The node this registry belongs to.
        own: String,
    },
    /// The replication engine could not start.
    Gossip(String),
    /// The store behind the registry (an etcd cluster) refused a request or did not answer, or
    /// its settings cannot reach it. The local copy still answers lookups.
    Unavailable(String),
    /// Another live process holds the node's name: the node does not start, and calls keep
    /// going to the holder.
    NameTaken {
        /// The name.
        name: String,
        /// Where its holder serves calls.
        holder: std::net::SocketAddr,
    },
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge {
                service,
                size,
                limit,
            } => write!(
                f,
                "the entry of service `{service}` is {size} bytes, more than the registry's limit of {limit}"
            ),
            Self::NodeFull {
                service,
                setting,
                size,
                limit,
            } => write!(
                f,
                "registering service `{service}` would take the node's gossip state to {size}, past GossipConfig::{setting} = {limit}"
            ),
            Self::Stopped => write!(f, "the registry is not running"),
            Self::NotLocal { node, own } => write!(
                f,
                "this registry replicates the entries of node `{own}`, not of node `{node}`"
            ),
            Self::Gossip(why) => write!(f, "gossip could not start: {why}"),
            Self::Unavailable(why) => write!(f, "the registry's store (etcd): {why}"),
            Self::NameTaken { name, holder } => write!(
                f,
                "node `{name}` is already up at {holder}: a name belongs to one live process"
            ),
        }
    }
}

impl std::error::Error for RegistryError {}
