//! The `EurekaRegistry` backend reads the whole registry once, then deltas; a delta that
//! disagrees with the server's hashcode makes it read the whole registry again.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use cluster_discovery::backend::{EurekaRegistry, EurekaRegistryConfig};
use cluster_discovery::client::EurekaClient;
use cluster_discovery::model::{Applications, Instance, json};

#[derive(Default)]
struct Fake {
    full: AtomicUsize,
    deltas: AtomicUsize,
    /// The hashcode the delta says the registry has.
    delta_hash: std::sync::Mutex<String>,
}

async fn apps(State(fake): State<Arc<Fake>>) -> Vec<u8> {
    fake.full.fetch_add(1, Ordering::SeqCst);
    let one = Instance::new("spring", "10.0.0.1", 8080).with_id("s-1");
    json::write_applications(&Applications::group("1", "UP_1_", [one]))
}

async fn delta(State(fake): State<Arc<Fake>>) -> Vec<u8> {
    fake.deltas.fetch_add(1, Ordering::SeqCst);
    let hash = fake.delta_hash.lock().unwrap().clone();
    json::write_applications(&Applications::group("2", hash, []))
}

#[tokio::test]
async fn the_backend_reads_deltas_after_one_full_read_and_reads_whole_on_a_mismatch() {
    let fake = Arc::new(Fake::default());
    *fake.delta_hash.lock().unwrap() = "UP_1_".into();
    let app = Router::new()
        .route("/eureka/apps/", get(apps))
        .route("/eureka/apps/delta", get(delta))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/eureka/", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let mut config = EurekaRegistryConfig::default();
    // The background task reads once at start, then not within the test.
    config.fetch_interval = Duration::from_secs(3_600);
    let registry = EurekaRegistry::start(EurekaClient::new([url]), config).await;
    // The background task's first read comes at a moment of its own: waited for, so that it
    // does not fall after the change below (it would read whole once more).
    tokio::time::timeout(Duration::from_secs(10), async {
        while fake.full.load(Ordering::SeqCst) + fake.deltas.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the background task reads at start");
    for _ in 0..3 {
        registry.refresh().await;
    }
    // The start's read and the background task's first one race; one of them reads whole.
    assert_eq!(fake.full.load(Ordering::SeqCst), 1);
    assert!(fake.deltas.load(Ordering::SeqCst) >= 3);

    *fake.delta_hash.lock().unwrap() = "UP_2_".into(); // a change this copy missed
    registry.refresh().await;
    assert_eq!(fake.full.load(Ordering::SeqCst), 2, "read whole again");
    server.abort();
}
