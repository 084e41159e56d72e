//! Connections on a real socket: a head sent half (slow-loris) or never, an idle keep-alive
//! connection, a body trickled, more connections than the limit, a response nobody reads. Each
//! test waits for the server's move (a close, an answer), never for a fixed time.

use std::time::{Duration, Instant};

use cluster_discovery::server::{Limits, RunningServer, ServerConfig, ServerTls};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::until;

async fn start(limits: Limits) -> RunningServer {
    let mut config = ServerConfig::default();
    config.warm_up = false;
    config.limits = limits;
    crate::support::open_server()
        .config(config)
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

fn quick() -> Limits {
    let mut limits = Limits::default();
    limits.header_read_timeout = Duration::from_millis(300);
    limits
}

/// Reads until the server closes the connection (or resets it): what it sent.
async fn until_closed(tcp: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 65_536];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the server did not close the connection");
    got
}

async fn a_normal_read_works(server: &RunningServer) {
    let r = reqwest::Client::new()
        .get(format!("{}apps/", server.url()))
        .timeout(Duration::from_secs(1))
        .send()
        .await
        .expect("a normal read is answered");
    assert_eq!(r.status(), reqwest::StatusCode::OK);
}

#[tokio::test]
async fn a_head_sent_half_is_closed_after_the_header_timeout() {
    let server = start(quick()).await;
    let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
    let started = Instant::now();
    tcp.write_all(b"GET /eureka/apps HTTP/1.1\r\nhost: x\r\nx-slow: ")
        .await
        .unwrap();
    until_closed(&mut tcp).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    a_normal_read_works(&server).await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    let server = start(quick()).await;
    let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
    tcp.write_all(b"GET /eureka/status HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let answered = until_closed(&mut tcp).await;
    assert!(
        answered.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answered)
    );
    until("every connection is closed", || async {
        server.connections() == 0
    })
    .await;
}

#[tokio::test]
async fn a_body_trickled_is_408_after_the_request_timeout() {
    let mut limits = Limits::default();
    limits.request_timeout = Duration::from_millis(300);
    let server = start(limits).await;
    let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
    tcp.write_all(
        b"POST /eureka/apps/ORDERS HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
          content-length: 1000\r\n\r\n{\"instance\":",
    )
    .await
    .unwrap();
    let answer = until_closed(&mut tcp).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("took longer than 300ms"), "{answer}");
    a_normal_read_works(&server).await;
}

#[tokio::test]
async fn past_the_connection_limit_a_connection_is_503_and_a_freed_place_is_taken_again() {
    let mut limits = Limits::default();
    limits.max_connections = 2;
    let server = start(limits).await;
    let first = TcpStream::connect(server.addr()).await.unwrap();
    let _second = TcpStream::connect(server.addr()).await.unwrap();
    until("both are accepted", || async { server.connections() == 2 }).await;
    let mut third = TcpStream::connect(server.addr()).await.unwrap();
    let refused = until_closed(&mut third).await;
    let refused = String::from_utf8_lossy(&refused);
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(refused.contains("too many connections"), "{refused}");
    let r = reqwest::get(format!("{}apps/", server.url())).await;
    assert!(
        r.map_or(true, |r| r.status()
            == reqwest::StatusCode::SERVICE_UNAVAILABLE),
        "no place for a client either"
    );
    drop(first);
    until("the place is free", || async { server.connections() < 2 }).await;
    a_normal_read_works(&server).await;
}

#[tokio::test]
async fn a_client_that_does_not_read_its_response_loses_its_connection() {
    let mut limits = quick();
    limits.write_timeout = Duration::from_millis(300);
    let server = start(limits).await;
    // A registry of about 30 MB: more than the socket buffers hold, on both sides.
    let http = reqwest::Client::new();
    let filler = "x".repeat(60_000);
    for k in 0..500 {
        let body = serde_json::json!({"instance": {"app": "BIG", "instanceId": format!("big-{k}"),
            "hostName": "h", "ipAddr": "1.1.1.1", "metadata": {"filler": filler}}});
        let r = http
            .post(format!("{}apps/BIG", server.url()))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), reqwest::StatusCode::NO_CONTENT);
    }
    drop(http);
    let mut staller = TcpStream::connect(server.addr()).await.unwrap();
    staller
        .write_all(b"GET /eureka/apps HTTP/1.1\r\nhost: x\r\naccept: application/json\r\n\r\n")
        .await
        .unwrap();
    // It never reads; the server gives up on it (and the idle client's connection closes too).
    until("the staller's connection is closed", || async {
        server.connections() == 0
    })
    .await;
    let got = until_closed(&mut staller).await;
    assert!(
        got.len() < 30_000_000,
        "it did not get the whole registry: {}",
        got.len()
    );
    a_normal_read_works(&server).await;
}

#[tokio::test]
async fn a_tls_handshake_never_started_is_closed_after_the_header_timeout() {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let mut config = ServerConfig::default();
    config.warm_up = false;
    config.limits = quick();
    let server = crate::support::open_server()
        .config(config)
        .tls(ServerTls::from_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes()).unwrap())
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut silent = TcpStream::connect(server.addr()).await.unwrap();
    until("it is accepted", || async { server.connections() == 1 }).await;
    until_closed(&mut silent).await;
    until("its place is free", || async { server.connections() == 0 }).await;
}
