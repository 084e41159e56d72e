//! Traces that cross nodes as OpenTelemetry spans (the `opentelemetry` feature): with a
//! `tracing-opentelemetry` layer exporting to an in-memory exporter, a call across two hops over
//! TCP is one trace, each provider's handler span the child of its caller's attempt span.
//! `cargo test -p cluster --features opentelemetry --test otel`.
#![allow(missing_docs)]

use opentelemetry::trace::{SpanId, SpanKind, Status, TracerProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing::Instrument;
use tracing_subscriber::Registry;
use tracing_subscriber::layer::SubscriberExt;

#[path = "support/hops.rs"]
mod hops;

use hops::{FrontClient, three_nodes};

fn one<'a>(spans: &'a [SpanData], name: &str, service: &str) -> &'a SpanData {
    let found: Vec<_> = spans
        .iter()
        .filter(|s| {
            s.name == name
                && s.attributes
                    .iter()
                    .any(|kv| kv.key.as_str() == "service" && kv.value.as_str() == service)
        })
        .collect();
    assert_eq!(found.len(), 1, "one `{name}` span of {service}: {spans:#?}");
    found[0]
}

// One thread: the subscriber is this thread's, and every node runs on it.
#[tokio::test(flavor = "current_thread")]
async fn a_call_across_two_hops_is_one_trace_of_parents_and_children() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
    let _subscriber = tracing::subscriber::set_default(Registry::default().with(layer));

    let (web, front, back) = three_nodes().await;

    // The caller's own span, as a web framework's request span would be.
    let request = tracing::info_span!("request");
    let answer = FrontClient::new(&web)
        .relay()
        .into_future()
        .instrument(request)
        .await
        .unwrap();
    assert!(
        answer.0.is_some() && answer.1.is_some(),
        "both hops traced: {answer:?}"
    );
    for node in [&web, &front, &back] {
        node.shutdown().await;
    }
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();

    let root = spans
        .iter()
        .find(|s| s.name == "request")
        .expect("the request span");
    let trace = root.span_context.trace_id();
    for span in &spans {
        assert_eq!(
            span.span_context.trace_id(),
            trace,
            "{} is in the request's trace",
            span.name
        );
    }
    let web_call = one(&spans, "call", "front");
    let web_attempt = one(&spans, "attempt", "front");
    let front_handler = one(&spans, "handle", "front");
    let front_call = one(&spans, "call", "back");
    let front_attempt = one(&spans, "attempt", "back");
    let back_handler = one(&spans, "handle", "back");
    assert_eq!(web_call.parent_span_id, root.span_context.span_id());
    assert_eq!(web_attempt.parent_span_id, web_call.span_context.span_id());
    // Across the first connection: the provider's handler under the caller's attempt.
    assert_eq!(
        front_handler.parent_span_id,
        web_attempt.span_context.span_id()
    );
    assert!(front_handler.parent_span_is_remote);
    assert_eq!(
        front_call.parent_span_id,
        front_handler.span_context.span_id()
    );
    assert_eq!(
        front_attempt.parent_span_id,
        front_call.span_context.span_id()
    );
    // And across the second.
    assert_eq!(
        back_handler.parent_span_id,
        front_attempt.span_context.span_id()
    );
    assert_ne!(back_handler.parent_span_id, SpanId::INVALID);
    // The two sides of each remote call, as OpenTelemetry names them; how each attempt ended.
    for attempt in [web_attempt, front_attempt] {
        assert_eq!(attempt.span_kind, SpanKind::Client);
        assert_eq!(attempt.status, Status::Unset, "answered");
        assert!(
            attempt
                .attributes
                .iter()
                .any(|kv| kv.key.as_str() == "outcome" && kv.value.as_str() == "answered"),
            "{attempt:?}"
        );
    }
    for handler in [front_handler, back_handler] {
        assert_eq!(handler.span_kind, SpanKind::Server);
    }
}
