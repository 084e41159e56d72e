//! Two "processes" (two registry backends, each with its own local copy) on one Eureka server:
//! a provider registered through one is called through the other, with the options its
//! description carries in the instance metadata.

use std::sync::Arc;
use std::time::Duration;

use cluster::Registry;
use cluster::{MemoryNetwork, Node};
use cluster_discovery::backend::keys;
use tokio::time::Instant;

use crate::support::{Engine, Mode, SearchClient, SearchServer, eureka_registry, eureka_server};

#[tokio::test(start_paused = true)]
async fn a_provider_registered_through_one_copy_is_called_through_another() {
    let server = eureka_server();
    let net = MemoryNetwork::new();
    let (a, b) = (eureka_registry(&server), eureka_registry(&server));
    let provider = Node::builder()
        .name("search-1")
        .registry(a.clone())
        .memory(&net)
        .start()
        .await
        .unwrap();
    let engine = Arc::new(Engine::new("search-1", Mode::Answer));
    let _r = provider.serve(SearchServer::new(engine)).await.unwrap();

    // b learns of it on its next read of the server, within one fetch interval.
    let client_node = Node::builder()
        .name("web-1")
        .registry(b.clone())
        .memory(&net)
        .start()
        .await
        .unwrap();
    let start = Instant::now();
    let mut changes = b.changes();
    while b.lookup("search").is_empty() {
        changes.changed().await.unwrap();
    }
    assert!(start.elapsed() <= Duration::from_secs(1));
    let entry = b.lookup("search")[0].clone();
    assert_eq!(entry.node.name, "search-1");
    assert_eq!(entry.description.version, semver::Version::new(2, 1, 0));
    assert_eq!(
        entry.description.options,
        SearchClient::description().options,
        "the call options travel in the instance metadata"
    );

    let hits = SearchClient::new(&client_node)
        .search("rust".into())
        .await
        .unwrap();
    assert_eq!(hits[0].title, "rust from search-1");

    // What a Eureka client sees: an instance with the version and options in its metadata.
    let all = cluster_discovery::client::EurekaClient::in_process(server.clone())
        .applications()
        .await
        .unwrap();
    let i = all.instances().find(|i| i.app == "SEARCH").unwrap();
    assert_eq!(i.id(), "search-1:search");
    assert_eq!(i.metadata[keys::VERSION], "2.1.0");
    assert!(i.metadata.contains_key(keys::OPTIONS));
}

#[tokio::test(start_paused = true)]
async fn a_service_nobody_provides_is_no_service_on_every_copy() {
    let server = eureka_server();
    let net = MemoryNetwork::new();
    let node = Node::builder()
        .name("web-1")
        .registry(eureka_registry(&server))
        .memory(&net)
        .start()
        .await
        .unwrap();
    let e = SearchClient::new(&node)
        .search("rust".into())
        .no_retry()
        .await
        .unwrap_err();
    match e {
        cluster::CallError::Service(e) => assert_eq!(e.reason(), cluster::Reason::NoService),
        other => panic!("expected NoService, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_server_that_forgot_the_node_gets_it_back_within_a_heartbeat() {
    let server = eureka_server();
    let net = MemoryNetwork::new();
    let registry = eureka_registry(&server);
    let provider = Node::builder()
        .name("search-1")
        .registry(registry.clone())
        .memory(&net)
        .start()
        .await
        .unwrap();
    let _r = provider
        .serve(SearchServer::new(Arc::new(Engine::new(
            "search-1",
            Mode::Answer,
        ))))
        .await
        .unwrap();
    let client = cluster_discovery::client::EurekaClient::in_process(server.clone());
    assert!(
        client.cancel("SEARCH", "search-1:search").await.unwrap(),
        "as if the server restarted"
    );
    let start = Instant::now();
    while client
        .applications()
        .await
        .unwrap()
        .instances()
        .all(|i| i.id() != "search-1:search")
    {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "never came back"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // One renewal interval (30 s), plus the second this loop looks at.
    assert!(
        start.elapsed() <= Duration::from_secs(31),
        "{:?}",
        start.elapsed()
    );
}
