//! Steps 4 and 6 over real TCP: re-resolve before every attempt; the deadline travels.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::{Cluster, Mode, SearchClient, until};

#[tokio::test]
async fn the_only_provider_stops_mid_call_and_a_replacement_under_another_name_serves_it() {
    let cluster = Cluster::tcp();
    let (old, old_engine) = cluster.provider("search-7d9c", Mode::Hang).await;
    let client = SearchClient::new(&cluster.node("client").await);

    let call = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .search("rust".into())
                .retry_after(Duration::from_millis(20))
                .await
        }
    });
    until("the call runs on the old provider", || {
        old_engine.counters.started() == 1
    })
    .await;

    // A Deployment rollout gone wrong: the old pod dies mid-call (its connection breaks; the
    // registry still lists it), a new pod with another name comes up. The seed resolved once
    // and kept calling the dead name.
    old.kill().await;
    let (_new, new_engine) = cluster.provider("search-a1b2", Mode::Answer).await;

    let hits = call.await.unwrap().expect("the call survives the deploy");
    assert_eq!(hits[0].title, "rust from search-a1b2");
    assert_eq!(new_engine.counters.started(), 1);
    assert_eq!(
        old_engine.counters.dropped.load(Ordering::SeqCst),
        1,
        "the old handler was dropped"
    );
}

#[tokio::test]
async fn a_crashed_provider_still_listed_is_passed_over_for_a_live_one_even_for_a_non_idempotent_call()
 {
    let cluster = Cluster::tcp();
    let (dead, dead_engine) = cluster.provider("search-1", Mode::Answer).await;
    let (_live, live_engine) = cluster.provider("search-2", Mode::Answer).await;
    dead.kill().await; // no deregistration: the registry still lists it
    let client = SearchClient::new(&cluster.node("client").await);
    for _ in 0..6 {
        // The dead node refuses connections: never sent, so safe to send elsewhere.
        assert_eq!(
            client
                .reindex(true)
                .retry_after(Duration::from_millis(1))
                .await
                .unwrap(),
            42
        );
    }
    assert_eq!(dead_engine.counters.started(), 0);
    assert_eq!(live_engine.counters.started(), 6);
}

#[tokio::test]
async fn a_non_idempotent_call_in_flight_on_a_provider_that_dies_is_not_run_again() {
    let cluster = Cluster::tcp();
    let (dying, dying_engine) = cluster.provider("search-1", Mode::Hang).await;
    let client = SearchClient::new(&cluster.node("client").await);
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.reindex(true).await }
    });
    until("the call runs", || dying_engine.counters.started() == 1).await;
    let (_other, other_engine) = cluster.provider("search-2", Mode::Answer).await;
    dying.kill().await;
    let err = call.await.unwrap().unwrap_err();
    assert!(err.may_have_run(), "{err}");
    assert!(
        matches!(err, cluster::CallError::Rpc(ref e) if e.kind() == cluster::RpcErrorKind::ConnectionLost),
        "{err}"
    );
    assert_eq!(
        other_engine.counters.started(),
        0,
        "never run a second time elsewhere"
    );
}

#[tokio::test]
async fn a_timed_out_attempt_is_no_longer_running_when_the_next_starts() {
    let cluster = Cluster::tcp();
    let (_p, engine) = cluster.provider("search-1", Mode::Hang).await;
    let client = SearchClient::new(&cluster.node("client").await);
    let err = client
        .search("rust".into())
        .timeout(Duration::from_millis(200))
        .retry_after(Duration::from_millis(300))
        .budget(Duration::from_millis(1400))
        .await
        .unwrap_err();
    // At 0, 500 and 1000 ms on a quiet machine; a loaded one may fit in fewer.
    let attempts = err.report().attempts.len();
    assert!((2..=3).contains(&attempts), "{attempts} attempts");
    until("the last handler is dropped too", || {
        engine.counters.running() == 0
    })
    .await;
    let at_start = engine.counters.running_at_start.lock().unwrap().clone();
    assert_eq!(
        at_start,
        vec![0; attempts],
        "each attempt found the provider idle: the deadline travelled"
    );
    assert_eq!(engine.counters.dropped.load(Ordering::SeqCst), attempts);
}

#[tokio::test]
async fn calls_are_spread_over_replicas() {
    let cluster = Cluster::tcp();
    let mut engines = Vec::new();
    let mut nodes = Vec::new();
    for name in ["search-1", "search-2", "search-3"] {
        let (node, engine) = cluster.provider(name, Mode::Answer).await;
        nodes.push(node);
        engines.push(engine);
    }
    let client = SearchClient::new(&cluster.node("client").await);
    for _ in 0..30 {
        client.search("rust".into()).await.unwrap();
    }
    let counts: Vec<usize> = engines.iter().map(|e| e.counters.started()).collect();
    assert_eq!(counts, [10, 10, 10]);
}

