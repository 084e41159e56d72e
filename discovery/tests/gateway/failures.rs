//! What the gateway says when an instance fails, and which requests it sends elsewhere:
//! a refused connection is retried on another instance whatever the method; a connection
//! broken after the request went out is retried for idempotent methods only, else `502`; an
//! instance that does not answer in time is `504`. And a shutdown drains requests in flight.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use cluster_discovery::balance::Balancer;
use cluster_discovery::gateway::{Gateway, RunningGateway, Upstream as Route};
use cluster_discovery::resolve::{Endpoint, Static};

use axum::body::Body;
use axum::http::Request;

use crate::support::{Breaker, Upstream, client, dead_port, get, post, send};

async fn gateway(route: Route) -> RunningGateway {
    Gateway::new()
        .route("/*", route)
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap()
}

fn orders(endpoints: impl IntoIterator<Item = Endpoint>) -> Route {
    Route::service(
        "orders",
        Arc::new(Balancer::new(Static::new().service("orders", endpoints))),
    )
}

#[tokio::test]
async fn a_refused_connection_is_retried_on_another_instance_whatever_the_method() {
    let up = Upstream::start().await;
    let dead = Endpoint::new("127.0.0.1", dead_port().await);
    let gw = gateway(orders([dead, up.endpoint()])).await;
    let c = client();
    for i in 0..20 {
        let a = if i % 2 == 0 {
            get(&c, format!("{}/x", gw.url())).await
        } else {
            post(&c, format!("{}/x", gw.url()), "order").await
        };
        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
        assert_eq!(a.port(), Some(up.addr.port()));
    }
    assert_eq!(up.hits(), 20);
    gw.shutdown().await;
}

#[tokio::test]
async fn only_refusing_instances_is_502() {
    let gw = gateway(orders([Endpoint::new("127.0.0.1", dead_port().await)])).await;
    let a = get(&client(), format!("{}/x", gw.url())).await;
    assert_eq!(a.status, StatusCode::BAD_GATEWAY);
    assert!(a.text.contains("orders"), "{}", a.text);
    // The client learns what happened, not where the instances are.
    assert!(!a.text.contains("127.0.0.1"), "{}", a.text);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_broken_connection_is_retried_for_get_and_is_502_for_post() {
    // One instance breaks every connection after reading the request; the other answers.
    let (breaking, good) = (Upstream::start().await, Upstream::start().await);
    let gw = gateway(orders([breaking.endpoint(), good.endpoint()])).await;
    let c = client();
    for _ in 0..20 {
        let a = get(&c, format!("{}/break", gw.url())).await;
        // /break on the good instance is also a break: GET tries both, then gives up.
        assert_eq!(a.status, StatusCode::BAD_GATEWAY);
    }
    // Each GET reached both instances, once each (two attempts, each on another instance).
    assert_eq!(breaking.hits() + good.hits(), 40);
    let before = breaking.hits() + good.hits();
    for _ in 0..20 {
        let a = post(&c, format!("{}/break", gw.url()), "pay").await;
        assert_eq!(a.status, StatusCode::BAD_GATEWAY, "{}", a.text);
    }
    // A POST that may have been seen is never sent again.
    assert_eq!(breaking.hits() + good.hits() - before, 20);
    gw.shutdown().await;
}

#[tokio::test]
async fn an_instance_that_does_not_answer_in_time_is_504() {
    let up = Upstream::start().await;
    let gw = gateway(orders([up.endpoint()]).timeout(Duration::from_millis(300))).await;
    let started = Instant::now();
    let a = get(&client(), format!("{}/slow", gw.url())).await;
    assert_eq!(a.status, StatusCode::GATEWAY_TIMEOUT);
    assert!(started.elapsed() < Duration::from_secs(5));
    // Not retried: the instance may be working on it.
    assert_eq!(up.hits(), 1);
    gw.shutdown().await;
}

#[tokio::test]
async fn an_instance_killed_under_load_fails_no_get_and_only_posts_it_had_seen() {
    let mut ups = [
        Upstream::start().await,
        Upstream::start().await,
        Upstream::start().await,
    ];
    let gw = gateway(orders(ups.iter().map(Upstream::endpoint))).await;
    let url = gw.url();
    let c = client();
    let load = |method: &'static str| {
        let (c, url) = (c.clone(), url.clone());
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            for _ in 0..100 {
                let a = match method {
                    "GET" => get(&c, format!("{url}/x")).await,
                    _ => post(&c, format!("{url}/x"), "order").await,
                };
                statuses.push(a.status);
            }
            statuses
        })
    };
    let gets: Vec<_> = (0..4).map(|_| load("GET")).collect();
    let posts: Vec<_> = (0..4).map(|_| load("POST")).collect();
    // Kill one once the load is under way.
    while ups.iter().map(Upstream::hits).sum::<usize>() < 100 {
        tokio::task::yield_now().await;
    }
    ups[0].kill();
    for g in gets {
        assert!(
            g.await.unwrap().iter().all(|s| *s == StatusCode::OK),
            "a GET failed"
        );
    }
    let mut failed_posts = 0;
    for p in posts {
        for s in p.await.unwrap() {
            assert!(s == StatusCode::OK || s == StatusCode::BAD_GATEWAY, "{s}");
            failed_posts += usize::from(s == StatusCode::BAD_GATEWAY);
        }
    }
    // A POST fails only if it was on a connection the kill broke: in flight (at most one per
    // client, 4), or sent on a kept-alive connection to the killed instance before the gateway
    // saw it close (at most one per pooled connection: 8). Every other one was retried.
    assert!(failed_posts <= 8, "{failed_posts} POSTs failed");
    gw.shutdown().await;
}

