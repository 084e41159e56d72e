//! One simulated host: a real `cluster::Node` with a gossip registry sealed with the cluster's
//! key, mutual TLS, and the `kv` service; on some hosts, a caller making steady calls.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cluster::Node;
use cluster::registry::{GossipConfig, GossipRegistry};
use serde::{Deserialize, Serialize};

use crate::calls::{Kind, Run, calls};
use crate::world::World;

/// Gossip port of every host.
pub const GOSSIP: u16 = 7280;
/// Call port of every host.
pub const RPC: u16 = 7300;

/// The process that ran a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RanOn {
    pub node: String,
    pub generation: u64,
}

/// A read safe to retry, a write that is not, and a deposit that is retried only on the process
/// it may have run on (`at_most_once`): each write and deposit records every run of it. The
/// budget is `calls::SERVICE_BUDGET`.
#[cluster::service(
    name = "kv",
    version = "1.0.0",
    timeout = "1s",
    retry(after = "100ms", budget = "4s")
)]
pub trait Kv {
    #[call(idempotent)]
    async fn read(&self, key: u64) -> RanOn;
    /// Not idempotent: `id` is unique in the run, so its runs can be counted across hosts.
    async fn write(&self, id: u64) -> RanOn;
    /// At most once: after it may have run, retried only where, and answered from the record.
    #[call(at_most_once)]
    async fn deposit(&self, id: u64) -> RanOn;
}

struct Store {
    ran_on: RanOn,
    world: Arc<World>,
}

impl Kv for Store {
    async fn read(&self, _key: u64) -> RanOn {
        self.ran_on.clone()
    }

    async fn write(&self, id: u64) -> RanOn {
        self.run(Kind::Write, id).await
    }

    async fn deposit(&self, id: u64) -> RanOn {
        self.run(Kind::Deposit, id).await
    }
}

impl Store {
    /// A write or deposit's run, recorded under its id and the call id the provider reads.
    async fn run(&self, kind: Kind, id: u64) -> RanOn {
        let run = Run {
            on: (self.ran_on.node.clone(), self.ran_on.generation),
            call_id: cluster::context().and_then(|c| c.call_id()),
        };
        self.world.lock().calls.ran(kind, id, run);
        // Long enough for a crash or a partition to catch some writes in flight.
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.ran_on.clone()
    }
}

/// What a host needs, shared by all its lives.
#[derive(Clone)]
pub struct Setup {
    pub name: String,
    pub seeds: Vec<String>,
    pub caller: bool,
    pub identity: cluster::Identity,
    pub keyring: cluster::Keyring,
    pub world: Arc<World>,
}

/// A host's software: starts the node, serves, calls if a caller; runs until crashed.
pub async fn run(setup: Setup) -> turmoil::Result {
    let ip = turmoil::lookup(setup.name.as_str());
    // Binding the host's own IP is refused by turmoil: listen on every interface and tell
    // peers the host's address.
    let gossip = GossipConfig::new()
        .keyring(setup.keyring.clone())
        .listen(SocketAddr::from(([0, 0, 0, 0], GOSSIP)))
        .advertise(SocketAddr::new(ip, GOSSIP))
        .seeds(setup.seeds.clone());
    let node = Node::builder()
        .identity(setup.identity.clone())
        .listen(SocketAddr::from(([0, 0, 0, 0], RPC)))
        .advertise(SocketAddr::new(ip, RPC))
        .registry(GossipRegistry::new(gossip))
        .start()
        .await?;
    let ran_on = RanOn {
        node: setup.name.clone(),
        generation: node.info().generation,
    };
    let store = Store {
        ran_on: ran_on.clone(),
        world: setup.world.clone(),
    };
    let _registration = node.serve(KvServer::new(store)).await?;
    setup
        .world
        .lock()
        .up(&setup.name, ran_on.generation, node.registry().clone());
    if setup.caller {
        tokio::spawn(calls(node.clone(), setup.name.clone(), setup.world.clone()));
    }
    std::future::pending::<()>().await;
    Ok(())
}
