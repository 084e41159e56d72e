//! Issue 14's liveness: a new node is in every lookup without waiting for gossip rounds, and a
//! silent node is suspect (a last resort) before it is dead (out of every lookup).

use std::time::{Duration, Instant};

use cluster::Node;
use cluster::registry::{GossipConfig, GossipRegistry};

use crate::support::{Engine, Mode, SearchServer, identity, keyring, providers, seen};

const SEC: Duration = Duration::from_secs(1);

async fn node_with(
    name: &str,
    seeds: &[std::net::SocketAddr],
    config: GossipConfig,
) -> (Node, GossipRegistry) {
    let config = config
        .keyring(keyring())
        .seeds(seeds.iter().map(|s| s.to_string()));
    let registry = GossipRegistry::new(config);
    let node = Node::builder()
        .identity(identity(name))
        .registry(registry.clone())
        .start()
        .await
        .expect("node starts");
    let engine = std::sync::Arc::new(Engine::new(name, Mode::Answer));
    let _registration = node.serve(SearchServer::new(engine)).await.unwrap();
    (node, registry)
}

#[tokio::test]
async fn a_cluster_forms_and_every_provider_is_seen_by_pushes_alone() {
    // A gossip round every hour: past each node's first exchange with its seed (at start),
    // only what a node pushes when it starts and registers can carry anything.
    let hourly = || GossipConfig::new().gossip_interval(Duration::from_secs(3600));
    let first = node_with("n0", &[], hourly()).await;
    let seed = first.1.gossip_addr().unwrap();
    let mut nodes = vec![first];
    for i in 1..6 {
        nodes.push(node_with(&format!("n{i}"), &[seed], hourly()).await);
    }
    for (node, _) in &nodes {
        let took = seen(node, 10 * SEC, |n| providers(n) == 6)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{} sees {} of 6 providers without a gossip round",
                    node.name(),
                    providers(node)
                )
            });
        println!("{} saw all six after {took:?}", node.name());
    }
    for (node, _) in nodes {
        node.kill().await;
    }
}

#[tokio::test]
async fn a_silent_node_is_suspect_first_and_out_of_lookups_only_after_dead_after() {
    let config = || {
        GossipConfig::new()
            .gossip_interval(Duration::from_millis(50))
            .phi_threshold(3.0)
            .dead_after(SEC)
    };
    let (watcher, watcher_registry) = node_with("w", &[], config()).await;
    let seed = watcher_registry.gossip_addr().unwrap();
    let (silent, _) = node_with("s", &[seed], config()).await;
    seen(&watcher, 10 * SEC, |n| providers(n) == 2)
        .await
        .expect("both seen");

    let suspect = |n: &Node| {
        n.registry()
            .lookup("search")
            .iter()
            .any(|e| e.node.name == "s" && e.suspect)
    };
    let halted = Instant::now();
    silent.kill().await; // its gossip stops: no more heartbeats
    seen(&watcher, 10 * SEC, suspect)
        .await
        .expect("suspect while silent");
    let suspected = halted.elapsed();
    seen(&watcher, 10 * SEC, |n| providers(n) == 1)
        .await
        .expect("dead at last");
    let dead = halted.elapsed();
    println!("suspect after {suspected:?}, dead after {dead:?}");
    // Its last heartbeat reached the watcher at most a round or two before the kill.
    assert!(
        dead >= Duration::from_millis(850),
        "out of lookups after {dead:?} of silence, before dead_after (1 s)"
    );
    watcher.kill().await;
}
