//! The seed's deploy table, one test per row, with a client calling through each.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::{Mode, SearchClient, gossip_node, gossip_provider, providers, seen};

const SEC: Duration = Duration::from_secs(1);

/// How long the load's calls wait for a provider: a service of one replica has none between the
/// old one's withdrawal and the new one's registration, and a call fails at once by default.
const WAIT: Duration = Duration::from_secs(10);

/// A failed call of the load: the function, whether it may have run, the message.
type Failed = (&'static str, bool, String);

/// Calls `search` (idempotent) and `reindex` (not) in a loop until stopped; counts failures.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failed: Arc<std::sync::Mutex<Vec<Failed>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Load {
    fn start(client: SearchClient) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(std::sync::Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
            async move {
                let mut i = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    i += 1;
                    let (function, result) = if i.is_multiple_of(2) {
                        (
                            "search",
                            client
                                .search("rust".into())
                                .retry_after(Duration::from_millis(20))
                                .wait_for_provider(WAIT)
                                .await
                                .map(|_| ()),
                        )
                    } else {
                        (
                            "reindex",
                            client
                                .reindex(true)
                                .retry_after(Duration::from_millis(20))
                                .wait_for_provider(WAIT)
                                .await
                                .map(|_| ()),
                        )
                    };
                    match result {
                        Ok(()) => ok.fetch_add(1, Ordering::SeqCst),
                        Err(e) => {
                            failed.lock().unwrap().push((
                                function,
                                e.may_have_run(),
                                e.to_string(),
                            ));
                            0
                        }
                    };
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        });
        Self {
            stop,
            ok,
            failed,
            task,
        }
    }

    async fn calls_so_far(&self) -> usize {
        self.ok.load(Ordering::SeqCst)
    }

    async fn finish(self) -> (usize, Vec<Failed>) {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap();
        (
            self.ok.load(Ordering::SeqCst),
            self.failed.lock().unwrap().clone(),
        )
    }
}

async fn progress(load: &Load, more: usize) {
    let target = load.calls_so_far().await + more;
    crate::support::until("calls go through", || {
        load.ok.load(Ordering::SeqCst) >= target
    })
    .await;
}

/// A provider replaced by a new pod under load: `same_name` as a StatefulSet (the old one
/// leaves first, the new one takes its name), otherwise as a Deployment (the new pod with
/// another name starts first). No call may fail.
async fn replaced_under_load(same_name: bool) {
    let (client_node, reg) = gossip_node("client", &[]).await;
    let seed = reg.gossip_addr().unwrap();
    let old_name = if same_name { "search-0" } else { "search-7d9c" };
    let (old, _, _) = gossip_provider(old_name, &[seed], Mode::Answer).await;
    seen(&client_node, 10 * SEC, |n| providers(n) == 1)
        .await
        .unwrap();
    let load = Load::start(SearchClient::new(&client_node));
    progress(&load, 20).await;
    // The new pod's node is kept alive to the end: dropping it would stop its gossip.
    let (_new, engine, _) = if same_name {
        old.shutdown().await;
        gossip_provider("search-0", &[seed], Mode::Answer).await
    } else {
        let new = gossip_provider("search-a1b2", &[seed], Mode::Answer).await;
        old.shutdown().await;
        new
    };
    crate::support::until("the new pod serves", || engine.counters.started() >= 20).await;
    let (ok, failed) = load.finish().await;
    assert!(
        failed.is_empty(),
        "{} of {} calls failed: {}",
        failed.len(),
        ok + failed.len(),
        failed[0].2
    );
}

#[tokio::test]
async fn row_1_replaced_under_the_same_node_name() {
    replaced_under_load(true).await;
}

#[tokio::test]
async fn row_2_replaced_under_another_node_name() {
    replaced_under_load(false).await;
}

#[tokio::test]
async fn row_3_already_gone_from_the_registry_the_call_waits_for_the_replacement() {
    let (client_node, reg) = gossip_node("client", &[]).await;
    let seed = reg.gossip_addr().unwrap();
    let (old, _, _) = gossip_provider("search-0", &[seed], Mode::Answer).await;
    seen(&client_node, 10 * SEC, |n| providers(n) == 1)
        .await
        .unwrap();
    old.shutdown().await;
    assert_eq!(
        providers(&client_node),
        0,
        "the entry is gone before the call"
    );
    let client = SearchClient::new(&client_node);
    // By default a call that finds no provider fails at once, with the reason...
    let e = client.reindex(true).await.unwrap_err();
    assert!(
        matches!(&e, cluster::CallError::Service(e) if e.reason() == cluster::Reason::NoService),
        "{e}"
    );
    assert!(!e.may_have_run());
    // ...and one that says it waits gets the replacement.
    let call = tokio::spawn(async move { client.reindex(true).wait_for_provider(WAIT).await });
    let (_new, engine, _) = gossip_provider("search-1", &[seed], Mode::Answer).await;
    assert_eq!(
        call.await
            .unwrap()
            .expect("served by the replacement, not NoService at once"),
        42
    );
    assert_eq!(engine.counters.started(), 1);
}

#[tokio::test]
async fn row_4_one_of_several_replicas_dies_and_no_call_fails() {
    let (client_node, reg) = gossip_node("client", &[]).await;
    let seed = reg.gossip_addr().unwrap();
    let mut replicas = Vec::new();
    for name in ["search-1", "search-2", "search-3"] {
        replicas.push(gossip_provider(name, &[seed], Mode::Answer).await);
    }
    seen(&client_node, 10 * SEC, |n| providers(n) == 3)
        .await
        .unwrap();
    let load = Load::start(SearchClient::new(&client_node));
    progress(&load, 30).await;
    replicas[0].0.kill().await; // a crash: no leave, the registry lists it until detection
    seen(&client_node, 5 * SEC, |n| providers(n) == 2)
        .await
        .expect("the crash is detected");
    progress(&load, 30).await;
    let (ok, failed) = load.finish().await;
    // Every call that never reached the dead replica went elsewhere, whatever the function. The
    // one honest exception: a non-idempotent call in flight on the replica as it died may have
    // run there, so it is reported (ConnectionLost), never silently run twice.
    let unexpected: Vec<_> = failed
        .iter()
        .filter(|(function, may_have_run, _)| *function != "reindex" || !may_have_run)
        .collect();
    assert!(
        unexpected.is_empty(),
        "{} of {} calls failed: {}",
        unexpected.len(),
        ok + failed.len(),
        unexpected[0].2
    );
    assert!(
        failed.len() <= 1,
        "only the call in flight at the crash may fail: {failed:?}"
    );
}
