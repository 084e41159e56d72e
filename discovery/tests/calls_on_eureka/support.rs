//! The core's test support, with its `Cluster` on an in-process Eureka server instead of the
//! in-process registry.
#![allow(dead_code, unreachable_pub)]

#[path = "../../../cluster/tests/support/mod.rs"]
mod core_support;

pub use core_support::*;

use std::sync::Arc;
use std::time::Duration;

use cluster::{MemoryNetwork, Node};
use cluster_discovery::backend::{EurekaRegistry, EurekaRegistryConfig};
use cluster_discovery::client::EurekaClient;
use cluster_discovery::server::{Clock, RegistryServer, Service};

/// A registry backend on `server`, as one process of the cluster would have it.
pub fn eureka_registry(server: &Service) -> EurekaRegistry {
    let mut config = EurekaRegistryConfig::default();
    config.fetch_interval = Duration::from_secs(1);
    EurekaRegistry::new(EurekaClient::in_process(server.clone()), config)
}

/// A registry server on tokio's clock (paused in the paused tests).
pub fn eureka_server() -> Service {
    RegistryServer::new().clock(Clock::tokio()).service()
}

/// A cluster in one process whose registry is a Eureka server, and an in-memory or a TCP
/// network.
pub struct Cluster {
    pub server: Service,
    pub registry: EurekaRegistry,
    pub memory: Option<MemoryNetwork>,
}

impl Cluster {
    /// Nodes on the in-memory network: for tests on tokio's paused clock.
    pub fn memory() -> Self {
        let server = eureka_server();
        Self {
            registry: eureka_registry(&server),
            server,
            memory: Some(MemoryNetwork::new()),
        }
    }

    /// Nodes on real TCP sockets on loopback, ports from the OS.
    pub fn tcp() -> Self {
        let server = eureka_server();
        Self {
            registry: eureka_registry(&server),
            server,
            memory: None,
        }
    }

    pub fn registry_events(
        &self,
    ) -> tokio::sync::broadcast::Receiver<cluster::registry::RegistryEvent> {
        cluster::Registry::events(&self.registry)
    }

    pub fn registry_is_empty(&self) -> bool {
        cluster::Registry::services(&self.registry).is_empty()
    }

    pub async fn node(&self, name: &str) -> Node {
        let builder = Node::builder().name(name).registry(self.registry.clone());
        let builder = match &self.memory {
            Some(net) => builder.memory(net),
            None => builder,
        };
        builder.start().await.expect("node starts")
    }

    /// A node serving an [`Engine`] in `mode`.
    pub async fn provider(&self, name: &str, mode: Mode) -> (Node, Arc<Engine>) {
        let node = self.node(name).await;
        let engine = Arc::new(Engine::new(name, mode));
        let _registration = node
            .serve(SearchServer::new(engine.clone()))
            .await
            .expect("serves");
        (node, engine)
    }
}
