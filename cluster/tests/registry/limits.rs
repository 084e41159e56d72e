//! The bounds of `GossipConfig` (issue 11's audit, M2 and M4): what a peer can make a node
//! hold, what a node may register itself, and settings out of range refused by name.
//! `docs/registry.md` ("Limits") has the table.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cluster::ServiceDescription;
use cluster::registry::{GossipConfig, GossipRegistry, Registry, RegistryError, ServiceEntry};
use cluster::{Node, StartError};

use crate::forge::{Id, Ops, Peer, beat, description, digest_len, syn, victim};
use crate::support::until;

#[tokio::test]
async fn a_node_holds_at_most_max_nodes_however_many_ids_a_peer_names() {
    let (node, registry) = victim("victim", GossipConfig::new().max_nodes(50)).await;
    let peer = Peer::to(&registry).await;
    let forged: Vec<_> = (0..500)
        .map(|i| (Id::new(format!("n{i}"), 1, peer.addr()), 1))
        .collect();
    let reply = peer.syn_ack(&syn(&forged)).await.expect("answered");
    assert_eq!(digest_len(&reply), 50, "itself and 49 of them");
    assert_eq!(registry.refused_updates(), 451);
    node.shutdown().await;
}

/// A forged node `name`, up at the victim with `services` of about `size` bytes each.
async fn forged_provider(
    peer: &Arc<Peer>,
    name: &str,
    services: usize,
    size: usize,
) -> (Id, tokio::task::JoinHandle<()>) {
    let id = Id::new(name, 1, peer.addr());
    assert!(peer.syn_ack(&syn(&[(id.clone(), 1)])).await.is_some());
    let mut ops = Ops::default()
        .node(&id)
        .set("rpc", "127.0.0.1:9", 1)
        .set("status", "up", 2);
    for i in 0..services {
        let service = format!("{name}-{i}");
        ops = ops.set(
            &format!("svc:{service}"),
            &description(&service, size),
            3 + i as u64,
        );
    }
    peer.send(&ops.ack()).await;
    (id.clone(), beat(peer.clone(), id))
}

fn served_by(registry: &GossipRegistry, name: &str) -> usize {
    registry
        .services()
        .iter()
        .filter(|e| e.node.name == name)
        .count()
}

#[tokio::test]
async fn keys_and_bytes_past_the_per_node_limits_are_dropped_and_counted() {
    let config = GossipConfig::new()
        .max_keys_per_node(16)
        .max_entry_bytes(1024)
        .max_bytes_per_node(8 * 1024);
    let (node, registry) = victim("victim", config).await;
    let peer = Arc::new(Peer::to(&registry).await);
    // 40 small services: 16 keys kept, `rpc` and `status` among them.
    let (_, many) = forged_provider(&peer, "many", 40, 0).await;
    until("the forged node's services are seen", || {
        served_by(&registry, "many") == 14
    })
    .await;
    // 20 of about 1 KiB: what fits in 8 KiB.
    let (_, big) = forged_provider(&peer, "big", 20, 1000).await;
    until("the large ones are seen", || {
        served_by(&registry, "big") > 0
    })
    .await;
    assert!(peer.alive().await);
    assert_eq!(served_by(&registry, "many"), 14);
    assert!(
        (6..=7).contains(&served_by(&registry, "big")),
        "{}",
        served_by(&registry, "big")
    );
    assert!(registry.refused_updates() >= (40 - 14) + (20 - 7));
    many.abort();
    big.abort();
    node.shutdown().await;
}

fn entry(node: &Node, service: &str) -> ServiceEntry {
    let description: ServiceDescription =
        serde_json::from_str(&description(service, 0)).expect("a description");
    let info = cluster::registry::NodeInfo::new(node.name(), node.addr(), 1);
    ServiceEntry::new(info, Arc::new(description))
}

#[tokio::test]
async fn a_registration_past_the_nodes_own_limit_is_refused_by_name() {
    let (node, registry) = victim("victim", GossipConfig::new().max_keys_per_node(16)).await;
    let mut refused = None;
    for i in 0..16 {
        if let Err(e) = registry.register(entry(&node, &format!("s{i}"))).await {
            refused = Some((i, e));
            break;
        }
    }
    // `rpc`, `status`, `rev`, `frame`, `wire` and `chitchat.protocol`, and 10 services.
    let Some((
        10,
        RegistryError::NodeFull {
            setting,
            size,
            limit,
            ..
        },
    )) = refused
    else {
        panic!("{refused:?}");
    };
    assert_eq!((setting, size, limit), ("max_keys_per_node", 17, 16));
    node.shutdown().await;
}

async fn start_with(config: GossipConfig) -> Result<Node, StartError> {
    Node::builder()
        .name("n1")
        .insecure()
        .registry(GossipRegistry::new(config.insecure().cluster_id("test")))
        .start()
        .await
}

#[tokio::test]
async fn a_duration_out_of_range_is_refused_at_start_by_name() {
    let seed: SocketAddr = "127.0.0.1:9".parse().unwrap();
    for (config, setting) in [
        // Before: chitchat's `interval` panicked inside its task, and the node started.
        (
            GossipConfig::new().gossip_interval(Duration::ZERO),
            "gossip_interval",
        ),
        // Before: `5 * round` panicked in the claim.
        (
            GossipConfig::new()
                .gossip_interval(Duration::MAX)
                .seeds([seed]),
            "gossip_interval",
        ),
        // Before: `Instant + Duration::MAX` panicked once a node was dead.
        (
            GossipConfig::new().purge_after(Duration::MAX),
            "purge_after",
        ),
    ] {
        match start_with(config).await {
            Err(StartError::Registry(RegistryError::Gossip(why))) => {
                assert!(why.contains(&format!("GossipConfig::{setting} ")), "{why}");
            }
            other => panic!("{setting}: {other:?}"),
        }
    }
}
