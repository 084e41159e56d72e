//! Invariant 1, where calls leave: a tracing layer that sees each attempt the call path makes
//! (its DEBUG `attempt` event names the node and generation chosen, just before the request
//! is handed to the connection) and checks, at that sim instant, that not every live peer has
//! already declared that node dead. Turmoil runs each host inside a span `node` named after
//! it, which tells the caller.

use std::fmt::Debug;
use std::sync::Arc;

use tracing::field::{Field, Visit};
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;

use crate::world::World;

/// A subscriber for this thread that checks every attempt against `world`.
pub fn install(world: Arc<World>) -> tracing::subscriber::DefaultGuard {
    let layer = Attempts { world }.with_filter(tracing_subscriber::filter::filter_fn(wanted));
    tracing::subscriber::set_default(tracing_subscriber::registry().with(layer))
}

/// The call path's events and spans, and turmoil's host span; nothing else is built.
fn wanted(meta: &Metadata<'_>) -> bool {
    matches!(
        meta.target(),
        "cluster::client::attempt" | "cluster::client::hedge"
    ) || (meta.is_span() && meta.name() == "node")
}

struct Attempts {
    world: Arc<World>,
}

/// The host a span of turmoil's names.
struct Host(String);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Attempts {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        if attrs.metadata().name() != "node" {
            return;
        }
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let (Some(span), Some(name)) = (ctx.span(id), fields.name) {
            span.extensions_mut().insert(Host(name));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        if fields.message.as_deref() != Some("attempt") {
            return;
        }
        let (Some(node), Some(generation)) = (fields.node, fields.generation) else {
            return;
        };
        // An at-most-once call that may have run on a node goes back to that process even once
        // its peers count it dead (a stall past `dead_after`): only it can answer for the call.
        // That is not routing a call to a dead node, which invariant 1 is about.
        if fields.kind.as_deref() == Some("retry on the same process") {
            return;
        }
        // "name (addr)": the node's Display.
        let name = node.split(' ').next().unwrap_or_default().to_owned();
        let caller = ctx
            .event_scope(event)
            .and_then(|scope| {
                scope
                    .from_root()
                    .find_map(|s| s.extensions().get::<Host>().map(|h| h.0.clone()))
            })
            .unwrap_or_default();
        // A node calling a service it provides itself, cut off from every peer by a
        // partition, is declared dead by them but reaches itself: not a call to a dead node.
        if caller == name {
            return;
        }
        let now = turmoil::sim_elapsed().unwrap_or_default();
        let target = (name, generation);
        let mut state = self.world.lock();
        state.counts.attempts += 1;
        let (declared, listing) = state.declarations(&target);
        if declared > 0 && listing > 0 {
            state.counts.attempts_contested += 1;
        }
        if declared > 0 && listing == 0 {
            let what = format!(
                "invariant 1 at {now:?}: {caller} sent an attempt to {} generation {} after every live peer that had listed it declared it dead",
                target.0, target.1
            );
            state.flag(what);
        }
    }
}

#[derive(Default)]
struct Fields {
    message: Option<String>,
    node: Option<String>,
    generation: Option<u64>,
    name: Option<String>,
    kind: Option<String>,
}

impl Visit for Fields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "generation" {
            self.generation = Some(value);
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "name" {
            self.name = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        match field.name() {
            "message" => self.message = Some(format!("{value:?}")),
            "node" => self.node = Some(format!("{value:?}")),
            "name" => self.name = Some(format!("{value:?}")),
            "kind" => self.kind = Some(format!("{value:?}")),
            _ => {}
        }
    }
}
