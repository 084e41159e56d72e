//! What each node puts in its gossip state, and the index read back from everyone's.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chitchat::{Chitchat, ChitchatId, NodeState, Version};

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
/// Set while a service fails its health check: `fail:<name>` = `1`. A key of its own, so that
/// a node of an earlier build still reads the description (and calls the replica anyway).
const FAILING: &str = "fail:";

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

pub(super) fn failing_key(service: &str) -> String {
    format!("{FAILING}{service}")
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

/// Checked: past `u64::MAX` the revision starts again at 1 rather than panicking (it only has
/// to change for peers to rebuild; a value kept the same would not be sent). Only this node
/// writes its state, so it never gets there, but a peer once could (`vendor/chitchat/README.md`).
pub(super) fn bump_revision(me: &mut NodeState) {
    let current = me
        .get(REVISION)
        .and_then(|r| r.parse::<u64>().ok())
        .unwrap_or(0);
    let next = current.checked_add(1).unwrap_or(1);
    me.set(REVISION, next);
}

/// Refuses an entry that would take this node's own state past a limit its peers hold every
/// node to (`GossipConfig::max_keys_per_node`, `max_bytes_per_node`): they would drop it, and
/// it would be served nowhere but here. Deleted keys count until purged, as they do at peers.
pub(super) fn check_room(
    me: &NodeState,
    key: &str,
    value: &str,
    service: &str,
    config: &super::GossipConfig,
) -> Result<(), RegistryError> {
    let previous = me.get_versioned(key);
    let keys = me.key_values_including_deleted().count() + usize::from(previous.is_none());
    let bytes: usize = me
        .key_values_including_deleted()
        .filter(|(k, _)| *k != key)
        .map(|(k, v)| k.len() + v.value.len())
        .sum::<usize>()
        + key.len()
        + value.len();
    let full = |setting, size, limit| {
        Err(RegistryError::NodeFull {
            service: service.to_owned(),
            setting,
            size,
            limit,
        })
    };
    if keys > config.max_keys_per_node {
        return full("max_keys_per_node", keys, config.max_keys_per_node);
    }
    if bytes > config.max_bytes_per_node {
        return full("max_bytes_per_node", bytes, config.max_bytes_per_node);
    }
    Ok(())
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
    let services: Vec<String> = (me.iter_prefix(SERVICE).chain(me.iter_prefix(FAILING)))
        .map(|(k, _)| k.to_owned())
        .collect();
    for key in services {
        me.delete(&key);
    }
}

/// The descriptions read at the last rebuild, by node and key, with the version of the value
/// read (`None`: unreadable, logged once). A rebuild parses only the values that changed.
#[derive(Debug, Default)]
pub(super) struct Parsed {
    by_key: HashMap<ChitchatId, HashMap<String, Read>>,
}

/// A value's version, and the description read from it.
type Read = (Version, Option<Arc<ServiceDescription>>);

/// What a rebuild copies out of chitchat under its lock ([`snapshot`]), to be read into an
/// index after the lock is given back ([`index_from`]): parsing a node's entries (16 KiB of
/// JSON each at most, 2 MB for a node that registers 150) would otherwise hold up gossip.
pub(super) struct Snapshot {
    nodes: Vec<NodeSnapshot>,
}

struct NodeSnapshot {
    id: ChitchatId,
    node: NodeInfo,
    suspect: bool,
    /// The services whose `fail:` key is set.
    failing: HashSet<String>,
    /// Each `svc:` key with its version, and its value where `Parsed` does not hold that
    /// version already.
    services: Vec<(String, Version, Option<String>)>,
}

/// The index of every live node that is up: its services. Of two generations of one node name
/// that are up (a restart after a crash, before the old one was declared dead), only the newer
/// counts, so a restart never resurrects the old entries; one still claiming the name counts for
/// nothing. An entry that cannot be read is skipped and logged, never fatal.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn build_index(cc: &Chitchat) -> Index {
    let mut parsed = Parsed::default();
    index_from(snapshot(cc, &parsed), &mut parsed)
}

/// What the index of `cc` needs, under chitchat's lock, in O(N) for N entries: the values are
/// copied only where `parsed` does not hold their version.
pub(super) fn snapshot(cc: &Chitchat, parsed: &Parsed) -> Snapshot {
    let mut newest: HashMap<&str, &ChitchatId> = HashMap::new();
    // A node of an earlier build says `up` from the start and never `claiming`.
    let up = |id: &ChitchatId| cc.node_state(id).and_then(|s| s.get(STATUS)) == Some(UP);
    for id in cc.live_nodes().filter(|id| up(id)) {
        let slot = newest.entry(&*id.node_id).or_insert(id);
        if id.generation_id > slot.generation_id {
            *slot = id;
        }
    }
    let mut nodes = Vec::with_capacity(newest.len());
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
        let known = parsed.by_key.get(id);
        let services = state
            .iter_prefix(SERVICE)
            .map(|(key, value)| {
                let held = known
                    .and_then(|k| k.get(key))
                    .is_some_and(|(version, _)| *version == value.version);
                let text = (!held).then(|| value.value.clone());
                (key.to_owned(), value.version, text)
            })
            .collect();
        let failing = state
            .iter_prefix(FAILING)
            .map(|(key, _)| key[FAILING.len()..].to_owned())
            .collect();
        nodes.push(NodeSnapshot {
            id: id.clone(),
            node,
            suspect: cc.is_suspect(id),
            failing,
            services,
        });
    }
    Snapshot { nodes }
}

