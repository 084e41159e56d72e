//! What each node puts in its gossip state, and the index read back from everyone's.

use std::collections::HashMap;
use std::sync::Arc;

use chitchat::{Chitchat, ChitchatId, NodeState};

use crate::registry::index::Index;
use crate::registry::{NodeInfo, RegistryError, ServiceEntry};
use crate::service::ServiceDescription;

/// Where the node serves calls.
const RPC: &str = "rpc";
/// The largest frame it accepts.
const MAX_FRAME: &str = "frame";
/// The wire versions it speaks, `low-high`.
const WIRE: &str = "wire";
/// `claiming`, `up` or `leaving`. A node claims its name first, and is up only once no live
/// process holds it; only an `up` node is in lookups, so a second process under a live node's
/// name never hides the holder. A leaving node is out of every lookup as soon as peers hear it.
const STATUS: &str = "status";
const CLAIMING: &str = "claiming";
const UP: &str = "up";
const LEAVING: &str = "leaving";
/// Bumped on every change, so that peers get a key-change event even for a deletion (chitchat
/// notifies sets, not deletes) and rebuild at once instead of at the end of their next round.
const REVISION: &str = "rev";
/// One key per service: `svc:<name>` = the description as JSON.
const SERVICE: &str = "svc:";

pub(crate) fn initial_keys(own: &NodeInfo) -> Vec<(String, String)> {
    let mut keys = vec![
        (RPC.to_owned(), own.addr.to_string()),
        (STATUS.to_owned(), CLAIMING.to_owned()),
        (REVISION.to_owned(), "0".to_owned()),
    ];
    if let Some(max) = own.max_frame {
        keys.push((MAX_FRAME.to_owned(), max.to_string()));
    }
    if let Some(wire) = own.wire_text() {
        keys.push((WIRE.to_owned(), wire));
    }
    keys
}

pub(super) fn service_key(service: &str) -> String {
    format!("{SERVICE}{service}")
}

/// The key and value of a description, refused if it is larger than `max` bytes.
pub(crate) fn service_key_value(
    description: &ServiceDescription,
    max: usize,
) -> Result<(String, String), RegistryError> {
    let value =
        serde_json::to_string(description).map_err(|e| RegistryError::Gossip(e.to_string()))?;
    if value.len() > max {
        return Err(RegistryError::TooLarge {
            service: description.name.clone(),
            size: value.len(),
            limit: max,
        });
    }
    Ok((service_key(&description.name), value))
}

pub(super) fn bump_revision(me: &mut NodeState) {
    let next = me
        .get(REVISION)
        .and_then(|r| r.parse::<u64>().ok())
        .unwrap_or(0)
        + 1;
    me.set(REVISION, next);
}

pub(super) fn mark_up(me: &mut NodeState) {
    me.set(STATUS, UP);
}

/// Every other generation of `own`'s name that is up (by its own word), and where it serves.
/// A crashed generation stays `up` in gossip until it is purged, so there may be several.
pub(crate) fn holders(cc: &Chitchat, own: &ChitchatId) -> Vec<(ChitchatId, std::net::SocketAddr)> {
    cc.node_states()
        .iter()
        .filter(|(id, state)| {
            id.node_id == own.node_id
                && id.generation_id != own.generation_id
                && state.get(STATUS) == Some(UP)
        })
        .filter_map(|(id, state)| Some((id.clone(), state.get(RPC)?.parse().ok()?)))
        .collect()
}

pub(super) fn mark_leaving(me: &mut NodeState) {
    me.set(STATUS, LEAVING);
    let services: Vec<String> = me.iter_prefix(SERVICE).map(|(k, _)| k.to_owned()).collect();
    for key in services {
        me.delete(&key);
    }
}

/// The index of every live node that is up: its services. Of two generations of one node name
/// that are up (a restart after a crash, before the old one was declared dead), only the newer
/// counts, so a restart never resurrects the old entries; one still claiming the name counts for
/// nothing. An entry that cannot be read is skipped and logged, never fatal.
pub(crate) fn build_index(cc: &Chitchat) -> Index {
    let mut newest: HashMap<&str, &ChitchatId> = HashMap::new();
    // A node of an earlier build says `up` from the start and never `claiming`.
    let up = |id: &ChitchatId| cc.node_state(id).and_then(|s| s.get(STATUS)) == Some(UP);
    for id in cc.live_nodes().filter(|id| up(id)) {
        let slot = newest.entry(&*id.node_id).or_insert(id);
        if id.generation_id > slot.generation_id {
            *slot = id;
        }
    }
    let mut index = Index::default();
    for id in newest.into_values() {
        let Some(state) = cc.node_state(id) else {
            continue;
        };
        let Some(addr) = state.get(RPC).and_then(|a| a.parse().ok()) else {
            continue;
        };
        let max_frame = state.get(MAX_FRAME).and_then(|m| m.parse().ok());
        let wire = state.get(WIRE).and_then(NodeInfo::parse_wire_text);
        let node = NodeInfo::new(&*id.node_id, addr, id.generation_id)
            .with_max_frame(max_frame)
            .with_wire(wire);
        index.nodes.insert(node.name.clone(), node.clone());
        for (key, value) in state.iter_prefix(SERVICE) {
            match serde_json::from_str::<ServiceDescription>(&value.value) {
                Ok(d) => index.insert(Arc::new(ServiceEntry::new(node.clone(), Arc::new(d)))),
                Err(e) => tracing::warn!("node {node} gossips an unreadable entry `{key}`: {e}"),
            }
        }
    }
    index
}
