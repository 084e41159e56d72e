//! `GET <prefix>/_describe`: the functions a caller may call through the route, each with the
//! path to `POST` to and the shapes of its arguments and result (`cluster::service::shape`, as
//! the registry holds them), so that a client in any language knows what to send and what
//! comes back. One entry per service: its newest version.

use std::collections::BTreeMap;
use std::sync::Arc;

use cluster::Node;
use cluster::json::returns_result;
use cluster::registry::ServiceEntry;
use serde_json::{Value, json};

use super::edge::EdgeCaller;

/// The description of what `caller` may call, under `prefix`.
pub(crate) fn describe(node: &Node, prefix: &str, caller: &EdgeCaller) -> Value {
    let mut newest: BTreeMap<String, Arc<ServiceEntry>> = BTreeMap::new();
    for entry in node.registry().services() {
        let name = &entry.description.name;
        match newest.get(name) {
            Some(kept) if kept.description.version >= entry.description.version => {}
            _ => {
                newest.insert(name.clone(), entry);
            }
        }
    }
    let services: Vec<Value> = newest
        .values()
        .filter_map(|entry| {
            let d = &entry.description;
            let functions: Vec<Value> = d
                .functions
                .iter()
                .filter(|f| caller.may_call(&format!("{}.{}", d.name, f.name)))
                .map(|f| {
                    json!({
                        "name": f.name,
                        "path": format!("{prefix}/{}/{}", d.name, f.name),
                        "signature": f.signature,
                        "params": f.params,
                        "args": f.shape.as_ref().map(|s| &s.args),
                        "result": f.shape.as_ref().map(|s| &s.output),
                        "returns_result": returns_result(f),
                        "idempotent": f.idempotent,
                        "at_most_once": f.at_most_once,
                    })
                })
                .collect();
            (!functions.is_empty()).then(|| {
                json!({
                    "name": d.name,
                    "version": d.version.to_string(),
                    "functions": functions,
                })
            })
        })
        .collect();
    json!({ "services": services })
}
