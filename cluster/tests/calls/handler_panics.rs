//! Attacks on a handler's panic (catch_unwind.rs, server/dispatch.rs): in its first poll, in a
//! later poll, with a non-string payload, in a Drop at its end, in a Drop when the caller gives
//! up, and with a payload whose own Drop panics. Each must end only its request, with an error
//! that says it panicked; the node goes on serving. In memory and over TCP.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cluster::Node;

use crate::support::Cluster;

#[cluster::service(name = "fragile", version = "1.0.0", timeout = "2s")]
pub trait Fragile {
    async fn first_poll(&self) -> u32;
    async fn later_poll(&self) -> u32;
    async fn payload(&self) -> u32;
    async fn in_drop(&self) -> u32;
    async fn in_drop_on_cancel(&self) -> u32;
    async fn payload_panics_in_drop(&self) -> u32;
    async fn ok(&self) -> u32;
}

/// Panics when dropped (not while already panicking: that would abort the process).
struct Bomb(&'static str);

impl Drop for Bomb {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("{}", self.0);
        }
    }
}

#[derive(Default)]
struct Shard {
    served: AtomicUsize,
}

impl Fragile for Arc<Shard> {
    async fn first_poll(&self) -> u32 {
        panic!("boom in the first poll");
    }

    async fn later_poll(&self) -> u32 {
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
        panic!("boom in a later poll");
    }

    async fn payload(&self) -> u32 {
        std::panic::panic_any(42u32);
    }

    async fn in_drop(&self) -> u32 {
        let _bomb = Bomb("boom in a drop at the handler's end");
        tokio::task::yield_now().await;
        7
    }

    async fn in_drop_on_cancel(&self) -> u32 {
        let _bomb = Bomb("boom in a drop when the caller gave up");
        std::future::pending::<()>().await;
        7
    }

    async fn payload_panics_in_drop(&self) -> u32 {
        std::panic::panic_any(Bomb("boom in the payload's drop"));
    }

    async fn ok(&self) -> u32 {
        self.served.fetch_add(1, Ordering::SeqCst) as u32 + 1
    }
}

async fn attack(cluster: Cluster) {
    let provider = cluster.node("fragile-1").await;
    let shard = Arc::new(Shard::default());
    let _registration = provider
        .serve(FragileServer::new(shard.clone()))
        .await
        .unwrap();
    let client_node: Node = cluster.node("client").await;
    let client = FragileClient::new(&client_node);
    for _ in 0..3 {
        let cases = [
            (
                "first_poll",
                client.first_poll().await,
                "boom in the first poll",
            ),
            (
                "later_poll",
                client.later_poll().await,
                "boom in a later poll",
            ),
            ("payload", client.payload().await, "non-string payload"),
            (
                "in_drop",
                client.in_drop().await,
                "boom in a drop at the handler's end",
            ),
        ];
        for (name, result, expected) in cases {
            let error = result.expect_err(name).to_string();
            assert!(
                error.contains("panic") && error.contains(expected),
                "{name}: {error}"
            );
        }
        // The caller gives up; the provider drops the handler, whose drop panics.
        client
            .in_drop_on_cancel()
            .timeout(Duration::from_millis(100))
            .await
            .expect_err("no answer");
        // A payload that panics again when dropped: ends its request, not the node.
        let error = client
            .payload_panics_in_drop()
            .timeout(Duration::from_millis(500))
            .await
            .expect_err("panicked")
            .to_string();
        assert!(error.contains("panic"), "payload_panics_in_drop: {error}");
        let before = shard.served.load(Ordering::SeqCst);
        assert_eq!(
            client.ok().await.unwrap(),
            before as u32 + 1,
            "the node serves on"
        );
    }
    // Many at once, mixed with calls that succeed on the same connection.
    let mut calls = Vec::new();
    for i in 0..60 {
        let client = client.clone();
        calls.push(tokio::spawn(async move {
            match i % 3 {
                0 => client.first_poll().await.is_err(),
                1 => client.later_poll().await.is_err(),
                _ => client.ok().await.is_ok(),
            }
        }));
    }
    for call in calls {
        assert!(call.await.unwrap());
    }
}

/// On the in-memory network the provider's side of a request runs in the caller's task: a
/// handler whose drop panics when the caller gives up, and a panic payload whose own drop
/// panics, end that request alone there too (`transport/memory.rs`, `Contained`).
#[tokio::test]
async fn a_panicking_handler_ends_only_its_request_in_memory() {
    attack(Cluster::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_ends_only_its_request_over_tcp() {
    attack(Cluster::tcp()).await;
}
