//! `Discovery` answers from its cache at once and refreshes it in the background, one read at
//! a time, however many callers find it due.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use cluster_discovery::client::EurekaClient;
use cluster_discovery::resolve::{Discovery, Endpoint, Resolve};
use tokio::sync::Semaphore;

/// A registry that counts its full reads and answers each only when the test lets it.
struct Gated {
    reads: AtomicUsize,
    gate: Semaphore,
}

async fn gated_server(g: Arc<Gated>) -> String {
    const DOC: &str = r#"{"applications":{"versions__delta":"1","apps__hashcode":"UP_1_","application":[{"name":"ORDERS","instance":[{"instanceId":"o-1","hostName":"10.0.0.1","app":"ORDERS","ipAddr":"10.0.0.1","status":"UP","port":{"$":8080,"@enabled":"true"},"vipAddress":"orders"}]}]}}"#;
    let app = Router::new().route(
        "/eureka/apps/",
        get(move || {
            let g = g.clone();
            async move {
                g.reads.fetch_add(1, Ordering::SeqCst);
                g.gate.acquire().await.unwrap().forget();
                ([("content-type", "application/json")], DOC)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/eureka/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

async fn until(what: &str, f: impl Fn() -> bool) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("gave up waiting until {what}"));
}

#[tokio::test]
async fn concurrent_resolves_of_a_due_cache_answer_at_once_and_start_one_read() {
    let g = Arc::new(Gated {
        reads: AtomicUsize::new(0),
        gate: Semaphore::new(1), // the first read goes through
    });
    let url = gated_server(g.clone()).await;
    let d = Arc::new(Discovery::new(EurekaClient::new([url])).refresh(Duration::ZERO));
    let orders = [Endpoint::new("10.0.0.1", 8080)];
    assert_eq!(d.resolve("orders").await.unwrap(), orders);
    assert_eq!(g.reads.load(Ordering::SeqCst), 1);

    // The cache is due on every call now; the refresh it starts is held at the server.
    for round in 0..2 {
        let calls = (0..20).map(|_| {
            let d = d.clone();
            async move { d.resolve("orders").await }
        });
        let answers =
            tokio::time::timeout(Duration::from_secs(2), futures::future::join_all(calls))
                .await
                .expect("resolves answer from the cache, not after the read");
        assert!(
            answers.iter().all(|a| matches!(a, Ok(e) if *e == orders)),
            "round {round}"
        );
        until("the background read reaches the server", || {
            g.reads.load(Ordering::SeqCst) >= 2
        })
        .await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        g.reads.load(Ordering::SeqCst),
        2,
        "40 due resolves, one read in flight"
    );

    // Once it completes, a due resolve starts the next one.
    g.gate.add_permits(10);
    tokio::time::timeout(Duration::from_secs(5), async {
        while g.reads.load(Ordering::SeqCst) < 3 {
            d.resolve("orders").await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("a new read once the first one completed");
}
