//! Convergence, departure and failure detection, against the seed's Phoenix.Tracker timings.

use std::time::Duration;

use cluster::registry::{GossipConfig, GossipRegistry, RegistryError, RegistryEvent};
use cluster::{Node, Reason};

use crate::support::{
    Engine, Mode, SearchClient, SearchServer, gossip_node, gossip_provider, providers, seen,
};

const SEC: Duration = Duration::from_secs(1);

// The bounds below check behaviour with room for a loaded machine; the figures themselves
// (milliseconds for a registration, about 2 s for a crash) come from the registry benchmark.

/// Three nodes that see each other.
async fn trio() -> Vec<(Node, GossipRegistry)> {
    let first = gossip_node("n0", &[]).await;
    let seed = first.1.gossip_addr().unwrap();
    let mut nodes = vec![first];
    for name in ["n1", "n2"] {
        nodes.push(gossip_node(name, &[seed]).await);
    }
    for (node, _) in &nodes {
        seen(node, 10 * SEC, |n| n.registry().nodes().len() == 3)
            .await
            .expect("the trio converges");
    }
    nodes
}

#[tokio::test]
async fn a_registration_is_seen_on_every_node_in_under_a_second() {
    let nodes = trio().await;
    let engine = std::sync::Arc::new(Engine::new("n0", Mode::Answer));
    let _r = nodes[0].0.serve(SearchServer::new(engine)).await.unwrap();
    for (node, _) in &nodes {
        let took = seen(node, 5 * SEC, |n| providers(n) == 1)
            .await
            .expect("the registration spreads");
        println!("registration seen on {} after {took:?}", node.name());
    }
    // The entry carries the provider's options: they travel with it.
    let entry = nodes[2].0.registry().lookup("search")[0].clone();
    assert_eq!(
        entry.description.options.retry_budget,
        Some(Duration::from_secs(21))
    );
    assert_eq!(entry.node.name, "n0");
}

#[tokio::test]
async fn a_clean_shutdown_is_seen_everywhere_before_the_node_exits() {
    let nodes = trio().await;
    let engine = std::sync::Arc::new(Engine::new("n2", Mode::Answer));
    let _r = nodes[2].0.serve(SearchServer::new(engine)).await.unwrap();
    for (node, _) in &nodes[..2] {
        seen(node, 10 * SEC, |n| providers(n) == 1).await.unwrap();
    }
    let start = std::time::Instant::now();
    nodes[2].0.shutdown().await;
    let exited = start.elapsed();
    for (node, _) in &nodes[..2] {
        assert_eq!(
            providers(node),
            0,
            "gone from {} before the leaving node exited ({exited:?})",
            node.name()
        );
        assert!(!node.registry().nodes().iter().any(|n| n.name == "n2"));
    }
    println!("the leave took {exited:?}");
}

#[tokio::test]
async fn a_deregistration_is_seen_everywhere() {
    let nodes = trio().await;
    let engine = std::sync::Arc::new(Engine::new("n1", Mode::Answer));
    let registration = nodes[1].0.serve(SearchServer::new(engine)).await.unwrap();
    seen(&nodes[0].0, 10 * SEC, |n| providers(n) == 1)
        .await
        .unwrap();
    registration.deregister().await.unwrap();
    for (node, _) in &nodes {
        let took = seen(node, 5 * SEC, |n| providers(n) == 0)
            .await
            .expect("withdrawn");
        println!("deregistration seen on {} after {took:?}", node.name());
    }
}

#[tokio::test]
async fn a_crashed_node_is_out_of_every_lookup() {
    let nodes = trio().await;
    let engine = std::sync::Arc::new(Engine::new("n1", Mode::Answer));
    let _r = nodes[1].0.serve(SearchServer::new(engine)).await.unwrap();
    for (node, _) in &nodes {
        seen(node, 10 * SEC, |n| providers(n) == 1).await.unwrap();
    }
    let mut events = nodes[0].0.registry().events();
    nodes[1].0.kill().await; // no leave: gossip stops, the listener closes
    for (node, _) in [&nodes[0], &nodes[2]] {
        let took = seen(node, 10 * SEC, |n| providers(n) == 0)
            .await
            .expect("dropped (the seed: after 30 s)");
        println!("crash seen by {} after {took:?}", node.name());
    }
    // What n0 was told about n1. (A stall of this loaded test process could make n2 flap too;
    // those events are not this test's business.)
    let mut saw = Vec::new();
    while let Ok(event) = events.try_recv() {
        match event {
            RegistryEvent::ServiceDown(e) if e.node.name == "n1" => saw.push("service down"),
            RegistryEvent::NodeDown(n) if n.name == "n1" => saw.push("node down"),
            RegistryEvent::ServiceUp(e) if e.node.name == "n1" => saw.push("service up"),
            RegistryEvent::NodeUp(n) if n.name == "n1" => saw.push("node up"),
            _ => {}
        }
    }
    assert_eq!(saw, ["service down", "node down"]);
}

