//! Issue 14's liveness: a new node is in every lookup without waiting for gossip rounds, and a
//! silent node is suspect (a last resort) before it is dead (out of every lookup).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cluster::Node;
use cluster::registry::{GossipConfig, GossipRegistry, Registry};

use crate::support::{Engine, Mode, SearchServer, identity, keyring, providers, seen};

const SEC: Duration = Duration::from_secs(1);

async fn node_with(
    name: &str,
    seeds: &[SocketAddr],
    config: GossipConfig,
) -> (Node, GossipRegistry) {
    node_at(name, seeds, config, None)
        .await
        .expect("node starts")
}

/// A node serving `search`, calls on `rpc` if given.
async fn node_at(
    name: &str,
    seeds: &[SocketAddr],
    config: GossipConfig,
    rpc: Option<SocketAddr>,
) -> Result<(Node, GossipRegistry), cluster::StartError> {
    let config = config
        .keyring(keyring())
        .seeds(seeds.iter().map(|s| s.to_string()));
    let registry = GossipRegistry::new(config);
    let mut builder = Node::builder()
        .identity(identity(name))
        .registry(registry.clone());
    if let Some(rpc) = rpc {
        builder = builder.listen(rpc);
    }
    let node = builder.start().await?;
    let engine = std::sync::Arc::new(Engine::new(name, Mode::Answer));
    let _registration = node.serve(SearchServer::new(engine)).await.unwrap();
    Ok((node, registry))
}

fn free_udp() -> SocketAddr {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.local_addr().unwrap()
}

fn generation_of(registry: &GossipRegistry, name: &str) -> u64 {
    let nodes = registry.nodes();
    nodes.iter().find(|n| n.name == name).unwrap().generation
}

/// Whether `node` lists generation `generation` of `name` as a provider.
fn lists(node: &Node, name: &str, generation: u64) -> bool {
    node.registry()
        .lookup("search")
        .iter()
        .any(|e| e.node.name == name && e.node.generation == generation)
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

/// `a` at a gossip address of its own, seen by `b`, then killed and out of `b`'s lookups: its
/// gossip address, generation and call address, and `b`.
async fn a_dead_beside_b() -> (SocketAddr, u64, SocketAddr, Node, GossipRegistry) {
    let p = free_udp();
    let (a, a_registry) = node_with("a", &[], GossipConfig::new().listen(p)).await;
    let generation = generation_of(&a_registry, "a");
    let rpc = a.addr();
    let (b, b_registry) = node_with("b", &[p], GossipConfig::new()).await;
    seen(&b, 10 * SEC, |n| providers(n) == 2)
        .await
        .expect("b sees a");
    a.kill().await;
    seen(&b, 10 * SEC, |n| !lists(n, "a", generation))
        .await
        .expect("a is out of b's lookups");
    (p, generation, rpc, b, b_registry)
}

// From the outside review: a node at the address of a dead one (a restart at the same port, an
// IP recycled to another process) still lists the dead one in its digests. Only the newest
// generation at a datagram's source is its sender, heard first-hand; the dead one must not look
// live to a node that first hears of it from there.
#[tokio::test]
async fn a_dead_generation_at_a_restarted_nodes_address_never_looks_live_to_a_joiner() {
    let (p, g1, _, b, rb) = a_dead_beside_b().await;
    let (a2, _) = node_with(
        "a",
        &[rb.gossip_addr().unwrap()],
        GossipConfig::new().listen(p),
    )
    .await;
    seen(&b, 10 * SEC, |n| providers(n) == 2)
        .await
        .expect("b sees a again");
    let (joiner, _) = node_with("j", &[p], GossipConfig::new()).await;
    seen(&joiner, 10 * SEC, |n| providers(n) == 3)
        .await
        .expect("the joiner sees a, b and itself");
    assert!(
        seen(&joiner, 3 * SEC, |n| lists(n, "a", g1)).await.is_err(),
        "the dead generation is in the joiner's lookups"
    );
    for node in [joiner, a2, b] {
        node.kill().await;
    }
}

#[tokio::test]
async fn a_dead_node_whose_addresses_another_took_neither_looks_live_nor_blocks_its_restart() {
    let (p, g1, rpc, b, rb) = a_dead_beside_b().await;
    // `c` takes a's gossip and call addresses, and learns a's dead state from b.
    let (c, _) = node_at(
        "c",
        &[rb.gossip_addr().unwrap()],
        GossipConfig::new().listen(p),
        Some(rpc),
    )
    .await
    .expect("c starts");
    seen(&c, 10 * SEC, |n| providers(n) == 2)
        .await
        .expect("c sees b");
    let (joiner, _) = node_with("j", &[p], GossipConfig::new()).await;
    seen(&joiner, 10 * SEC, |n| providers(n) == 3)
        .await
        .expect("the joiner sees b, c and itself");
    assert!(
        seen(&joiner, 3 * SEC, |n| lists(n, "a", g1)).await.is_err(),
        "the dead `a` is in the joiner's lookups, at c's address"
    );
    // `a` restarts elsewhere, seeded by its old address, now c's: its claim must not take the
    // dead generation for a live holder (c accepts connections at a's old call address).
    let restarted = node_at("a", &[p], GossipConfig::new(), None).await;
    let restarted = restarted.unwrap_or_else(|e| panic!("a's restart was refused: {e}"));
    restarted.0.kill().await;
    for node in [joiner, c, b] {
        node.kill().await;
    }
}