/// The next minor version of `search`, half-way through a rolling deploy.
mod v2_2 {
    use crate::support::{Hit, SearchError};
    #[cluster::service(name = "search", version = "2.2.0")]
    pub trait Search {
        #[call(idempotent)]
        async fn search(&self, query: String) -> Result<Vec<Hit>, SearchError>;
    }
}

struct Upgraded;
impl v2_2::Search for Upgraded {
    async fn search(
        &self,
        query: String,
    ) -> Result<Vec<crate::support::Hit>, crate::support::SearchError> {
        Ok(vec![crate::support::Hit {
            id: 22,
            title: query,
        }])
    }
}

#[tokio::test]
async fn a_rolling_deploy_spreads_calls_over_old_and_new_versions_unless_told_otherwise() {
    let cluster = Cluster::tcp();
    let (_old, old_engine) = cluster.provider("search-1", Mode::Answer).await;
    let _new = cluster
        .node("search-2")
        .await
        .serve(v2_2::SearchServer::new(Upgraded))
        .await
        .unwrap();
    let client = SearchClient::new(&cluster.node("client").await);
    let mut upgraded = 0;
    for _ in 0..10 {
        upgraded += usize::from(client.search("rust".into()).await.unwrap()[0].id == 22);
    }
    assert_eq!(
        (upgraded, old_engine.counters.started()),
        (5, 5),
        "both versions share the load"
    );

    // As the seed did: only the newest version.
    let newest = client
        .clone()
        .with_options(cluster::CallOptions::new().newest_only(true));
    for _ in 0..4 {
        assert_eq!(newest.search("rust".into()).await.unwrap()[0].id, 22);
    }
    assert_eq!(old_engine.counters.started(), 5);
}

#[tokio::test]
async fn a_slow_replica_gets_fewer_calls_than_its_quick_peers() {
    let cluster = Cluster::tcp();
    let (_slow, slow) = cluster
        .provider("search-slow", Mode::Slow(Duration::from_millis(50)))
        .await;
    let (_a, quick_a) = cluster.provider("search-a", Mode::Answer).await;
    let (_b, quick_b) = cluster.provider("search-b", Mode::Answer).await;
    let client = SearchClient::new(&cluster.node("client").await);
    // Eight callers in parallel: requests pile up on the slow replica, and two choices on
    // outstanding requests steer new calls to the quick ones.
    let mut callers = Vec::new();
    for _ in 0..8 {
        let client = client.clone();
        callers.push(tokio::spawn(async move {
            for _ in 0..25 {
                client.search("rust".into()).await.unwrap();
            }
        }));
    }
    for caller in callers {
        caller.await.unwrap();
    }
    let (s, a, b) = (
        slow.counters.started(),
        quick_a.counters.started(),
        quick_b.counters.started(),
    );
    println!("slow {s}, quick {a} and {b}");
    assert_eq!(s + a + b, 200);
    assert!(s * 2 < a.min(b), "slow {s}, quick {a} and {b}");
}

#[tokio::test(start_paused = true)]
async fn a_peer_whose_connection_failed_is_passed_over_for_a_cool_down() {
    let cluster = Cluster::memory();
    let (dead, dead_engine) = cluster.provider("search-1", Mode::Answer).await;
    let (_live, live_engine) = cluster.provider("search-2", Mode::Answer).await;
    dead.kill().await; // the registry still lists it
    let client = SearchClient::new(&cluster.node("client").await);
    // Seen one attempt per call (`no_retry`): a call whose attempt goes to the dead peer fails.
    // After the first such failure the dead peer is ejected for 2 s: later calls go straight to
    // the live one, although taking turns would send every other call to it.
    let mut failed = 0;
    for _ in 0..6 {
        failed += usize::from(client.reindex(true).no_retry().await.is_err());
    }
    assert!(failed <= 1, "{failed} calls went to the dead peer");
    assert_eq!(live_engine.counters.started(), 6 - failed);
    assert_eq!(dead_engine.counters.started(), 0);

    // After the cool-down it is tried again (and ejected again): it is not the client's to
    // delete, the registry's failure detection is.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut failed_after = 0;
    for _ in 0..2 {
        failed_after += usize::from(client.reindex(true).no_retry().await.is_err());
    }
    assert_eq!(
        failed_after, 1,
        "one of the next two calls tries the dead peer again"
    );
    // With retries, a call that meets a dead peer goes to the live one at once: it was never
    // sent, so nothing is gained by a pause.
    tokio::time::sleep(Duration::from_secs(5)).await;
    for _ in 0..2 {
        let start = tokio::time::Instant::now();
        client.reindex(true).await.unwrap();
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
