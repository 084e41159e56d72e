//! The core's test support, with its clusters on a real etcd: one per test (tests run on a
//! thread each, and each thread starts its own), stopped when the test ends.
#![allow(dead_code, unreachable_pub)]

#[path = "../../../cluster/tests/support/mod.rs"]
mod core_support;
pub mod proxy;
pub mod server;

pub use core_support::*;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cluster::Node;
use cluster_etcd::{EtcdConfig, EtcdRegistry};
use server::Etcd;

thread_local! {
    static ETCD: RefCell<Option<Rc<RefCell<Etcd>>>> = const { RefCell::new(None) };
}

/// This test's etcd, started on first use.
pub fn etcd() -> Rc<RefCell<Etcd>> {
    ETCD.with(|e| {
        e.borrow_mut()
            .get_or_insert_with(|| Rc::new(RefCell::new(Etcd::start())))
            .clone()
    })
}

/// A registry on this test's etcd under `prefix`, with a short lease.
pub fn registry_at(prefix: &str) -> EtcdRegistry {
    EtcdRegistry::new(
        EtcdConfig::new([etcd().borrow().endpoint()])
            .plaintext()
            .prefix(prefix)
            .lease_ttl(Duration::from_secs(2)),
    )
}

/// The core tests' cluster, on etcd instead of the in-process registry.
pub type Cluster = TestCluster<EtcdRegistry>;

impl TestRegistry for EtcdRegistry {
    fn fresh() -> Self {
        // A prefix of its own: two clusters of one test do not see each other.
        static N: AtomicU64 = AtomicU64::new(0);
        registry_at(&format!("/t{}", N.fetch_add(1, Ordering::Relaxed)))
    }
}

/// What the deploy table's tests get back for a node's registry: an etcd registry of its own,
/// as a process would have. They ask it for a seed to give the next node; on etcd the seed is
/// etcd itself, and is not needed.
#[derive(Clone)]
pub struct OwnRegistry(pub EtcdRegistry);

impl OwnRegistry {
    pub fn gossip_addr(&self) -> Option<std::net::SocketAddr> {
        Some(etcd().borrow().client)
    }
}

/// A node on real TCP with an etcd registry of its own (as a process of its own would have),
/// on this test's etcd. `seeds` are the gossip backend's and are not needed here.
pub async fn gossip_node(name: &str, _seeds: &[std::net::SocketAddr]) -> (Node, OwnRegistry) {
    let registry = registry_at("/deploys");
    let node = Node::builder()
        .identity(identity(name))
        .registry(registry.clone())
        .start()
        .await
        .expect("node starts");
    (node, OwnRegistry(registry))
}

/// An etcd node serving an [`Engine`].
pub async fn gossip_provider(
    name: &str,
    seeds: &[std::net::SocketAddr],
    mode: Mode,
) -> (Node, Arc<Engine>, std::net::SocketAddr) {
    let (node, registry) = gossip_node(name, seeds).await;
    let engine = Arc::new(Engine::new(name, mode));
    let _registration = node
        .serve(SearchServer::new(engine.clone()))
        .await
        .expect("serves");
    (node, engine, registry.gossip_addr().expect("an address"))
}
