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

#[tokio::test]
async fn a_first_read_goes_on_when_its_caller_gives_up() {
    let g = Arc::new(Gated {
        reads: AtomicUsize::new(0),
        gate: Semaphore::new(0), // the registry holds every read
    });
    let url = gated_server(g.clone()).await;
    let d = Discovery::new(EurekaClient::new([url]));

    // Callers give up (as a gateway's route timeout does) while the registry holds the read.
    let gave_up = tokio::time::timeout(Duration::from_millis(50), d.resolve("orders")).await;
    assert!(gave_up.is_err(), "nothing to answer from before the read");
    until("the first read reaches the server", || {
        g.reads.load(Ordering::SeqCst) >= 1
    })
    .await;
    let again = tokio::time::timeout(Duration::from_millis(50), d.resolve("orders")).await;
    assert!(again.is_err());

    // The read they started went on: the next caller is answered by it, with no second read.
    g.gate.add_permits(1);
    assert_eq!(
        d.resolve("orders").await.unwrap(),
        [Endpoint::new("10.0.0.1", 8080)]
    );
    assert_eq!(
        g.reads.load(Ordering::SeqCst),
        1,
        "one read for all callers"
    );
}

#[tokio::test]
async fn a_failed_first_read_is_not_repeated_by_every_caller() {
    let reads = Arc::new(AtomicUsize::new(0));
    let counted = reads.clone();
    let app = Router::new().route(
        "/eureka/apps/",
        get(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async {
                (
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "registry broken",
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/eureka/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let d = Discovery::new(EurekaClient::new([url]));

    for _ in 0..10 {
        let e = d.resolve("orders").await.unwrap_err();
        assert!(!e.is_no_service());
        let said = cluster_discovery::gateway::error_chain(&e);
        assert!(said.contains("registry broken"), "{said}");
    }
    assert_eq!(
        reads.load(Ordering::SeqCst),
        1,
        "within a second of a failed first read, resolves fail with its error"
    );
}

#[tokio::test]
async fn a_registry_answer_past_the_cap_is_a_failed_read_not_a_growing_buffer() {
    // One answer with its length declared, one streamed without (chunked).
    let app = Router::new()
        .route("/declared/apps/", get(|| async { "x".repeat(4096) }))
        .route(
            "/streamed/apps/",
            get(|| async {
                let chunks = (0..64).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1024]));
                axum::body::Body::from_stream(futures::stream::iter(chunks))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    for path in ["declared", "streamed"] {
        let client = EurekaClient::new([format!("{base}/{path}/")]).max_answer_bytes(2048);
        let e = client.applications().await.unwrap_err();
        let said = cluster_discovery::gateway::error_chain(&e);
        assert!(said.contains("larger than 2048 bytes"), "{path}: {said}");
    }
}

#[tokio::test]
async fn a_server_that_is_no_registry_does_not_stop_the_next_from_being_asked() {
    // One answers 404 (no such route), one a web page with 200.
    let html = Router::new().route("/eureka/apps/", get(|| async { "<html>welcome</html>" }));
    for (what, app) in [("a 404", Router::new()), ("an HTML page", html)] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let not_a_registry = format!("http://{}/eureka/", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let g = Arc::new(Gated {
            reads: AtomicUsize::new(0),
            gate: Semaphore::new(1),
        });
        let registry = gated_server(g).await;
        let d = Discovery::new(EurekaClient::new([not_a_registry, registry]));
        assert_eq!(
            d.resolve("orders").await.unwrap(),
            [Endpoint::new("10.0.0.1", 8080)],
            "the first answered {what}; the second was asked"
        );
    }
}

#[tokio::test]
async fn a_password_in_a_server_url_stays_out_of_errors() {
    // A port held but never listened on refuses connections.
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let url = format!("http://app:s3cretPW@{}/eureka/", held.local_addr().unwrap());
    let e = EurekaClient::new([url]).applications().await.unwrap_err();
    let said = cluster_discovery::gateway::error_chain(&e);
    assert!(!said.contains("s3cretPW"), "{said}");
    assert!(said.contains("app:***@"), "{said}");
}
