//! Who may call: mutual TLS, the certificate's name against the registry entry, allow-lists.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::registry::{NodeInfo, ServiceEntry};
use cluster::{Authority, CallError, Callers, Node, Reason, Registry, RpcErrorKind};

use crate::support::{
    Cluster, Engine, Mode, SearchClient, SearchError, SearchServer, identity, until,
};

/// A provider of `search` on TCP with the tests' CA, and its engine.
async fn provider(cluster: &Cluster, name: &str) -> (Node, Arc<Engine>) {
    cluster.provider(name, Mode::Answer).await
}

fn rpc_kind<E: std::fmt::Debug>(err: &CallError<E>) -> RpcErrorKind {
    match err {
        CallError::Rpc(e) => e.kind(),
        other => panic!("expected an RpcError, got {other:?}"),
    }
}

#[tokio::test]
async fn a_plaintext_caller_is_refused_at_once_and_nothing_runs() {
    let cluster = Cluster::tcp();
    let (_provider, engine) = provider(&cluster, "search-1").await;
    let plain = Node::builder()
        .name("intruder")
        .insecure()
        .registry(cluster.registry.clone())
        .start()
        .await
        .unwrap();
    let started = Instant::now();
    let err = SearchClient::new(&plain)
        .reindex(true)
        .await
        .expect_err("a plaintext caller got through");
    let CallError::Rpc(e) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(e.kind(), RpcErrorKind::Untrusted, "{err}");
    assert!(e.detail().contains("mutual TLS"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused at once, not at the timeout: {:?}",
        started.elapsed()
    );
    assert_eq!(engine.counters.started(), 0);
}

#[tokio::test]
async fn a_secure_caller_of_a_plaintext_provider_fails_at_once() {
    let cluster = Cluster::tcp();
    let plain = Node::builder()
        .name("search-1")
        .insecure()
        .registry(cluster.registry.clone())
        .start()
        .await
        .unwrap();
    let engine = Arc::new(Engine::new("search-1", Mode::Answer));
    let _r = plain
        .serve(SearchServer::new(engine.clone()))
        .await
        .unwrap();
    let client = cluster.node("web-1").await;
    let started = Instant::now();
    let err = SearchClient::new(&client).reindex(true).await.unwrap_err();
    assert_eq!(rpc_kind(&err), RpcErrorKind::Untrusted, "{err}");
    assert!(started.elapsed() < Duration::from_secs(1), "{err}");
    assert_eq!(engine.counters.started(), 0);
}

#[tokio::test]
async fn a_certificate_of_another_ca_cannot_call() {
    let cluster = Cluster::tcp();
    let (_provider, engine) = provider(&cluster, "search-1").await;
    // Same cluster name, same node name a member might have: another CA.
    let forger = Authority::new("test").unwrap();
    let outsider = Node::builder()
        .identity(forger.issue("web-1").unwrap())
        .registry(cluster.registry.clone())
        .start()
        .await
        .unwrap();
    let err = SearchClient::new(&outsider)
        .reindex(true)
        .await
        .unwrap_err();
    assert_eq!(rpc_kind(&err), RpcErrorKind::Untrusted, "{err}");
    assert_eq!(engine.counters.started(), 0);
}

#[tokio::test]
async fn a_caller_outside_the_allow_list_is_unauthorized_and_never_retried() {
    let cluster = Cluster::tcp();
    let node = cluster.node("search-1").await;
    let engine = Arc::new(Engine::new("search-1", Mode::Answer));
    let _r = node
        .serve(Callers::only(["web-*"]).may_call(SearchServer::new(engine.clone())))
        .await
        .unwrap();
    let batch = cluster.node("batch-1").await;
    let err = SearchClient::new(&batch)
        .search("q".into())
        .await
        .unwrap_err();
    let CallError::Service(e) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(e.reason(), Reason::Unauthorized, "{err}");
    assert!(e.detail().contains("`batch-1`"), "{err}");
    assert_eq!(e.report().attempts.len(), 1, "not retried: {err}");
    assert_eq!(engine.counters.started(), 0);

    let web = cluster.node("web-7").await;
    assert!(SearchClient::new(&web).search("q".into()).await.is_ok());
}

#[tokio::test]
async fn an_entry_whose_node_has_another_certificate_is_skipped_for_another_provider() {
    let cluster = Cluster::tcp();
    let (real, real_engine) = provider(&cluster, "search-1").await;
    let (_other, other_engine) = provider(&cluster, "search-2").await;
    // An entry claiming that `search-9` serves at search-1's address.
    let description = real.registry().lookup("search")[0].description.clone();
    let forged = NodeInfo::new("search-9", real.addr(), 1).with_wire(Some(2..=2));
    cluster
        .registry
        .register(ServiceEntry::new(forged, description.clone()))
        .await
        .unwrap();
    let client = SearchClient::new(&cluster.node("web-1").await);
    for _ in 0..6 {
        client
            .reindex(true)
            .await
            .expect("served by a true provider");
    }
    assert_eq!(
        real_engine.counters.started() + other_engine.counters.started(),
        6
    );

    // With only a forged entry left, the error says what was found.
    real.shutdown().await;
    _other.shutdown().await;
    let bystander = cluster.node("search-3").await;
    let forged = NodeInfo::new("search-9", bystander.addr(), 1).with_wire(Some(2..=2));
    cluster
        .registry
        .register(ServiceEntry::new(forged, description))
        .await
        .unwrap();
    let err = client.reindex(true).no_retry().await.unwrap_err();
    assert_eq!(rpc_kind(&err), RpcErrorKind::WrongPeer, "{err}");
    assert!(err.to_string().contains("`search-3`"), "{err}");
}

/// web-1 calls search-1 (its connection to it pooled); then the only entry of `search` says
/// that search-2, a member with a certificate of the same CA, serves at search-1's address, as
/// a forged or stale entry would. Returns the call for search-2's error and how many calls
/// search-1's handler ran.
async fn a_call_for_another_node_at_a_pooled_address(
    secure: bool,
) -> (CallError<SearchError>, usize) {
    let cluster = Cluster::tcp();
    let node = |name: &str| {
        let builder = Node::builder()
            .name(name)
            .registry(cluster.registry.clone());
        let builder = match secure {
            true => builder.identity(identity(name)),
            false => builder.insecure(),
        };
        async move { builder.start().await.expect("node starts") }
    };
    let search_1 = node("search-1").await;
    let engine = Arc::new(Engine::new("search-1", Mode::Answer));
    let _serving = search_1
        .serve(SearchServer::new(engine.clone()))
        .await
        .unwrap();
    let _search_2 = node("search-2").await;
    let web = node("web-1").await;
    let client = SearchClient::new(&web);
    client.reindex(true).await.expect("served by search-1");

    let mut entry = ServiceEntry::clone(&cluster.registry.lookup("search")[0]);
    entry.node.name = "search-2".into();
    cluster.registry.register(entry).await.unwrap();
    cluster
        .registry
        .deregister("search-1", "search")
        .await
        .unwrap();
    until("web-1 sees only the entry naming search-2", || {
        let entries = web.registry().lookup("search");
        entries.len() == 1 && entries[0].node.name == "search-2"
    })
    .await;
    let err = client.reindex(true).no_retry().await.unwrap_err();
    (err, engine.counters.started())
}

#[tokio::test]
async fn an_entry_naming_another_node_at_a_pooled_address_is_not_handed_the_pooled_connection() {
    let (err, ran) = a_call_for_another_node_at_a_pooled_address(true).await;
    assert_eq!(rpc_kind(&err), RpcErrorKind::WrongPeer, "{err}");
    assert!(err.to_string().contains("`search-1`"), "{err}");
    assert_eq!(ran, 1, "search-1 ran the call meant for search-2");
}

#[tokio::test]
async fn in_plaintext_an_entry_naming_another_node_at_a_pooled_address_is_stale() {
    let (err, ran) = a_call_for_another_node_at_a_pooled_address(false).await;
    assert_eq!(rpc_kind(&err), RpcErrorKind::NoConnection, "{err}");
    assert!(err.to_string().contains("stale"), "{err}");
    assert_eq!(ran, 1, "search-1 ran the call meant for search-2");
}

#[tokio::test]
async fn a_node_named_unlike_its_certificate_or_with_no_identity_does_not_start() {
    let err = Node::builder()
        .name("search-1")
        .identity(identity("web-1"))
        .start()
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("certificate names `web-1`"),
        "{err}"
    );
    let err = Node::builder().start().await.unwrap_err();
    assert!(err.to_string().contains("insecure()"), "{err}");
}
