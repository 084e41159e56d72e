//! Who provides what: the [`Registry`] trait every node reads its lookups from, and the
//! in-process backend ([`MemoryRegistry`]) that several nodes of one process share.
//!
//! A registry is a local copy: [`Registry::lookup`] never leaves the node. Backends that
//! replicate between processes (gossip) implement the same trait.

mod entry;
mod memory;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::{broadcast, watch};

pub use entry::{NodeInfo, RegistryEvent, ServiceEntry};
pub use memory::MemoryRegistry;

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

    /// Adds a node (no services yet), so that others see it come up.
    fn join(&self, node: NodeInfo) -> RegistryFuture<'_, Result<(), RegistryError>>;

    /// Removes a node and every entry of it.
    fn leave(&self, node: &str) -> RegistryFuture<'_, Result<(), RegistryError>>;

    /// The entries named `service`, from the local copy. Cheap: no I/O, no allocation per entry.
    fn lookup(&self, service: &str) -> Arc<[Arc<ServiceEntry>]>;

    /// Every entry, from the local copy.
    fn services(&self) -> Vec<Arc<ServiceEntry>>;

    /// The nodes known to be up.
    fn nodes(&self) -> Vec<NodeInfo>;

    /// Service and node up/down events, from now on.
    fn events(&self) -> broadcast::Receiver<RegistryEvent>;

    /// A counter that changes whenever the registry does, for waiting on a provider to appear.
    fn changes(&self) -> watch::Receiver<u64>;
}

/// A registry refused or failed an operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The entry is larger than this backend can replicate.
    #[error(
        "the entry of service `{service}` is {size} bytes, more than the registry's limit of {limit}"
    )]
    TooLarge {
        /// The service.
        service: String,
        /// Its encoded size.
        size: usize,
        /// The backend's limit.
        limit: usize,
    },
    /// The backend has stopped.
    #[error("the registry has stopped")]
    Stopped,
}