#[tokio::test]
async fn shutdown_drains_a_request_in_flight() {
    let up = Upstream::start().await;
    let gw = gateway(orders([up.endpoint()])).await;
    let url = gw.url();
    let c = client();
    let held = tokio::spawn(async move { get(&c, format!("{url}/hold")).await });
    while up.seen.holding.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let addr = gw.addr();
    let shutdown = tokio::spawn(gw.shutdown());
    // New connections are refused once the listener is closed.
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        tokio::task::yield_now().await;
    }
    assert!(!shutdown.is_finished(), "returned with a request in flight");
    up.seen.release.notify_waiters();
    assert_eq!(held.await.unwrap().status, StatusCode::OK);
    shutdown.await.unwrap();
}

#[tokio::test]
async fn an_idempotent_request_with_a_small_body_is_sent_again_and_a_large_one_is_not() {
    let (breaker, good) = (Breaker::start().await, Upstream::start().await);
    let gw = gateway(orders([breaker.endpoint(), good.endpoint()])).await;
    let c = client();
    let put = |body: Vec<u8>| {
        Request::put(format!("{}/x", gw.url()))
            .body(Body::from(body))
            .unwrap()
    };
    // A small body is kept while it is sent (64 KiB by default): a PUT the breaker swallowed
    // goes to the other instance, body and all.
    for _ in 0..20 {
        let a = send(&c, put(b"abc".to_vec())).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
        assert_eq!(a.port(), Some(good.addr.port()));
        assert!(a.text.contains("body=3\n"), "{}", a.text);
    }
    assert!(breaker.hits() > 0, "the breaker was never chosen");
    // A POST it swallowed is not sent again: 502.
    let before = breaker.hits();
    let mut failed = 0;
    for _ in 0..20 {
        let a = post(&c, format!("{}/x", gw.url()), "abc").await;
        assert!(a.status == StatusCode::OK || a.status == StatusCode::BAD_GATEWAY);
        failed += usize::from(a.status == StatusCode::BAD_GATEWAY);
    }
    assert_eq!(failed, breaker.hits() - before);
    // A PUT larger than the copy kept: not sent again either.
    let before = breaker.hits();
    let mut failed = 0;
    for _ in 0..20 {
        let a = send(&c, put(vec![1u8; 100 * 1024])).await;
        assert!(a.status == StatusCode::OK || a.status == StatusCode::BAD_GATEWAY);
        failed += usize::from(a.status == StatusCode::BAD_GATEWAY);
    }
    assert_eq!(failed, breaker.hits() - before);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_malformed_body_from_the_client_is_400_and_not_the_instances_fault() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let up = Upstream::start().await;
    let gw = gateway(orders([up.endpoint()])).await;
    let mut tcp = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    // A first chunk, then a chunk size that is not hexadecimal.
    tcp.write_all(
        b"POST /x HTTP/1.1\r\nhost: gw\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n",
    )
    .await
    .unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("request body"), "{answer}");
    // The instance was not blamed: the next request goes to it.
    let a = get(&client(), format!("{}/x", gw.url())).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    gw.shutdown().await;
}
