//! One simulated host: a real `cluster::Node` with a gossip registry sealed with the cluster's
//! key, mutual TLS, and the `kv` service; on some hosts, a caller making steady calls.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cluster::Node;
use cluster::registry::{GossipConfig, GossipRegistry};
use serde::{Deserialize, Serialize};

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
/// it may have run on (`at_most_once`): each write and deposit records every run of it.
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
        self.run(id).await
    }

    async fn deposit(&self, id: u64) -> RanOn {
        self.run(id).await
    }
}

impl Store {
    /// A write or deposit's run, recorded under its id.
    async fn run(&self, id: u64) -> RanOn {
        // Counted when it starts: a run cut off half way may have had its effect.
        let ran = (self.ran_on.node.clone(), self.ran_on.generation);
        self.world
            .lock()
            .executions
            .entry(id)
            .or_default()
            .push(ran);
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
        tokio::spawn(calls(node.clone(), setup.world.clone()));
    }
    std::future::pending::<()>().await;
    Ok(())
}

/// Every 100 ms a read, a write and a deposit, each in its own task so that a slow one holds
/// no other.
async fn calls(node: Node, world: Arc<World>) {
    let client = KvClient::new(&node);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    for key in 0u64.. {
        tick.tick().await;
        let (read, world_r) = (client.clone(), world.clone());
        tokio::spawn(async move {
            let outcome = read.read(key).await;
            let mut state = world_r.lock();
            match outcome {
                Ok(_) => state.counts.reads_ok += 1,
                Err(_) => state.counts.failed += 1,
            }
        });
        for at_most_once in [false, true] {
            let (call, world) = (client.clone(), world.clone());
            tokio::spawn(async move {
                let id = world.next_id();
                let outcome = if at_most_once {
                    call.deposit(id).reported().await.map(|(ran, report)| {
                        let recalled = report.attempts.iter().any(|a| a.outcome.contains("record"));
                        (ran, recalled)
                    })
                } else {
                    call.write(id).await.map(|ran| (ran, false))
                };
                let mut state = world.lock();
                match outcome {
                    Ok((ran, recalled)) => {
                        state.counts.writes_ok += 1;
                        state.counts.recalled += u64::from(recalled);
                        // A write or deposit that returned ran exactly once, where it said (a
                        // deposit answered from a record: where it first ran).
                        let runs = state.executions.get(&id).cloned().unwrap_or_default();
                        if runs != [(ran.node.clone(), ran.generation)] {
                            let what = format!(
                                "invariant 3: {} {id} answered from {ran:?} but its runs were {runs:?}",
                                if at_most_once { "deposit" } else { "write" }
                            );
                            state.violations.push(what);
                        }
                    }
                    Err(_) => state.counts.failed += 1,
                }
            });
        }
    }
}
