//! A real WebSocket session through the gateway: the client's handshake reaches the instance,
//! its 101 comes back, and text, binary, ping and close frames pass both ways unchanged.

use std::sync::Arc;

use cluster_discovery::balance::Balancer;
use cluster_discovery::gateway::{Gateway, Upstream as Route};
use cluster_discovery::resolve::{Endpoint, Static};
use futures::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::Message;

/// A WebSocket echo server on a port of its own: each message comes back as it went.
async fn echo_server() -> (Endpoint, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
                    return;
                };
                while let Some(Ok(message)) = ws.next().await {
                    if message.is_text() || message.is_binary() {
                        if ws.send(message).await.is_err() {
                            return;
                        }
                    } else if message.is_close() {
                        let _ = ws.close(None).await;
                        return;
                    }
                }
            });
        }
    });
    (Endpoint::new("127.0.0.1", port), task)
}

#[tokio::test]
async fn a_websocket_session_passes_through_frame_for_frame() {
    let (endpoint, server) = echo_server().await;
    let balancer = Arc::new(Balancer::new(Static::new().service("chat", [endpoint])));
    let gw = Gateway::new()
        .route("/chat/*", Route::service("chat", balancer).strip("/chat"))
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let url = format!("ws://{}/chat/room/1", gw.addr());
    let tcp = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let (mut ws, answer) = tokio_tungstenite::client_async(url, tcp)
        .await
        .expect("the handshake passes");
    assert_eq!(answer.status(), 101);

    let big = vec![7u8; 200_000];
    for message in [
        Message::text("hello through the gateway"),
        Message::binary(big.clone()),
        Message::text("é ✓"),
    ] {
        ws.send(message.clone()).await.unwrap();
        let back = loop {
            match ws.next().await.expect("an answer").unwrap() {
                Message::Ping(_) | Message::Pong(_) => continue,
                other => break other,
            }
        };
        assert_eq!(back, message);
    }
    ws.close(None).await.unwrap();
    // The close handshake completes: the server's close frame comes back, then the stream ends.
    while let Some(frame) = ws.next().await {
        if frame.is_err() {
            break;
        }
    }
    // Both ends closed: the tunnel ends, and the gateway's drain has nothing left to wait for.
    drop(ws);
    gw.shutdown().await;
    server.abort();
}

#[tokio::test]
async fn an_idle_tunnel_is_closed_and_gives_its_place_back() {
    let (endpoint, server) = echo_server().await;
    let balancer = Arc::new(Balancer::new(Static::new().service("chat", [endpoint])));
    let mut limits = cluster_discovery::gateway::GatewayLimits::default();
    limits.tunnel_idle_timeout = std::time::Duration::from_millis(200);
    limits.max_connections = 1;
    let gw = Gateway::new()
        .route("/chat/*", Route::service("chat", balancer).strip("/chat"))
        .limits(limits)
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let open = || async {
        let tcp = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
        tokio_tungstenite::client_async(format!("ws://{}/chat/1", gw.addr()), tcp).await
    };
    let (mut ws, _) = open().await.expect("the handshake passes");
    ws.send(Message::text("hello")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hello"));

    // Then nothing either way: the gateway closes the tunnel (the stream ends)...
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    assert!(ended.is_ok(), "an idle tunnel stays open");
    // ... and its place (the only one) serves the next client.
    let again = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            if let Ok((ws, answer)) = open().await {
                break (ws, answer.status());
            }
        }
    })
    .await
    .expect("the place came back");
    assert_eq!(again.1, 101);
    drop(again);
    gw.shutdown().await;
    server.abort();
}
