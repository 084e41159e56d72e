//! What a client can make the gateway hold is bounded: connections (one past the limit is
//! answered 503 and closed), the request head's size (431) and the time to send it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster_discovery::balance::Balancer;
use cluster_discovery::gateway::{Gateway, GatewayLimits, RunningGateway, Upstream as Route};
use cluster_discovery::resolve::Static;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::support::Upstream;

async fn gateway(up: &Upstream, limits: GatewayLimits) -> RunningGateway {
    let b = Arc::new(Balancer::new(
        Static::new().service("orders", [up.endpoint()]),
    ));
    Gateway::new()
        .route("/*", Route::service("orders", b))
        .limits(limits)
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap()
}

/// Everything the gateway sends until it closes the connection (or 5 s pass).
async fn until_closed(tcp: &mut TcpStream) -> String {
    let mut all = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut all)).await;
    String::from_utf8_lossy(&all).into_owned()
}

/// Reads one answer's head on a kept-alive connection.
async fn head(tcp: &mut TcpStream) -> String {
    let mut got = Vec::new();
    while !got.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        if tcp.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        got.push(byte[0]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn a_connection_past_the_limit_is_answered_503_and_closed() {
    let up = Upstream::start().await;
    let mut limits = GatewayLimits::default();
    limits.max_connections = 1;
    let gw = gateway(&up, limits).await;
    // The only place, held by a kept-alive connection that was served.
    let mut first = TcpStream::connect(gw.addr()).await.unwrap();
    first
        .write_all(b"GET /x HTTP/1.1\r\nhost: a\r\n\r\n")
        .await
        .unwrap();
    assert!(head(&mut first).await.starts_with("HTTP/1.1 200"));
    let mut second = TcpStream::connect(gw.addr()).await.unwrap();
    let answer = until_closed(&mut second).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    drop(first);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_head_too_large_is_431_and_a_head_too_slow_is_closed() {
    let up = Upstream::start().await;
    let mut limits = GatewayLimits::default();
    limits.max_header_bytes = 8 * 1024;
    limits.header_read_timeout = Duration::from_millis(300);
    let gw = gateway(&up, limits).await;
    let mut big = TcpStream::connect(gw.addr()).await.unwrap();
    let filler = "a".repeat(16 * 1024);
    let _ = big
        .write_all(format!("GET /x HTTP/1.1\r\nhost: a\r\nx-big: {filler}\r\n\r\n").as_bytes())
        .await;
    let answer = until_closed(&mut big).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    assert_eq!(up.hits(), 0);

    let started = Instant::now();
    let mut slow = TcpStream::connect(gw.addr()).await.unwrap();
    slow.write_all(b"GET /x HTTP/1.1\r\nhost: a\r\n")
        .await
        .unwrap(); // never finished
    let answer = until_closed(&mut slow).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn a_port_in_use_is_an_error_not_a_port_shared_with_another_gateway() {
    let up = Upstream::start().await;
    let route = || {
        let b = Arc::new(Balancer::new(
            Static::new().service("orders", [up.endpoint()]),
        ));
        Route::service("orders", b)
    };
    // Each worker listens on a socket of its own (SO_REUSEPORT on Linux), all on one port.
    let first = Gateway::new()
        .route("/*", route())
        .workers(3)
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let second = Gateway::new()
        .route("/*", route())
        .workers(3)
        .start(first.addr())
        .await;
    assert_eq!(
        second.unwrap_err().kind(),
        std::io::ErrorKind::AddrInUse,
        "a second gateway must not join the first's sockets"
    );
    // And the first serves on every one of its sockets (a new connection each time).
    for _ in 0..30 {
        let a = crate::support::get(&crate::support::client(), format!("{}/x", first.url())).await;
        assert_eq!(a.status, axum::http::StatusCode::OK);
    }
    first.shutdown().await;
}

#[tokio::test]
async fn limits_out_of_range_are_refused_by_start_not_met_by_a_worker_panicking() {
    let b = Arc::new(Balancer::new(Static::new()));
    let mut limits = GatewayLimits::default();
    // hyper would reserve this many header slots for every request.
    limits.max_headers = usize::MAX;
    let e = Gateway::new()
        .route("/*", Route::service("orders", b))
        .limits(limits)
        .start(([127, 0, 0, 1], 0).into())
        .await
        .expect_err("refused");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("max_headers"), "{e}");
}