/// The index of a snapshot, reading the values it copied and taking the others from `parsed`,
/// which is left holding what this index read. Call it with the `Parsed` the snapshot was taken
/// against, with no other rebuild in between (`GossipRegistry::rebuild` holds it throughout).
pub(super) fn index_from(snapshot: Snapshot, parsed: &mut Parsed) -> Index {
    let mut nodes = Vec::with_capacity(snapshot.nodes.len());
    let mut entries = Vec::new();
    let mut read = HashMap::with_capacity(snapshot.nodes.len());
    for taken in snapshot.nodes {
        let node = taken.node;
        let mut before = parsed.by_key.remove(&taken.id).unwrap_or_default();
        let mut now = HashMap::with_capacity(taken.services.len());
        for (key, version, text) in taken.services {
            let description = match (text, before.remove(&key)) {
                (None, Some((_, description))) => description,
                (text, _) => match serde_json::from_str::<ServiceDescription>(
                    text.as_deref().unwrap_or_default(),
                ) {
                    Ok(d) => Some(Arc::new(d)),
                    Err(e) => {
                        tracing::warn!("node {node} gossips an unreadable entry `{key}`: {e}");
                        None
                    }
                },
            };
            if let Some(d) = &description {
                let entry = ServiceEntry::new(node.clone(), d.clone())
                    .with_failing(taken.failing.contains(&d.name))
                    .with_suspect(taken.suspect);
                entries.push(Arc::new(entry));
            }
            now.insert(key, (version, description));
        }
        read.insert(taken.id, now);
        nodes.push(node);
    }
    parsed.by_key = read;
    Index::build(nodes, entries)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::net::SocketAddr;
    use std::time::Duration;

    use chitchat::{ChitchatConfig, FailureDetectorConfig, ProtocolVersion};

    use super::*;

    fn chitchat(keys: Vec<(String, String)>) -> Chitchat {
        let addr = SocketAddr::from(([127, 0, 0, 1], 7280));
        let config = ChitchatConfig {
            chitchat_id: ChitchatId::new("search-1", 1, addr),
            cluster_id: "test".into(),
            gossip_interval: Duration::from_secs(1),
            listen_addr: addr,
            seed_nodes: Vec::new(),
            failure_detector_config: FailureDetectorConfig::default(),
            marked_for_deletion_grace_period: Duration::from_secs(3600),
            catchup_callback: None,
            extra_liveness_predicate: None,
            protocol_version: ProtocolVersion::V0,
            datagram_budget: chitchat::DEFAULT_DATAGRAM_BUDGET,
        };
        let (_, seeds) = tokio::sync::watch::channel(HashSet::new());
        Chitchat::with_chitchat_id_and_seeds(config, seeds, keys)
    }

    fn description(name: &str) -> (String, String) {
        let json = format!(
            r#"{{"name":"{name}","version":"1.0.0","options":{{}},"functions":[],"wire":2}}"#
        );
        (service_key(name), json)
    }

    #[test]
    fn a_rebuild_reads_again_only_the_entries_that_changed() {
        let node = NodeInfo::new("search-1", SocketAddr::from(([127, 0, 0, 1], 7000)), 1);
        let mut keys = initial_keys(&node);
        keys.push((STATUS.into(), UP.into()));
        keys.extend(["a", "b"].map(description));
        let mut cc = chitchat(keys);
        let mut parsed = Parsed::default();
        let rebuild = |cc: &Chitchat, parsed: &mut Parsed| index_from(snapshot(cc, parsed), parsed);
        let first = rebuild(&cc, &mut parsed);
        let (key, value) = description("b");
        cc.self_node_state()
            .set(key, value.replace("1.0.0", "1.1.0"));
        let untouched = snapshot(&cc, &parsed);
        let copied = |s: &Snapshot| s.nodes[0].services.iter().filter(|v| v.2.is_some()).count();
        assert_eq!(
            copied(&untouched),
            1,
            "only the changed value is copied under the lock"
        );
        let second = rebuild(&cc, &mut parsed);
        let same = |s: &str| {
            Arc::ptr_eq(
                &first.lookup(s)[0].description,
                &second.lookup(s)[0].description,
            )
        };
        assert!(same("a"), "an unchanged entry is not parsed again");
        assert!(!same("b"), "a changed one is");
        assert_eq!(
            second.lookup("b")[0].description.version.to_string(),
            "1.1.0"
        );
        assert_eq!(build_index(&cc).entries().count(), 2);
    }

    #[test]
    fn a_revision_at_u64_max_does_not_overflow() {
        let mut me = NodeState::for_test();
        me.set(REVISION, u64::MAX);
        let version = me.max_version();
        bump_revision(&mut me);
        assert_eq!(me.get(REVISION), Some("1"));
        assert!(me.max_version() > version, "the key changed: peers rebuild");
        bump_revision(&mut me);
        assert_eq!(me.get(REVISION), Some("2"));
    }
}
