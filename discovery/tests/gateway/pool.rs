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