#[tokio::test]
async fn a_restart_under_the_same_name_never_resurrects_the_old_entries() {
    let (seed_node, seed_registry) = gossip_node("n0", &[]).await;
    let seed = seed_registry.gossip_addr().unwrap();
    let (old, _engine, _) = gossip_provider("search-1", &[seed], Mode::Answer).await;
    seen(&seed_node, 10 * SEC, |n| providers(n) == 1)
        .await
        .unwrap();
    let old_addr = old.addr();
    old.kill().await;
    // The same name comes back at once, with a new generation, serving nothing yet.
    let (new, _) = gossip_node("search-1", &[seed]).await;
    seen(&seed_node, 10 * SEC, |n| {
        n.registry()
            .nodes()
            .iter()
            .any(|i| i.name == "search-1" && i.addr == new.addr())
    })
    .await
    .expect("the new generation is seen");
    // Whatever the failure detector decides about the old generation, its entry stays gone.
    let wait = seen(&seed_node, 3 * SEC, |n| providers(n) == 1).await;
    assert!(wait.is_err(), "the old generation's entry came back");
    assert!(
        seed_node
            .registry()
            .lookup("search")
            .iter()
            .all(|e| e.node.addr != old_addr)
    );
}

#[tokio::test]
async fn an_oversized_description_is_refused_at_registration() {
    let registry = GossipRegistry::new(
        GossipConfig::new()
            .keyring(crate::support::keyring())
            .max_entry_bytes(256),
    );
    let node = Node::builder()
        .name("small")
        .identity(crate::support::identity("small"))
        .registry(registry)
        .start()
        .await
        .unwrap();
    let engine = std::sync::Arc::new(Engine::new("small", Mode::Answer));
    let err = node.serve(SearchServer::new(engine)).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::TooLarge { limit: 256, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("more than the registry's limit of 256"),
        "{err}"
    );
    // Nothing half-registered: the node serves no such service.
    assert!(node.registry().lookup("search").is_empty());
}

#[tokio::test]
async fn inspection_from_code() {
    let nodes = trio().await;
    let engine = std::sync::Arc::new(Engine::new("n1", Mode::Answer));
    let _r = nodes[1].0.serve(SearchServer::new(engine)).await.unwrap();
    let me = &nodes[0].0;
    seen(me, 10 * SEC, |n| providers(n) == 1).await.unwrap();
    let registry = me.registry();
    assert_eq!(registry.services().len(), 1);
    assert_eq!(registry.services_on("n1").len(), 1);
    assert!(registry.services_on("n2").is_empty());
    assert_eq!(registry.find("search", &"^2.0".parse().unwrap()).len(), 1);
    assert!(registry.find("search", &"^3".parse().unwrap()).is_empty());
    let mut names: Vec<String> = registry.nodes().into_iter().map(|n| n.name).collect();
    names.sort();
    assert_eq!(names, ["n0", "n1", "n2"]);
}

#[tokio::test]
async fn a_call_through_gossip_reaches_a_provider_on_another_node() {
    let nodes = trio().await;
    let engine = std::sync::Arc::new(Engine::new("n2", Mode::Answer));
    let _r = nodes[2].0.serve(SearchServer::new(engine)).await.unwrap();
    seen(&nodes[0].0, 10 * SEC, |n| providers(n) == 1)
        .await
        .unwrap();
    let client = SearchClient::new(&nodes[0].0);
    assert_eq!(
        client.search("rust".into()).await.unwrap()[0].title,
        "rust from n2"
    );
    nodes[2].0.shutdown().await;
    let err = client.search("rust".into()).no_retry().await.unwrap_err();
    assert!(
        matches!(err, cluster::CallError::Service(ref e) if e.reason() == Reason::NoService),
        "{err:?}"
    );
}

