//! Traces that cross nodes (W3C trace context, `context/trace.rs`): a call that nobody traces
//! carries none, and one given a trace is continued over TCP, also by the call its handler
//! makes. The spans themselves: `tests/trace_spans.rs`, a test binary of its own.

use cluster::context::TraceParent;

#[path = "../support/hops.rs"]
mod hops;

use hops::{FrontClient, three_nodes};

#[tokio::test(flavor = "current_thread")]
async fn a_call_nobody_traces_carries_no_trace_and_a_given_one_is_continued() {
    let (web, _front, _back) = three_nodes().await;
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
