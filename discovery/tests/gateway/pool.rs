//! Each worker's connections to instances (`src/gateway/pool.rs`): kept alive and used again,
//! whatever the answer's shape, and never one that is still busy.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{Method, Request, StatusCode};
use cluster_discovery::balance::Balancer;
use cluster_discovery::gateway::{Gateway, RunningGateway, Upstream as Route};
use cluster_discovery::resolve::Static;
use futures::SinkExt as _;

use crate::support::{Upstream, channel_body, client, get, send};

/// One worker, so that every request goes through the one pool.
async fn gateway(up: &Upstream) -> RunningGateway {
    let b = Arc::new(Balancer::new(
        Static::new().service("orders", [up.endpoint()]),
    ));
    Gateway::new()
        .route("/*", Route::service("orders", b))
        .workers(1)
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap()
}

#[tokio::test]
async fn one_connection_to_the_instance_carries_requests_one_after_another() {
    let up = Upstream::start().await;
    let gw = gateway(&up).await;
    let c = client();
    for i in 0..60 {
        let (method, path, status) = match i % 3 {
            0 => (Method::GET, "/x", StatusCode::OK),
            // Bodies hyper may never poll: the connection must still go back to the pool.
            1 => (Method::HEAD, "/x", StatusCode::OK),
            _ => (Method::GET, "/empty", StatusCode::NO_CONTENT),
        };
        let req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", gw.url()))
            .body(Body::empty())
            .unwrap();
        assert_eq!(send(&c, req).await.status, status, "request {i}");
    }
    assert_eq!(
        up.seen
            .connections
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn a_connection_still_sending_a_body_the_instance_answered_early_is_not_used_again() {
    let up = Upstream::start().await;
    let gw = gateway(&up).await;
    let c = client();
    // The instance answers before reading the body, which the client keeps sending.
    let (mut tx, body) = channel_body();
    tx.send(Bytes::from_static(b"part of an upload"))
        .await
        .unwrap();
    let req = Request::post(format!("{}/early", gw.url()))
        .body(body)
        .unwrap();
    let early = send(&c, req).await;
    assert_eq!(early.status, StatusCode::OK);
    // The next request must not wait behind the upload still going out.
    let next = tokio::time::timeout(
        Duration::from_secs(5),
        get(&client(), format!("{}/x", gw.url())),
    )
    .await
    .expect("the next request waited for the busy connection");
    assert_eq!(next.status, StatusCode::OK);
    drop(tx);
    gw.shutdown().await;
}

/// An instance that answers the first request of each connection and closes the connection
/// on the second without an answer: as one that closed an idle connection just as the next
/// request went out on it.
async fn closes_kept_alive_connections() -> (
    cluster_discovery::resolve::Endpoint,
    tokio::task::JoinHandle<()>,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                let mut answered = false;
                while let Ok(n) = tcp.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    if !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        continue;
                    }
                    if answered {
                        return; // closed without an answer
                    }
                    answered = true;
                    seen.clear();
                    let _ = tcp
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n")
                        .await;
                }
            });
        }
    });
    (
        cluster_discovery::resolve::Endpoint::new("127.0.0.1", port),
        task,
    )
}

#[tokio::test]
async fn a_kept_alive_connection_the_instance_closed_costs_an_idempotent_request_nothing() {
    let (instance, task) = closes_kept_alive_connections().await;
    let b = Arc::new(Balancer::new(Static::new().service("orders", [instance])));
    let gw = Gateway::new()
        .route("/*", Route::service("orders", b))
        .workers(1)
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let c = client();
    // Every GET after the first goes out on the kept-alive connection, which breaks: one
    // free try more, on a new connection, and it is answered. One instance: no other to try.
    for i in 0..5 {
        let a = get(&c, format!("{}/x", gw.url())).await;
        assert_eq!(a.status, StatusCode::OK, "GET {i}: {}", a.text);
    }
    // A POST may have been seen: not sent again.
    let a = crate::support::post(&c, format!("{}/x", gw.url()), "pay").await;
    assert_eq!(a.status, StatusCode::BAD_GATEWAY, "{}", a.text);
    gw.shutdown().await;
    task.abort();
}
