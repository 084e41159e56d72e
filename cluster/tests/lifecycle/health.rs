//! The startup probe gates registration; the periodic check takes a service down and up;
//! a bound task takes it with it. On tokio's paused clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use cluster::registry::RegistryEvent;
use cluster::{Health, Node, ServiceStatus};
use tokio::time::Instant;

use crate::support::{Cluster, Engine, Mode, SearchClient, SearchServer, providers};

#[tokio::test(start_paused = true)]
async fn a_service_registers_only_once_its_startup_probe_passes() {
    let cluster = Cluster::memory();
    let node = cluster.node("search-1").await;
    let tries = Arc::new(AtomicUsize::new(0));
    let probe = {
        let tries = tries.clone();
        move || {
            let tries = tries.clone();
            async move {
                match tries.fetch_add(1, Ordering::SeqCst) {
                    0..=2 => Err("the index is still loading"),
                    _ => Ok(()),
                }
            }
        }
    };
    let start = Instant::now();
    let engine = Arc::new(Engine::new("search-1", Mode::Answer));
    let mut registration = node.serve_with(SearchServer::new(engine), Health::new().startup(probe));
    assert_eq!(registration.status(), ServiceStatus::Starting);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(providers(&node), 0, "not routable before the probe passes");

    registration.wait_for(ServiceStatus::Up).await;
    assert_eq!(tries.load(Ordering::SeqCst), 4);
    // Backoff 100, 200, 400 ms between the four tries.
    assert_eq!(start.elapsed().as_millis() / 10 * 10, 700);
    assert_eq!(providers(&node), 1);
    let client = SearchClient::new(&cluster.node("client").await);
    assert_eq!(client.search("rust".into()).await.unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_failing_health_check_takes_the_service_down_everywhere_and_back_up() {
    let cluster = Cluster::memory();
    let node = cluster.node("search-1").await;
    let healthy = Arc::new(AtomicBool::new(true));
    let check = {
        let healthy = healthy.clone();
        move || {
            let ok = healthy.load(Ordering::SeqCst);
            async move { if ok { Ok(()) } else { Err("the disk is full") } }
        }
    };
    let mut events = cluster.registry_events();
    let engine = Arc::new(Engine::new("search-1", Mode::Answer));
    let health = Health::new()
        .check(check)
        .every(Duration::from_secs(1))
        .down_after(2);
    let mut registration = node.serve_with(SearchServer::new(engine), health);
    registration.wait_for(ServiceStatus::Up).await;

    healthy.store(false, Ordering::SeqCst);
    let start = Instant::now();
    registration.wait_for(ServiceStatus::Down).await;
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(2),
        "two failed checks, a second apart"
    );
    assert_eq!(providers(&node), 0);
    // A node that passes over every failing replica, even the last, finds none...
    let strict = Node::builder()
        .name("strict")
        .registry(cluster.registry.clone())
        .memory(cluster.memory.as_ref().unwrap())
        .panic_threshold(1.0)
        .start()
        .await
        .unwrap();
    let err = SearchClient::new(&strict)
        .search("rust".into())
        .await
        .unwrap_err();
    assert!(
        matches!(err, cluster::CallError::Service(ref e) if e.reason() == cluster::Reason::NoService
            && e.detail().contains("fails its health check")),
        "{err}"
    );
    // ...while by default the only replica, failing, is still called: the panic threshold
    // (more than half the replicas fail) keeps a check that fails everywhere from emptying the
    // service.
    let client = SearchClient::new(&cluster.node("client").await);
    assert_eq!(client.search("rust".into()).await.unwrap().len(), 1);

    healthy.store(true, Ordering::SeqCst);
    registration.wait_for(ServiceStatus::Up).await;
    assert_eq!(providers(&node), 1);

    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        match event {
            RegistryEvent::ServiceUp(_) => seen.push("up"),
            RegistryEvent::ServiceDown(_) => seen.push("down"),
            _ => {}
        }
    }
    assert_eq!(seen, ["up", "down", "up"]);
}

#[tokio::test(start_paused = true)]
async fn when_the_task_serving_a_service_ends_its_registration_goes_with_it() {
    let cluster = Cluster::memory();
    let node = cluster.node("search-1").await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(async move {
        let _ = stopped.await; // a worker loop the service depends on
    });
    let engine = Arc::new(Engine::new("search-1", Mode::Answer));
    let mut registration =
        node.serve_with(SearchServer::new(engine), Health::new().bound_to(worker));
    registration.wait_for(ServiceStatus::Up).await;
    assert_eq!(providers(&node), 1);
    drop(stop);
    registration.wait_for(ServiceStatus::Stopped).await;
    assert_eq!(providers(&node), 0);
}

/// A replica: the flag its check reads, its engine, its registration and its node.
type Replica = (Arc<AtomicBool>, Arc<Engine>, cluster::Registration, Node);

/// A service of four replicas whose checks a flag fails, replica by replica.
async fn four_replicas(cluster: &Cluster) -> Vec<Replica> {
    let mut replicas = Vec::new();
    for i in 0..4 {
        let name = format!("search-{i}");
        let node = cluster.node(&name).await;
        let healthy = Arc::new(AtomicBool::new(true));
        let check = {
            let healthy = healthy.clone();
            move || {
                let ok = healthy.load(Ordering::SeqCst);
                async move {
                    if ok {
                        Ok(())
                    } else {
                        Err("the shared cache is down")
                    }
                }
            }
        };
        let engine = Arc::new(Engine::new(&name, Mode::Answer));
        let health = Health::new()
            .check(check)
            .every(Duration::from_secs(1))
            .down_after(1);
        let mut registration = node.serve_with(SearchServer::new(engine.clone()), health);
        registration.wait_for(ServiceStatus::Up).await;
        replicas.push((healthy, engine, registration, node));
    }
    replicas
}

#[tokio::test(start_paused = true)]
async fn failing_replicas_are_passed_over_until_more_than_half_fail_then_all_are_called() {
    let cluster = Cluster::memory();
    let mut replicas = four_replicas(&cluster).await;
    let client = SearchClient::new(&cluster.node("client").await);
    let calls_to = |replicas: &[Replica]| {
        replicas
            .iter()
            .map(|(_, e, ..)| e.counters.started())
            .collect::<Vec<_>>()
    };
    let mut before = calls_to(&replicas);
    for failing in 1..=4 {
        let (healthy, _, registration, _) = &mut replicas[failing - 1];
        healthy.store(false, Ordering::SeqCst);
        registration.wait_for(ServiceStatus::Down).await;
        for _ in 0..40 {
            client.search("rust".into()).await.unwrap();
        }
        let after = calls_to(&replicas);
        let got: Vec<usize> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        before = after;
        let expected: Vec<usize> = match failing {
            // Up to half failing: the others take every call, evenly.
            1 => vec![0, 14, 13, 13],
            2 => vec![0, 0, 20, 20],
            // Three of four, then all four: more than half, so all are called.
            _ => vec![10, 10, 10, 10],
        };
        let mut got_sorted = got.clone();
        let mut expected_sorted = expected.clone();
        got_sorted.sort_unstable();
        expected_sorted.sort_unstable();
        assert_eq!(got_sorted, expected_sorted, "{failing} failing: {got:?}");
        for (i, n) in got.iter().enumerate() {
            if i < failing && failing <= 2 {
                assert_eq!(
                    *n, 0,
                    "{failing} failing: replica {i} is passed over: {got:?}"
                );
            }
        }
    }
}
