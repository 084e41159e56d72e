//! `cluster nodes` and `cluster services`: the registry copy as it is, in a table or as JSON.

use cluster::Node;
use cluster::registry::ServiceEntry;
use serde_json::json;

use crate::Failure;
use crate::table::table;

/// The nodes: name, address, generation, wire versions, state, services.
pub(crate) fn nodes(node: &Node, json: bool) -> Result<(), Failure> {
    let registry = node.registry();
    let entries = registry.services();
    let mut nodes = registry.nodes();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let of = |name: &str| -> Vec<&std::sync::Arc<ServiceEntry>> {
        entries.iter().filter(|e| e.node.name == name).collect()
    };
    if json {
        let list: Vec<_> = nodes
            .iter()
            .map(|n| {
                json!({
                    "name": n.name,
                    "addr": n.addr.to_string(),
                    // As text: past 2^53, a JSON number loses digits in JavaScript and jq.
                    "generation": n.generation.to_string(),
                    "wire": n.wire.map(|(low, high)| [low, high]),
                    "max_frame": n.max_frame,
                    "state": state(&of(&n.name)),
                    "services": of(&n.name).iter().map(|e| e.description.name.clone()).collect::<Vec<_>>(),
                    "this": n.name == node.name(),
                })
            })
            .collect();
        crate::out::line(serde_json::Value::Array(list));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            let mut services: Vec<String> = of(&n.name)
                .iter()
                .map(|e| format!("{}@{}", e.description.name, e.description.version))
                .collect();
            services.sort();
            let mut name = n.name.clone();
            if n.name == node.name() {
                name.push_str(" (this)");
            }
            vec![
                name,
                n.addr.to_string(),
                n.generation.to_string(),
                n.wire_text().unwrap_or_else(|| "1".to_owned()),
                state(&of(&n.name)).to_owned(),
                services.join(" "),
            ]
        })
        .collect();
    crate::out::text(&table(
        &["NODE", "ADDRESS", "GENERATION", "WIRE", "STATE", "SERVICES"],
        &rows,
    ));
    Ok(())
}

/// The providers, one line each: service, version, node, address, health, functions.
pub(crate) fn services(node: &Node, only: Option<&str>, json: bool) -> Result<(), Failure> {
    let mut entries = node.registry().services();
    if let Some(only) = only {
        if !node.registry().nodes().iter().any(|n| n.name == only) {
            return Err(Failure::Usage(format!("no node `{only}` in the registry")));
        }
        entries.retain(|e| e.node.name == only);
    }
    entries.sort_by(|a, b| {
        (&a.description.name, &b.description.version, &a.node.name).cmp(&(
            &b.description.name,
            &a.description.version,
            &b.node.name,
        ))
    });
    if json {
        let list: Vec<_> = entries
            .iter()
            .map(|e| {
                json!({
                    "service": e.description.name,
                    "version": e.description.version.to_string(),
                    "node": e.node.name,
                    "addr": e.node.addr.to_string(),
                    "health": health(e),
                    "functions": e.description.functions.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
                })
            })
            .collect();
        crate::out::line(serde_json::Value::Array(list));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            let functions: Vec<&str> = e
                .description
                .functions
                .iter()
                .map(|f| f.name.as_str())
                .collect();
            vec![
                e.description.name.clone(),
                e.description.version.to_string(),
                e.node.name.clone(),
                e.node.addr.to_string(),
                health(e).to_owned(),
                functions.join(" "),
            ]
        })
        .collect();
    crate::out::text(&table(
        &[
            "SERVICE",
            "VERSION",
            "NODE",
            "ADDRESS",
            "HEALTH",
            "FUNCTIONS",
        ],
        &rows,
    ));
    Ok(())
}

/// How a caller sees the provider: `failing` its health check, on a `suspect` node (silent for
/// longer than its heartbeats let expect), or `ok`.
pub(crate) fn health(entry: &ServiceEntry) -> &'static str {
    match (entry.failing, entry.suspect) {
        (true, _) => "failing",
        (false, true) => "suspect",
        (false, false) => "ok",
    }
}

/// A node's state as its entries tell it: `suspect` when they say so, else `live` (a node the
/// registry holds is live: a dead one is out of the copy).
fn state(entries: &[&std::sync::Arc<ServiceEntry>]) -> &'static str {
    if entries.iter().any(|e| e.suspect) {
        "suspect"
    } else {
        "live"
    }
}
