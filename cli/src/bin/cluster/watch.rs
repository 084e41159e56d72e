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
    if json {
        println!(
            "{}",
            json!({"event": "watching", "node": node.name(), "nodes": nodes, "services": services})
        );
    } else {
        println!(
            "watching the registry as node `{}`: {nodes} nodes, {services} providers (ctrl-c to stop)",
            node.name()
        );
    }
    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        let event = tokio::select! {
            () = &mut stop => return Ok(()),
            event = events.recv() => event,
        };
        let line = match event {
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
        if json {
            let mut line = line;
            line["at"] = Value::String(at);
            println!("{line}");
        } else {
            println!("{at}  {}", text(&line));
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
            "generation": n.generation,
        }),
        other => json!({"event": format!("{other:?}")}),
    }
}

/// The JSON of [`describe`] as a line for people.
fn text(line: &Value) -> String {
    let s = |key: &str| line[key].as_str().unwrap_or_default().to_owned();
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
            line["generation"]
        ),
        "lagged" => format!(
            "lagged        {} events missed: this reader fell behind",
            line["missed"]
        ),
        other => other.to_owned(),
    }
}

/// Ctrl-c or SIGTERM.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
