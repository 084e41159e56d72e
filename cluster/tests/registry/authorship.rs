//! Issue 35: gossip proves membership, not authorship. A member holding the gossip key and its
//! own valid certificate, running a build of its own, publishes state under another node's
//! name: a tombstone for its entry, `status = leaving`, another `rpc` address, and its heartbeat
//! pinned at 2^64 (`GossipRegistry::__forge`, which signs what it changed with the liar's own
//! key and pushes it to every peer). On a sealed cluster every node signs its own state and
//! every receiver checks it (`cluster/src/registry/gossip/authorship.rs`): nothing changes, the
//! lies are counted, and the victim keeps being found and answering. On an `insecure()`
//! cluster, where nothing is signed, the same lie takes the victim out of every lookup: the
//! attack is real.

use std::net::SocketAddr;
use std::time::Duration;

use cluster::Node;
use cluster::registry::{GossipConfig, GossipRegistry, Registry};

use crate::support::{Engine, Mode, SearchClient, SearchServer, gossip_node, until};

/// What the liar says of the victim.
async fn lie(liar: &GossipRegistry, victim: &str) {
    assert!(
        liar.__forge(victim, Some(u64::MAX), |state| {
            state.delete("svc:search");
            state.set("status", "leaving");
            state.set("rpc", "127.0.0.1:1");
        })
        .await,
        "the liar knows the victim"
    );
}

/// The victim's entry for `search` as `node` sees it: its address.
fn victim_entry(node: &Node, victim: &str) -> Option<SocketAddr> {
    node.registry()
        .lookup("search")
        .iter()
        .find(|e| e.node.name == victim)
        .map(|e| e.node.addr)
}

async fn serve(node: &Node) {
    let engine = std::sync::Arc::new(Engine::new(node.name(), Mode::Answer));
    let _registration = node.serve(SearchServer::new(engine)).await.expect("serves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_member_cannot_rewrite_another_members_state() {
    let (victim, victim_registry) = gossip_node("victim", &[]).await;
    let seed = victim_registry.gossip_addr().expect("gossiping");
    let (a, a_registry) = gossip_node("a", &[seed]).await;
    let (b, b_registry) = gossip_node("b", &[seed]).await;
    let (liar, liar_registry) = gossip_node("liar", &[seed]).await;
    for node in [&victim, &a, &b, &liar] {
        serve(node).await;
    }
    let honest = [&victim, &a, &b];
    until("every node sees every provider", || {
        [&victim, &a, &b, &liar]
            .iter()
            .all(|n| n.registry().lookup("search").len() == 4)
    })
    .await;
    let address = victim_entry(&a, "victim").expect("listed");
    assert_eq!(a_registry.forged_updates(), 0, "no lies before the liar's");

    // The liar's own copy holds the lie; its pushes and rounds send it to every peer, again
    // and again. Past `dead_after` (2 s): a pinned heartbeat would have the victim declared
    // dead by the end.
    for _ in 0..6 {
        lie(&liar_registry, "victim").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        for node in honest {
            assert_eq!(
                victim_entry(node, "victim"),
                Some(address),
                "{} still lists the victim, at its own address",
                node.name()
            );
        }
    }
    assert!(a_registry.forged_updates() > 0, "a counted the lies");
    assert!(b_registry.forged_updates() > 0, "b counted the lies");
    assert!(
        a_registry.traffic().forged_updates > 0,
        "counted in the traffic too"
    );
    // The victim keeps serving: a's calls reach it.
    let client = SearchClient::new(&a);
    let mut answered_by_victim = false;
    for i in 0..60 {
        let hits = client.search(format!("q{i}")).await.expect("answered");
        answered_by_victim |= hits[0].title.ends_with("from victim");
        if answered_by_victim {
            break;
        }
    }
    assert!(answered_by_victim, "the victim answers calls");
    // And a change of its own still spreads.
    victim_registry.withdraw("victim").await.expect("withdraws");
    until("the victim's true withdrawal spreads", || {
        victim_entry(&a, "victim").is_none() && victim_entry(&b, "victim").is_none()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_insecure_cluster_nothing_is_signed_and_the_same_lie_is_believed() {
    async fn insecure(name: &str, seeds: &[SocketAddr]) -> (Node, GossipRegistry) {
        let config = GossipConfig::new().seeds(seeds.iter().map(|s| s.to_string()));
        let (node, registry) = crate::forge::victim(name, config).await;
        serve(&node).await;
        (node, registry)
    }
    let (victim, victim_registry) = insecure("victim", &[]).await;
    let seed = victim_registry.gossip_addr().expect("gossiping");
    let (a, a_registry) = insecure("a", &[seed]).await;
    let (liar, liar_registry) = insecure("liar", &[seed]).await;
    until("every node sees every provider", || {
        [&victim, &a, &liar]
            .iter()
            .all(|n| n.registry().lookup("search").len() == 3)
    })
    .await;
    lie(&liar_registry, "victim").await;
    until("a believes the lie: the victim is gone", || {
        victim_entry(&a, "victim").is_none()
    })
    .await;
    assert_eq!(a_registry.forged_updates(), 0, "nothing to check it by");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_pinned_at_2_64_does_not_take_its_node_out() {
    let (victim, victim_registry) = gossip_node("victim", &[]).await;
    let seed = victim_registry.gossip_addr().expect("gossiping");
    let (a, a_registry) = gossip_node("a", &[seed]).await;
    let (liar, liar_registry) = gossip_node("liar", &[seed]).await;
    for node in [&victim, &a, &liar] {
        serve(node).await;
    }
    until("every node sees every provider", || {
        [&victim, &a, &liar]
            .iter()
            .all(|n| n.registry().lookup("search").len() == 3)
    })
    .await;
    // Only the heartbeat: held at 2^64, the victim's own would never count again, and it would
    // be out of every lookup `dead_after` (2 s) later.
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        assert!(
            liar_registry
                .__forge("victim", Some(u64::MAX), |_| {})
                .await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let entry = a.registry().lookup("search");
        let entry = entry.iter().find(|e| e.node.name == "victim");
        assert!(entry.is_some(), "the victim is still in a's lookups");
    }
    assert!(a_registry.forged_updates() > 0, "the lies were counted");
}
