//! `cluster watch`: the registry's events as this node's copy sees them, one line each, until
//! ctrl-c or SIGTERM. With `--json`, one JSON object per line (`{"at", "event", ...}`), for
//! `jq` or a script.

use cluster::Node;
use cluster::registry::RegistryEvent;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::sync::broadcast::error::RecvError;

use crate::Failure;
use crate::show::health;

pub(crate) async fn watch(node: &Node, json: bool) -> Result<(), Failure> {
    let mut events = node.registry().events();
    // A first line says the watch has begun, and from what: a script knows from it that any
    // change after it is in what follows.
    let (nodes, services) = (
        node.registry().nodes().len(),
        node.registry().services().len(),
    );
    let first = if json {
        json!({"event": "watching", "node": node.name(), "nodes": nodes, "services": services})
            .to_string()
    } else {
        format!(
            "watching the registry as node `{}`: {nodes} nodes, {services} providers (ctrl-c to stop)",
            crate::out::shown(node.name())
        )
    };
    if !crate::out::line(first) {
        return Ok(());
    }
    // Until ctrl-c or SIGTERM (`main.rs` stops it), or until nobody reads stdout.
    loop {
        let line = match events.recv().await {
            Ok(event) => describe(&event),
            // The copy's event channel is bounded: a reader that falls behind loses the oldest.
            Err(RecvError::Lagged(missed)) => json!({"event": "lagged", "missed": missed}),
            Err(RecvError::Closed) => {
                return Err(Failure::Failed("the registry stopped".to_owned()));
            }
        };
        let at = OffsetDateTime::now_utc()
            .format(&Rfc3339)
            .unwrap_or_default();
        let written = if json {
            let mut line = line;
            line["at"] = Value::String(at);
            crate::out::line(line)
        } else {
            crate::out::line(format!("{at}  {}", text(&line)))
        };
        if !written {
            return Ok(());
        }
    }
}

/// An event as JSON: its kind, and the node and service it is about.
fn describe(event: &RegistryEvent) -> Value {
    match event {
        RegistryEvent::ServiceUp(e) | RegistryEvent::ServiceDown(e) => json!({
            "event": if matches!(event, RegistryEvent::ServiceUp(_)) { "service_up" } else { "service_down" },
            "service": e.description.name,
            "version": e.description.version.to_string(),
            "node": e.node.name,
            "addr": e.node.addr.to_string(),
            "health": health(e),
        }),
        RegistryEvent::NodeUp(n) | RegistryEvent::NodeDown(n) => json!({
            "event": if matches!(event, RegistryEvent::NodeUp(_)) { "node_up" } else { "node_down" },
            "node": n.name,
            "addr": n.addr.to_string(),
            // As text: past 2^53, a JSON number loses digits in JavaScript and jq.
            "generation": n.generation.to_string(),
        }),
        other => json!({"event": format!("{other:?}")}),
    }
}

/// The JSON of [`describe`] as a line for people.
fn text(line: &Value) -> String {
    // Names from the registry, any member's: control characters escaped for the terminal.
    let s = |key: &str| crate::out::shown(line[key].as_str().unwrap_or_default());
    match s("event").as_str() {
        "service_up" | "service_down" => format!(
            "{:<12}  {} {} on {} ({}){}",
            s("event").replace('_', "-"),
            s("service"),
            s("version"),
            s("node"),
            s("addr"),
            match s("health").as_str() {
                "ok" => String::new(),
                health => format!(", {health}"),
            }
        ),
        "node_up" | "node_down" => format!(
            "{:<12}  {} ({}), generation {}",
            s("event").replace('_', "-"),
            s("node"),
            s("addr"),
            s("generation")
        ),
        "lagged" => format!(
            "lagged        {} events missed: this reader fell behind",
            line["missed"]
        ),
        other => crate::out::shown(other),
    }
}
