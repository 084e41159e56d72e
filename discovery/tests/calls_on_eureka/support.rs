//! The core's test support, with its `Cluster` on an in-process Eureka server instead of the
//! in-process registry.
#![allow(dead_code, unreachable_pub)]

#[path = "../../../cluster/tests/support/mod.rs"]
mod core_support;

pub use core_support::*;

use std::time::Duration;

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

/// The core tests' cluster, on an in-process Eureka server instead of the in-process registry.
pub type Cluster = TestCluster<EurekaRegistry>;

impl TestRegistry for EurekaRegistry {
    fn fresh() -> Self {
        eureka_registry(&eureka_server())
    }
}
