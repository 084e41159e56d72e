//! etcd's failures, against the real server: stopped under load, a provider SIGKILLed, a
//! provider cut off from etcd while it still serves.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::Node;
use cluster_etcd::{EtcdConfig, EtcdRegistry};

use crate::support::proxy::Proxy;
use crate::support::{
    Engine, Load, Mode, SearchClient, SearchServer, etcd, identity, providers, registry_at, seen,
};

const SEC: Duration = Duration::from_secs(1);
/// The lease of the tests' registries (`registry_at`).
const TTL: Duration = Duration::from_secs(2);

async fn node_on(registry: EtcdRegistry, name: &str) -> Node {
    Node::builder()
        .identity(identity(name))
        .registry(registry)
        .start()
        .await
        .expect("node starts")
}

async fn provider_on(registry: EtcdRegistry, name: &str) -> (Node, Arc<Engine>) {
    let node = node_on(registry, name).await;
    let engine = Arc::new(Engine::new(name, Mode::Answer));
    let _r = node
        .serve(SearchServer::new(engine.clone()))
        .await
        .expect("serves");
    (node, engine)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_stopped_for_ten_seconds_under_steady_calls_fails_no_call_and_comes_back() {
    let (reg_a, reg_b) = (registry_at("/f"), registry_at("/f"));
    let (_a, a) = provider_on(reg_a.clone(), "search-a").await;
    let (_b, b) = provider_on(reg_b.clone(), "search-b").await;
    let leases = [reg_a.lease_of("search-a"), reg_b.lease_of("search-b")];
    let client_node = node_on(registry_at("/f"), "client").await;
    seen(&client_node, 10 * SEC, |n| providers(n) == 2)
        .await
        .unwrap();
    let load = Load::start(SearchClient::new(&client_node));

    etcd().borrow_mut().stop();
    let stopped = Instant::now();
    // Calls go on while etcd is down.
    load.progress(100).await;
    tokio::time::sleep((10 * SEC).saturating_sub(stopped.elapsed())).await;
    assert_eq!(providers(&client_node), 2, "lookups answer from the copy");
    etcd().borrow_mut().resume();

    // The watch is back: a provider that registers now is seen, and the two that stayed up
    // kept their leases (etcd renews every lease when it starts again).
    let (_c, _) = provider_on(registry_at("/f"), "search-c").await;
    seen(&client_node, 10 * SEC, |n| providers(n) == 3)
        .await
        .unwrap();
    // No lease was lost: each is the one granted before the stop, and etcd still holds it (a
    // question to etcd, not a wait for a TTL to pass).
    assert_eq!(
        [reg_a.lease_of("search-a"), reg_b.lease_of("search-b")],
        leases
    );
    let endpoint = format!("http://{}", etcd().borrow().client);
    let mut ctl = etcd_client::Client::connect([endpoint], None)
        .await
        .unwrap();
    for lease in leases.into_iter().flatten() {
        let left = ctl.lease_time_to_live(lease, None).await.unwrap().ttl();
        assert!(left > 0, "lease {lease} is gone");
    }
    assert_eq!(providers(&client_node), 3);
    let (ok, failed) = load.finish().await;
    assert!(
        failed.is_empty(),
        "{} of {} calls failed: {:?}",
        failed.len(),
        ok,
        failed.first()
    );
    assert!(a.counters.started() > 0 && b.counters.started() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_cut_off_from_etcd_leaves_lookups_and_comes_back_when_it_can_reach_it() {
    let upstream = etcd().borrow().client;
    let proxy = Proxy::start(upstream).await;
    let cut_off = EtcdRegistry::new(
        EtcdConfig::new([proxy.addr.to_string()])
            .plaintext()
            .prefix("/f")
            .lease_ttl(TTL),
    );
    let (cut_node, cut_engine) = provider_on(cut_off.clone(), "search-cut").await;
    let (_other, _) = provider_on(registry_at("/f"), "search-other").await;
    let client_node = node_on(registry_at("/f"), "client").await;
    seen(&client_node, 10 * SEC, |n| providers(n) == 2)
        .await
        .unwrap();
    let load = Load::start(SearchClient::new(&client_node));

    proxy.cut().await;
    let cut_at = Instant::now();
    // Its lease runs out: the others stop calling it, though it still serves.
    let took = seen(&client_node, 10 * SEC, |n| providers(n) == 1)
        .await
        .unwrap();
    assert!(
        took <= TTL + SEC,
        "out of lookups {took:?} after being cut off"
    );
    // Its own copy still answers (stale), and it still serves whoever calls it.
    assert_eq!(
        providers(&cut_node),
        2,
        "{:?}",
        cut_node
            .registry()
            .services()
            .iter()
            .map(|e| e.node.name.clone())
            .collect::<Vec<_>>()
    );
    let served = cut_engine.counters.started();
    assert_eq!(
        SearchClient::new(&cut_node)
            .search("x".into())
            .await
            .unwrap()
            .len(),
        1
    );

    // Meanwhile the history it would resume from is compacted away.
    let (_third, _) = provider_on(registry_at("/f"), "search-third").await;
    compact().await;

    proxy.restore();
    let back = seen(&client_node, 15 * SEC, |n| providers(n) == 3).await;
    assert!(back.is_ok(), "re-registered after {:?}", cut_at.elapsed());
    // Its watch read the registry again (the revision was compacted): it sees the third.
    seen(&cut_node, 10 * SEC, |n| providers(n) == 3)
        .await
        .unwrap();
    let (ok, failed) = load.finish().await;
    assert!(
        failed.is_empty(),
        "{} of {} calls failed: {:?}",
        failed.len(),
        ok,
        failed.first()
    );
    assert!(cut_engine.counters.started() > served);
}

/// Compacts etcd's history to its current revision.
async fn compact() {
    let endpoint = format!("http://{}", etcd().borrow().client);
    let mut client = etcd_client::Client::connect([endpoint], None)
        .await
        .unwrap();
    let revision = client
        .get("x", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    client.compact(revision, None).await.unwrap();
}

/// The provider a SIGKILL test runs in a process of its own (this binary, run again).
#[tokio::test]
#[ignore = "run by a_sigkilled_provider_…, in a process of its own"]
async fn child_provider() {
    let Ok(endpoint) = std::env::var("ETCD_CHILD_ENDPOINT") else {
        return;
    };
    let registry = EtcdRegistry::new(
        EtcdConfig::new([endpoint])
            .plaintext()
            .prefix("/k")
            .lease_ttl(TTL),
    );
    let (_node, _) = provider_on(registry, "search-killed").await;
    println!("serving");
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_provider_is_out_of_every_lookup_within_its_ttl_and_a_second() {
    let endpoint = etcd().borrow().endpoint();
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "failures::child_provider",
            "--ignored",
            "--nocapture",
        ])
        .env("ETCD_CHILD_ENDPOINT", &endpoint)
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let watchers = [
        node_on(registry_at("/k"), "client-1").await,
        node_on(registry_at("/k"), "client-2").await,
    ];
    for w in &watchers {
        seen(w, 20 * SEC, |n| providers(n) == 1).await.unwrap();
    }
    child.start_kill().unwrap(); // SIGKILL
    let killed_at = Instant::now();
    child.wait().await.unwrap();
    for w in &watchers {
        seen(w, 10 * SEC, |n| providers(n) == 0).await.unwrap();
        let took = killed_at.elapsed();
        assert!(
            took <= TTL + SEC,
            "out of {}'s lookups {took:?} after SIGKILL",
            w.name()
        );
    }
}
