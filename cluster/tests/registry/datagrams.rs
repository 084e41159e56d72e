//! Issue 14: gossip datagrams that no path fragments. The digest of every node goes in as many
//! datagrams of at most `GossipConfig::max_datagram` as it takes (`vendor/chitchat/src/parts.rs`).

use std::net::SocketAddr;
use std::time::Duration;

use cluster::registry::{GossipConfig, GossipRegistry, NodeInfo, Registry};

use crate::support::keyring;

/// `n` registries on sealed gossip, without nodes: each joins under a name like a pod's.
async fn cluster_of(n: usize, config: impl Fn() -> GossipConfig) -> Vec<GossipRegistry> {
    let mut registries: Vec<GossipRegistry> = Vec::new();
    for i in 0..n {
        let seeds: Vec<String> = registries
            .iter()
            .take(3)
            .filter_map(GossipRegistry::gossip_addr)
            .map(|a| a.to_string())
            .collect();
        let registry = GossipRegistry::new(
            config()
                .keyring(keyring())
                .cluster_id("datagrams")
                .seeds(seeds),
        );
        let rpc = SocketAddr::from(([127, 0, 0, 1], 20_000 + i as u16));
        registry
            .join(NodeInfo::new(format!("orders-7f9c4d-{i:05}"), rpc, 1))
            .await
            .expect("joins");
        registries.push(registry);
    }
    registries
}

async fn converged(registries: &[GossipRegistry]) {
    let n = registries.len();
    let all = || registries.iter().all(|r| r.nodes().len() == n);
    tokio::time::timeout(Duration::from_secs(60), async {
        while !all() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        let seen: Vec<usize> = registries.iter().map(|r| r.nodes().len()).collect();
        panic!("not every registry sees all {n}: {seen:?}")
    });
}

// Two workers: registries gossiping on one thread of a debug build starve each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_cluster_gossips_only_in_datagrams_within_max_datagram() {
    // 576 bytes: the digest of 32 nodes takes several datagrams (at the default 1,232 it takes
    // two from about 55 nodes on: `vendor/chitchat/src/tests_v2.rs` has 60 in one process).
    let registries = cluster_of(32, || GossipConfig::new().max_datagram(576)).await;
    converged(&registries).await;
    let (parts, bytes) = registries[0].digest_parts().await;
    assert!(
        parts >= 2,
        "32 nodes' digest takes {bytes} B in {parts} part(s)"
    );
    // Nothing new for five rounds: every datagram sent within 576 bytes, sealed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before: Vec<_> = registries.iter().map(GossipRegistry::traffic).collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (registry, before) in registries.iter().zip(before) {
        let after = registry.traffic();
        assert!(
            after.sent_datagrams > before.sent_datagrams + 10,
            "{before:?} {after:?}"
        );
        assert_eq!(
            after.oversized_datagrams, before.oversized_datagrams,
            "a datagram past 576 bytes with no news"
        );
    }
    for registry in registries {
        registry.halt().await;
    }
}
