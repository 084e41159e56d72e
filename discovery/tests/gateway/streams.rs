//! Bodies stream through, never held whole; the body limit; upgrades pass through.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use cluster_discovery::balance::Balancer;
use cluster_discovery::gateway::{Gateway, GatewayLimits, RunningGateway, Upstream as Route};
use cluster_discovery::resolve::Static;
use futures::SinkExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support::{Upstream, channel_body, client, send};

async fn gateway(up: &Upstream, limits: GatewayLimits) -> RunningGateway {
    let b = Arc::new(Balancer::new(
        Static::new().service("files", [up.endpoint()]),
    ));
    Gateway::new()
        .route("/*", Route::service("files", b))
        .limits(limits)
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_100_mb_body_streams_through_with_bounded_memory() {
    const TOTAL: u64 = 100 << 20;
    const CHUNK: usize = 64 << 10;
    let up = Upstream::start().await;
    let gw = gateway(&up, GatewayLimits::default()).await;
    let (mut tx, body) = channel_body();
    let req = Request::post(format!("{}/upload", gw.url()))
        .body(body)
        .unwrap();
    let c = client();
    let answer = tokio::spawn(async move { send(&c, req).await });
    // Fed as fast as the gateway takes it: how far the sender ever gets ahead of what the
    // instance has read is what the gateway (and the sockets between) hold. Buffering the
    // body whole would let the sender finish before the instance read much.
    let chunk = Bytes::from(vec![7u8; CHUNK]);
    let (mut sent, mut ahead) = (0u64, 0u64);
    while sent < TOTAL {
        tx.send(chunk.clone()).await.unwrap();
        sent += CHUNK as u64;
        ahead = ahead.max(sent - up.seen.bytes.load(Ordering::SeqCst));
    }
    drop(tx);
    let a = answer.await.unwrap();
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.text.contains(&format!("body={TOTAL}\n")), "{}", a.text);
    // Measured here: under 1 MiB. Loopback sockets may buffer a few MiB each (autotuned up to
    // tcp_rmem's maximum), so the bound leaves room; a copy of the body would be all 100.
    assert!(ahead < 32 << 20, "the sender got {} MiB ahead", ahead >> 20);
    gw.shutdown().await;
}

#[tokio::test]
async fn bodies_over_the_limit_are_413_declared_or_streamed() {
    let up = Upstream::start().await;
    let mut limits = GatewayLimits::default();
    limits.max_body_bytes = 1000;
    let gw = gateway(&up, limits).await;
    let c = client();
    let declared = Request::post(format!("{}/x", gw.url()))
        .body(Body::from(vec![1u8; 1001]))
        .unwrap();
    assert_eq!(
        send(&c, declared).await.status,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    assert_eq!(up.hits(), 0, "refused before anything was sent");
    let (mut tx, body) = channel_body();
    let streamed = Request::post(format!("{}/x", gw.url())).body(body).unwrap();
    let c2 = c.clone();
    let answer = tokio::spawn(async move { send(&c2, streamed).await });
    for _ in 0..3 {
        // The gateway stops reading past the limit: a send may then fail, which is fine.
        if tx.send(Bytes::from(vec![1u8; 600])).await.is_err() {
            break;
        }
    }
    drop(tx);
    assert_eq!(answer.await.unwrap().status, StatusCode::PAYLOAD_TOO_LARGE);
    let within = Request::post(format!("{}/x", gw.url()))
        .body(Body::from(vec![1u8; 1000]))
        .unwrap();
    assert_eq!(send(&c, within).await.status, StatusCode::OK);
    gw.shutdown().await;
}

#[tokio::test]
async fn an_upgrade_passes_through_and_echoes() {
    let up = Upstream::start().await;
    let gw = gateway(&up, GatewayLimits::default()).await;
    // A WebSocket-shaped handshake by hand; the instance switches to a plain echo.
    let mut tcp = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    tcp.write_all(
        b"GET /ws HTTP/1.1\r\nhost: gw\r\nconnection: Upgrade\r\nupgrade: echo\r\n\
          sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        assert_eq!(
            tcp.read(&mut byte).await.unwrap(),
            1,
            "closed: {}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: echo"), "{head}");
    for msg in [&b"hello"[..], b"through the gateway"] {
        tcp.write_all(msg).await.unwrap();
        let mut back = vec![0u8; msg.len()];
        tcp.read_exact(&mut back).await.unwrap();
        assert_eq!(back, msg);
    }
    drop(tcp);
    gw.shutdown().await;
}

#[tokio::test]
async fn an_answer_framed_both_ways_is_read_as_chunked_and_sent_on_whole() {
    // An instance that says both Content-Length: 3 and chunked (RFC 9112 §6.3: chunked wins,
    // and a proxy drops the length).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = tcp.read(&mut buf).await;
            let _ = tcp
                .write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n\
                      5\r\nhello\r\n0\r\n\r\n",
                )
                .await;
        }
    });
    let b = Arc::new(Balancer::new(Static::new().service(
        "ambiguous",
        [cluster_discovery::resolve::Endpoint::new("127.0.0.1", port)],
    )));
    let gw = Gateway::new()
        .route("/*", Route::service("ambiguous", b))
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let answer = crate::support::get(&client(), format!("{}/x", gw.url())).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.text, "hello");
    gw.shutdown().await;
    server.abort();
}
