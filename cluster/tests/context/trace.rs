//! Traces that cross nodes (W3C trace context, `context/trace.rs`): a call that nobody traces
//! carries none, and one given a trace is continued over TCP, also by the call its handler
//! makes. The spans themselves: `tests/trace_spans.rs`, a test binary of its own.

use cluster::context::TraceParent;

use crate::Net;

/// What a handler saw: its trace, as `traceparent`, and what its own call saw.
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

fn here() -> Option<String> {
    cluster::context()
        .expect("in a handler")
        .trace()
        .map(|t| t.to_header())
}

async fn cluster(net: &Net) -> (cluster::Node, cluster::Node, cluster::Node) {
    let back = net.node("back-1").await;
    let _ = back.serve(BackServer::new(Echo)).await.unwrap();
    let front = net.node("front-1").await;
    let _ = front
        .serve(FrontServer::new(Relay(BackClient::new(&front))))
        .await
        .unwrap();
    let web = net.node("web-1").await;
    (web, front, back)
}

#[tokio::test(flavor = "current_thread")]
async fn a_call_nobody_traces_carries_no_trace_and_a_given_one_is_continued() {
    let net = Net::tcp();
    let (web, _front, _back) = cluster(&net).await;
    let (front_saw, back_saw) = FrontClient::new(&web).relay().await.unwrap();
    assert_eq!(
        (front_saw, back_saw),
        (None, None),
        "nothing traced, nothing sent"
    );

    // A trace from outside (an HTTP request's `traceparent`): both hops continue it.
    let given =
        TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
    let (front_saw, back_saw) = FrontClient::new(&web).relay().trace(given).await.unwrap();
    for saw in [front_saw, back_saw] {
        let saw = TraceParent::parse(&saw.expect("continued")).unwrap();
        assert_eq!(saw.trace_id, given.trace_id);
        assert_ne!(
            saw.parent_id, given.parent_id,
            "each hop under a span of its own"
        );
        assert!(saw.sampled);
    }
}
