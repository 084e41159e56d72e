//! Two hops for the trace tests (`tests/trace_spans.rs`, `tests/otel.rs`,
//! `tests/context/trace.rs`): `web-1` calls `front.relay` on `front-1`, whose handler calls
//! `back.echo` on `back-1`; each handler answers the trace it runs in, as `traceparent`. Nodes
//! on TCP in plaintext, with a shared in-memory registry.
#![allow(unreachable_pub, missing_docs)]

use cluster::{MemoryRegistry, Node};

/// What a handler saw: its trace, and what its own call saw.
#[cluster::service(name = "front", version = "1.0.0", timeout = "5s")]
pub trait Front {
    #[call(idempotent)]
    async fn relay(&self) -> (Option<String>, Option<String>);
}

#[cluster::service(name = "back", version = "1.0.0", timeout = "5s")]
pub trait Back {
    #[call(idempotent)]
    async fn echo(&self) -> Option<String>;
}

pub struct Relay(BackClient);

impl Front for Relay {
    async fn relay(&self) -> (Option<String>, Option<String>) {
        let mine = here();
        let theirs = self.0.echo().await.expect("back answers");
        (mine, theirs)
    }
}

pub struct Echo;

impl Back for Echo {
    async fn echo(&self) -> Option<String> {
        here()
    }
}

/// The trace the handler runs in, as `traceparent`.
fn here() -> Option<String> {
    cluster::context()
        .expect("in a handler")
        .trace()
        .map(|t| t.to_header())
}

async fn node(registry: &MemoryRegistry, name: &str) -> Node {
    Node::builder()
        .name(name)
        .insecure()
        .registry(registry.clone())
        .start()
        .await
        .expect("node starts")
}

/// `web-1`, `front-1` and `back-1`, serving.
pub async fn three_nodes() -> (Node, Node, Node) {
    let registry = MemoryRegistry::new();
    let back = node(&registry, "back-1").await;
    let _ = back.serve(BackServer::new(Echo)).await.unwrap();
    let front = node(&registry, "front-1").await;
    let _ = front
        .serve(FrontServer::new(Relay(BackClient::new(&front))))
        .await
        .unwrap();
    let web = node(&registry, "web-1").await;
    (web, front, back)
}
