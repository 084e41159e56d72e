//! Admission control and draining, over real TCP.

use std::sync::Arc;
use std::time::Duration;

use cluster::registry::ServiceEntry;
use cluster::{CallError, Node, Reason};

use crate::support::{Cluster, Engine, Mode, SearchClient, SearchServer, until};

#[tokio::test]
async fn calls_beyond_the_limit_are_refused_before_they_run_and_retried() {
    let cluster = Cluster::tcp();
    let node = Node::builder()
        .name("search-1")
        .identity(crate::support::identity("search-1"))
        .registry(cluster.registry.clone())
        .max_concurrent_calls(2)
        .start()
        .await
        .unwrap();
    let engine = Arc::new(Engine::new("search-1", Mode::Slow(Duration::from_secs(1))));
    let _r = node.serve(SearchServer::new(engine.clone())).await.unwrap();
    let client = SearchClient::new(&cluster.node("client").await);

    // Two run; the third is refused at once, before running, and not queued.
    let running: Vec<_> = (0..2)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.reindex(true).await })
        })
        .collect();
    until("two calls run", || engine.counters.running() == 2).await;
    let err = client.reindex(true).no_retry().await.unwrap_err();
    assert!(
        matches!(err, CallError::Service(ref e) if e.reason() == Reason::Overloaded),
        "{err:?}"
    );
    assert!(!err.may_have_run());
    // With retries, a refused call is sent again once by default (elsewhere if there were
    // another replica), then the refusal is the answer: a provider shedding load is not met
    // with a storm of retries.
    let err = client
        .reindex(true)
        .retry_after(Duration::from_millis(50))
        .await
        .unwrap_err();
    let report = err.report();
    assert_eq!(report.attempts.len(), 2, "{err}");
    assert!(!err.may_have_run());
    // Told to, a refused non-idempotent call waits its turn: refused calls never ran.
    assert_eq!(
        client
            .reindex(true)
            .retry_after(Duration::from_millis(50))
            .options(cluster::CallOptions::new().overloaded_retries(1000))
            .await
            .unwrap(),
        42
    );
    for call in running {
        assert_eq!(call.await.unwrap().unwrap(), 42);
    }
    assert_eq!(engine.counters.started(), 3);
}

#[tokio::test]
async fn a_draining_node_finishes_running_calls_and_refuses_new_ones_which_go_elsewhere() {
    let cluster = Cluster::tcp();
    let (leaving, leaving_engine) = cluster
        .provider("search-1", Mode::Slow(Duration::from_millis(300)))
        .await;
    let client = SearchClient::new(&cluster.node("client").await);
    let running = tokio::spawn({
        let client = client.clone();
        async move { client.reindex(true).no_retry().await }
    });
    until("the call runs", || leaving_engine.counters.running() == 1).await;

    let shutdown = tokio::spawn({
        let leaving = leaving.clone();
        async move { leaving.shutdown().await }
    });
    until("the node has left the registry", || {
        cluster.registry_is_empty()
    })
    .await;
    let (_staying, staying_engine) = cluster.provider("search-2", Mode::Answer).await;

    // A client that has not heard yet still routes to the leaving node (a stale entry): the
    // node refuses before running, and the call goes to the other one, non-idempotent or not.
    let stale = ServiceEntry::new(
        leaving.info().clone(),
        Arc::new(SearchClient::description().clone()),
    );
    cluster::Registry::register(&cluster.registry, stale)
        .await
        .unwrap();
    for _ in 0..4 {
        assert_eq!(
            client
                .reindex(true)
                .retry_after(Duration::from_millis(5))
                .await
                .unwrap(),
            42
        );
    }
    assert_eq!(staying_engine.counters.started(), 4);

    // The running call was not cut off.
    assert_eq!(running.await.unwrap().unwrap(), 42);
    shutdown.await.unwrap();
    assert_eq!(leaving_engine.counters.started(), 1);
    assert_eq!(
        leaving_engine
            .counters
            .dropped
            .load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}
