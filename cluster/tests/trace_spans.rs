//! Traces that cross nodes (W3C trace context, `context/trace.rs`), from the spans a
//! subscriber records: over TCP, the provider's handler span is a child of the caller's attempt
//! span, and a call inside the handler continues the trace.
//!
//! A test binary of its own, with one test: the subscriber is the test thread's own
//! (`set_default`), and `tracing`'s per-callsite interest is shared by the whole process, so a
//! test calling without a subscriber on another thread at the same moment could leave a span
//! unrecorded here.
#![allow(missing_docs, unreachable_pub)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cluster::context::TraceParent;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};
use tracing_subscriber::{Layer, Registry};

#[path = "support/hops.rs"]
mod hops;

use hops::{FrontClient, three_nodes};

/// A span as a subscriber saw it: its name and its fields, as text.
#[derive(Debug, Clone)]
struct Seen {
    name: String,
    fields: HashMap<String, String>,
}

/// Records every span of `cluster::trace` with its fields.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<HashMap<u64, Seen>>>);

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: tracing::Subscriber> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: LayerContext<'_, S>) {
        if attrs.metadata().target() != "cluster::trace" {
            return;
        }
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        let name = attrs.metadata().name().to_owned();
        self.0
            .lock()
            .unwrap()
            .insert(id.into_u64(), Seen { name, fields });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: LayerContext<'_, S>) {
        if let Some(seen) = self.0.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut seen.fields));
        }
    }
}

impl Spans {
    fn named(&self, name: &str, service: &str) -> Vec<HashMap<String, String>> {
        self.0
            .lock()
            .unwrap()
            .values()
            .filter(|s| {
                s.name == name && s.fields.get("service").map(String::as_str) == Some(service)
            })
            .map(|s| s.fields.clone())
            .collect()
    }
}

// One thread: the subscriber set for this test is the thread's, and every node runs on it.
#[tokio::test(flavor = "current_thread")]
async fn the_handler_span_is_a_child_of_the_callers_attempt_span_across_tcp() {
    let spans = Spans::default();
    let _subscriber = tracing::subscriber::set_default(Registry::default().with(spans.clone()));
    let (web, _front, _back) = three_nodes().await;

    let (front_saw, back_saw) = FrontClient::new(&web).relay().await.unwrap();
    let front_saw = TraceParent::parse(&front_saw.expect("front got a trace")).unwrap();
    let back_saw = TraceParent::parse(&back_saw.expect("back got a trace")).unwrap();

    let [web_attempt] = &spans.named("attempt", "front")[..] else {
        panic!("one attempt of front")
    };
    let [front_handler] = &spans.named("handle", "front")[..] else {
        panic!("one handler of front")
    };
    let [front_attempt] = &spans.named("attempt", "back")[..] else {
        panic!("one attempt of back")
    };
    let [back_handler] = &spans.named("handle", "back")[..] else {
        panic!("one handler of back")
    };
    let trace = &web_attempt["trace_id"];
    for span in [front_handler, front_attempt, back_handler] {
        assert_eq!(
            &span["trace_id"], trace,
            "one trace across both hops: {span:?}"
        );
    }
    // Parent and child, across each connection.
    assert_eq!(front_handler["parent_id"], web_attempt["span_id"]);
    assert_eq!(back_handler["parent_id"], front_attempt["span_id"]);
    // What each handler reads is its own span, under the same trace.
    assert_eq!(format!("{:032x}", front_saw.trace_id), *trace);
    assert_eq!(
        format!("{:016x}", front_saw.parent_id),
        front_handler["span_id"]
    );
    assert_eq!(
        format!("{:016x}", back_saw.parent_id),
        back_handler["span_id"]
    );
    assert_eq!(web_attempt["node"], "front-1");
}
