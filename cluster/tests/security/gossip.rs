//! Who may gossip: sealed datagrams, key rotation, one live process per name.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use cluster::registry::{GossipConfig, GossipRegistry, RegistryError};
use cluster::{GossipKey, Keyring, Node, Registry, StartError};

use crate::support::{Engine, Mode, SearchClient, SearchServer, identity, until};

/// A gossip node of the tests' CA with its own keyring, serving `search` if `serves`.
async fn member(
    name: &str,
    keys: Keyring,
    seeds: &[std::net::SocketAddr],
    serves: bool,
) -> Result<(Node, GossipRegistry), StartError> {
    let registry = GossipRegistry::new(
        GossipConfig::new()
            .keyring(keys)
            .seeds(seeds.iter().map(ToString::to_string)),
    );
    let node = Node::builder()
        .identity(identity(name))
        .registry(registry.clone())
        .start()
        .await?;
    if serves {
        let engine = Arc::new(Engine::new(name, Mode::Answer));
        let _r = node.serve(SearchServer::new(engine)).await.unwrap();
    }
    Ok((node, registry))
}

fn seed(registry: &GossipRegistry) -> std::net::SocketAddr {
    registry.gossip_addr().expect("gossiping")
}

#[tokio::test]
async fn a_process_without_the_key_joins_nothing_reads_nothing_and_adds_nothing() {
    let key = GossipKey::generate();
    let (node, registry) = member("search-1", Keyring::new(key), &[], true)
        .await
        .unwrap();
    // A certificate of the right CA, but another gossip key; and a registry in plaintext.
    let (stranger, stranger_registry) = member(
        "search-2",
        Keyring::new(GossipKey::generate()),
        &[seed(&registry)],
        true,
    )
    .await
    .unwrap();
    let plain_registry = GossipRegistry::new(
        GossipConfig::new()
            .insecure()
            .cluster_id("test")
            .seeds([seed(&registry).to_string()]),
    );
    let plain = Node::builder()
        .name("search-3")
        .insecure()
        .registry(plain_registry.clone())
        .start()
        .await
        .unwrap();
    // Both have been heard and refused round after round (the event waited for); nothing
    // crossed either way.
    until("the member refused 20 datagrams", || {
        registry.dropped_datagrams() >= 20
    })
    .await;
    let names =
        |r: &GossipRegistry| -> Vec<String> { r.nodes().into_iter().map(|n| n.name).collect() };
    assert_eq!(names(&registry), ["search-1"]);
    assert_eq!(names(&stranger_registry), ["search-2"]);
    assert_eq!(names(&plain_registry), ["search-3"]);
    assert_eq!(registry.lookup("search").len(), 1);
    plain.shutdown().await;
    stranger.shutdown().await;
    node.shutdown().await;
}

