//! Balancing and failure accrual on real sockets: the turn is the node's, and a replica that
//! times out or panics in a row is passed over like one whose socket is dead, never all of them;
//! one on a node the registry suspects is a last resort too (the in-process registry only: a
//! suspicion is local to the copy that holds it).

use std::sync::Arc;
use std::time::Duration;

use cluster::registry::{Registry, ServiceEntry};
use cluster::{CallError, Reason};

use crate::support::{Cluster, Mode, SearchClient};

const MS: Duration = Duration::from_millis(1);

#[tokio::test]
async fn a_client_made_per_call_spreads_calls_as_evenly_as_one_kept_for_the_process() {
    let cluster = Cluster::tcp();
    let mut replicas = Vec::new();
    for i in 0..4 {
        replicas.push(cluster.provider(&format!("search-{i}"), Mode::Answer).await);
    }
    let node = cluster.node("client").await;
    for _ in 0..200 {
        // A new client per request, as a handler that builds one from the node would.
        SearchClient::new(&node)
            .search("rust".into())
            .await
            .unwrap();
    }
    let counts: Vec<usize> = replicas.iter().map(|(_, e)| e.counters.started()).collect();
    assert_eq!(counts, [50, 50, 50, 50]);
}

#[tokio::test]
async fn a_replica_that_hangs_is_ejected_after_three_timeouts_in_a_row() {
    let cluster = Cluster::tcp();
    let (_hung, hung) = cluster.provider("search-hung", Mode::Hang).await;
    let (_ok, ok) = cluster.provider("search-ok", Mode::Answer).await;
    let client = SearchClient::new(&cluster.node("client").await);
    for _ in 0..20 {
        // Idempotent: an attempt that times out on the hung replica is retried on the other.
        client
            .search("rust".into())
            .timeout(100 * MS)
            .retry_after(10 * MS)
            .await
            .unwrap();
    }
    // Taking turns would have sent it every other call (10); three timeouts in a row eject it
    // for 2 s, and the rest go to the replica that answers.
    assert_eq!(hung.counters.started(), 3);
    assert_eq!(ok.counters.started(), 20);
}

#[tokio::test]
async fn replicas_that_panic_are_ejected_but_never_all_of_them() {
    let cluster = Cluster::tcp();
    let (_a, a) = cluster.provider("search-a", Mode::Answer).await;
    let (_b, b) = cluster.provider("search-b", Mode::Answer).await;
    let (_c, c) = cluster.provider("search-c", Mode::Answer).await;
    let client = SearchClient::new(&cluster.node("client").await);
    // A panic ran the function: never retried, so each call is one attempt. Each replica is
    // ejected on its third panic in a row, but at most half of the three (one) is passed over
    // as ejected at a time: every call reaches a provider, none is refused for want of one.
    for _ in 0..15 {
        let err = client.crash("index corrupted".into()).await.unwrap_err();
        assert!(
            matches!(&err, CallError::Service(e) if e.reason() == Reason::Panicked),
            "never NoService: {err}"
        );
    }
    let panics = [&a, &b, &c].map(|e| e.counters.started());
    assert_eq!(panics.iter().sum::<usize>(), 15, "{panics:?}");
    assert!(
        panics.iter().all(|&n| n >= 3),
        "each was called: {panics:?}"
    );
    // And a function that answers still reaches the ones not passed over.
    client.search("rust".into()).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_call_a_replica_refuses_before_running_goes_to_another_at_once() {
    let cluster = Cluster::memory();
    let (_ok, ok) = cluster.provider("search-ok", Mode::Answer).await;
    // A stale entry: the registry says `empty` serves `search`; `empty` says it does not.
    let empty = cluster.node("empty").await;
    let stale = ServiceEntry::new(
        empty.info().clone(),
        Arc::new(SearchClient::description().clone()),
    );
    cluster.registry.register(stale).await.unwrap();
    let client = SearchClient::new(&cluster.node("client").await);
    for _ in 0..40 {
        let start = tokio::time::Instant::now();
        // Not idempotent: a refusal before running may still go elsewhere.
        client.reindex(true).await.unwrap();
        // At once: with a replica not yet tried in the call, a refusal that never ran waits
        // for nothing (before, each paid the retry pause).
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
    assert_eq!(ok.counters.started(), 40);
    // Without another replica, it still waits its pause.
    let only = Cluster::memory();
    let empty = only.node("empty").await;
    let stale = ServiceEntry::new(
        empty.info().clone(),
        Arc::new(SearchClient::description().clone()),
    );
    only.registry.register(stale).await.unwrap();
    let client = SearchClient::new(&only.node("client").await);
    let start = tokio::time::Instant::now();
    let err = client
        .reindex(true)
        .budget(Duration::from_secs(3))
        .await
        .unwrap_err();
    assert!(start.elapsed() >= Duration::from_secs(1), "{err}");
    assert!(err.report().attempts.len() > 1, "{err}");
}

#[tokio::test]
async fn a_replica_on_a_suspect_node_is_called_only_when_every_other_is_suspect_too() {
    let cluster = Cluster::memory();
    let (_a, a_engine) = cluster.provider("search-a", Mode::Answer).await;
    let (_b, b_engine) = cluster.provider("search-b", Mode::Answer).await;
    let client = SearchClient::new(&cluster.node("client").await);
    // What the gossip registry does when a node has been silent for a while, not yet for
    // `dead_after`: the entry stays, marked.
    let suspect = |name: &str| {
        let entry = cluster
            .registry
            .lookup("search")
            .iter()
            .find(|e| e.node.name == name)
            .unwrap()
            .as_ref()
            .clone();
        entry.with_suspect(true)
    };
    let mark_then_call = |name: &'static str| {
        let (cluster, client) = (&cluster, &client);
        async move {
            cluster.registry.register(suspect(name)).await.unwrap();
            for _ in 0..10 {
                client.search("rust".into()).await.unwrap();
            }
        }
    };
    mark_then_call("search-a").await;
    assert_eq!(
        a_engine.counters.started(),
        0,
        "a suspect replica is passed over"
    );
    assert_eq!(b_engine.counters.started(), 10);

    mark_then_call("search-b").await;
    assert_eq!(
        a_engine.counters.started(),
        5,
        "when all are suspect, all are called, in turn"
    );
}