/// A node on `0.0.0.0` for both gossip and calls, advertising loopback (port 0: the ports it
/// got), as a node in a container advertises the host's address.
async fn behind_a_wildcard(name: &str, seeds: &[std::net::SocketAddr]) -> (Node, GossipRegistry) {
    let wildcard: std::net::SocketAddr = "0.0.0.0:0".parse().unwrap();
    let loopback: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    let registry = GossipRegistry::new(
        GossipConfig::new()
            .keyring(crate::support::keyring())
            .listen(wildcard)
            .advertise(loopback)
            .seeds(seeds.iter().map(|s| s.to_string())),
    );
    let node = Node::builder()
        .identity(crate::support::identity(name))
        .listen(wildcard)
        .advertise(loopback)
        .registry(registry.clone())
        .start()
        .await
        .expect("node starts");
    (node, registry)
}

#[tokio::test]
async fn nodes_on_a_wildcard_are_called_at_the_address_they_advertise() {
    let (provider, gossip) = behind_a_wildcard("n0", &[]).await;
    let seed = gossip.gossip_addr().unwrap();
    assert_eq!(seed.ip().to_string(), "127.0.0.1", "gossips as {seed}");
    assert_eq!(provider.addr().ip().to_string(), "127.0.0.1");
    assert_ne!(provider.addr().port(), 0, "the port it got, not 0");
    let (client, _gossip) = behind_a_wildcard("n1", &[seed]).await;
    let engine = std::sync::Arc::new(Engine::new("n0", Mode::Answer));
    let _r = provider.serve(SearchServer::new(engine)).await.unwrap();
    seen(&client, 10 * SEC, |n| providers(n) == 1)
        .await
        .expect("the registration spreads");
    assert_eq!(
        client.registry().lookup("search")[0].node.addr,
        provider.addr()
    );
    let found = SearchClient::new(&client)
        .search("rust".into())
        .await
        .unwrap();
    assert_eq!(found[0].title, "rust from n0");
}

#[tokio::test]
async fn a_wildcard_without_an_address_to_advertise_is_refused_at_start() {
    let wildcard: std::net::SocketAddr = "0.0.0.0:0".parse().unwrap();
    let refused = |builder: cluster::NodeBuilder| async move {
        match builder
            .identity(crate::support::identity("n0"))
            .start()
            .await
        {
            Err(cluster::StartError::Setting(why)) => why,
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("started"),
        }
    };
    let listening = refused(Node::builder().listen(wildcard)).await;
    assert!(listening.contains("advertise()"), "{listening}");
    let advertising = refused(Node::builder().advertise(wildcard)).await;
    assert!(advertising.contains("wildcard"), "{advertising}");
}

// A new node's first call is served. Starting exchanges state with a seed (the name claim), so
// on a small cluster the entry is usually there when `start` returns; when that exchange did
// not bring it, the copy is still filling and the call waits for it (`Registry::filling_until`;
// the call path's side is pinned in tests/calls/lookup.rs on the paused clock).
#[tokio::test]
async fn a_node_that_just_started_is_served_by_a_service_its_copy_has_not_heard_of_yet() {
    let (_provider, _engine, seed) = gossip_provider("n0", &[], Mode::Answer).await;
    let (client, _) = gossip_node("n1", &[seed]).await;
    let heard_before_the_call = providers(&client);
    let hits = SearchClient::new(&client)
        .search("rust".into())
        .await
        .expect("served once the copy filled, without wait_for_provider");
    assert_eq!(hits[0].title, "rust from n0");
    println!("providers seen when the call began: {heard_before_the_call}");
}

#[tokio::test]
async fn a_service_nobody_provides_fails_once_a_new_nodes_copy_has_filled() {
    let (_provider, _engine, seed) = gossip_provider("n0", &[], Mode::Answer).await;
    let (client, _) = gossip_node("n1", &[seed]).await;
    let started = std::time::Instant::now();
    let err = crate::support::BankClient::new(&client)
        .balance()
        .await
        .expect_err("nobody provides bank");
    let took = started.elapsed();
    let cluster::CallError::Service(e) = &err else {
        panic!("expected NoService, got {err}");
    };
    assert_eq!(e.reason(), Reason::NoService, "{err}");
    assert!(
        err.to_string()
            .contains("while this node's registry copy filled from its seeds"),
        "{err}"
    );
    // The seed answered: the wait ends a second after the first news, not at the 5 s bound.
    assert!(took < 4 * SEC, "waited {took:?}");
    // Once filled, a miss is said at once.
    let again = std::time::Instant::now();
    let err = crate::support::BankClient::new(&client)
        .balance()
        .await
        .expect_err("still nobody");
    assert!(again.elapsed() < SEC / 2, "{err}");
    assert!(err.to_string().contains("not waited for"), "{err}");
}