#[tokio::test]
async fn the_key_is_rotated_across_three_nodes_under_load_with_no_failed_call() {
    let old = GossipKey::generate();
    let mut members = Vec::new();
    let mut seeds = Vec::new();
    for i in 1..=3 {
        let keys = Keyring::new(old.clone());
        let (node, registry) = member(&format!("search-{i}"), keys.clone(), &seeds, true)
            .await
            .unwrap();
        seeds.push(seed(&registry));
        members.push((node, registry, keys));
    }
    let client_keys = Keyring::new(old.clone());
    let (client_node, client_registry) = member("web-1", client_keys.clone(), &seeds, false)
        .await
        .unwrap();
    until("the client sees three providers", || {
        client_registry.lookup("search").len() == 3
    })
    .await;

    // Steady load: calls in a loop, every failure counted.
    let stop = Arc::new(AtomicBool::new(false));
    let (calls, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let load = tokio::spawn({
        let client = SearchClient::new(&client_node);
        let (stop, calls, failed) = (stop.clone(), calls.clone(), failed.clone());
        async move {
            while !stop.load(Ordering::Relaxed) {
                if client.search("q".into()).await.is_err() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                calls.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    });
    let new = GossipKey::generate();
    // Each step on every node before the next, a few gossip rounds apart.
    let round = GossipConfig::new().gossip_interval;
    let every: Vec<&Keyring> = members
        .iter()
        .map(|(_, _, keys)| keys)
        .chain([&client_keys])
        .collect();
    for keys in &every {
        keys.install(new.clone());
    }
    tokio::time::sleep(3 * round).await;
    for keys in &every {
        keys.use_key(new.id()).unwrap();
    }
    tokio::time::sleep(3 * round).await;
    for keys in &every {
        keys.remove(old.id()).unwrap();
    }
    tokio::time::sleep(3 * round).await;
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    assert!(calls.load(Ordering::Relaxed) > 50, "the load ran");
    assert_eq!(failed.load(Ordering::Relaxed), 0);
    // The providers never lost each other: nothing they sent was refused.
    for (_, registry, _) in &members {
        assert_eq!(registry.lookup("search").len(), 3);
        assert_eq!(registry.dropped_datagrams(), 0, "a datagram was refused");
    }
    // A newcomer with only the new key joins; one with only the old key is cut off.
    let (late, late_registry) = member("search-4", Keyring::new(new), &seeds, true)
        .await
        .unwrap();
    until("the newcomer sees the three", || {
        late_registry.lookup("search").len() == 4
    })
    .await;
    let (stale, stale_registry) = member("search-5", Keyring::new(old), &seeds, true)
        .await
        .unwrap();
    until("a member refuses the old key", || {
        members[0].1.dropped_datagrams() > 0
    })
    .await;
    assert_eq!(
        stale_registry.lookup("search").len(),
        1,
        "it sees only itself"
    );
    assert!(
        client_registry
            .lookup("search")
            .iter()
            .all(|e| e.node.name != "search-5")
    );
    stale.shutdown().await;
    late.shutdown().await;
    client_node.shutdown().await;
    for (node, _, _) in members {
        node.shutdown().await;
    }
}

#[tokio::test]
async fn a_second_process_under_a_live_name_does_not_start_and_takes_no_call() {
    let key = GossipKey::generate();
    let (holder, holder_registry) = member("search-1", Keyring::new(key.clone()), &[], true)
        .await
        .unwrap();
    let seeds = [seed(&holder_registry)];
    let (client, client_registry) = member("web-1", Keyring::new(key.clone()), &seeds, false)
        .await
        .unwrap();
    until("the client sees search-1", || {
        client_registry.lookup("search").len() == 1
    })
    .await;
    let second = member("search-1", Keyring::new(key.clone()), &seeds, true).await;
    let Err(StartError::Registry(RegistryError::NameTaken { name, holder: at })) = second else {
        panic!("a second search-1 started: {second:?}");
    };
    assert_eq!((name.as_str(), at), ("search-1", holder.addr()));
    for _ in 0..5 {
        SearchClient::new(&client).search("q".into()).await.unwrap();
    }
    let entries = client_registry.lookup("search");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].node.addr, holder.addr());

    // After a crash, the name is free again: a restart takes it over.
    holder.kill().await;
    let (again, _) = member(
        "search-1",
        Keyring::new(key.clone()),
        &[seed(&client_registry)],
        true,
    )
    .await
    .unwrap();
    until("the client routes to the restarted search-1", || {
        client_registry
            .lookup("search")
            .iter()
            .any(|e| e.node.addr == again.addr())
    })
    .await;
    // The crashed generation still says `up` in gossip until it is purged: a third process
    // must not take it for the only holder, and is refused because of the live one.
    let third = member(
        "search-1",
        Keyring::new(key),
        &[seed(&client_registry)],
        true,
    )
    .await;
    let Err(StartError::Registry(RegistryError::NameTaken { holder: at, .. })) = third else {
        panic!("a third search-1 started beside a live one: {third:?}");
    };
    assert_eq!(at, again.addr());
    again.shutdown().await;
    client.shutdown().await;
}
