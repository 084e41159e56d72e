//! What this process knows of the registry's keys: filled by a range read, kept current by the
//! watch and by this process's own writes, and turned into the local copy's nodes and entries.
//!
//! A key remembers the revision of the last change applied to it, so a change applied twice
//! (a write of ours, then its watch event) or out of order (our write before the watch has
//! delivered an older one) leaves the newest. A deleted key is kept as a tombstone until the
//! watch has passed its revision.

use std::collections::BTreeMap;
use std::sync::Arc;

use cluster::registry::{NodeInfo, ServiceEntry};

use crate::keys::{Key, Keys};

/// A value read from etcd.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    Node(NodeInfo),
    Entry(Arc<ServiceEntry>),
}

#[derive(Debug)]
struct Known {
    revision: i64,
    /// `None`: deleted at `revision`.
    value: Option<Value>,
}

#[derive(Debug)]
pub(crate) struct Mirror {
    known: BTreeMap<Key, Known>,
    /// Every change up to this revision has been applied (the watch's progress).
    revision: i64,
    live: usize,
    max_keys: usize,
    max_value: usize,
}

impl Mirror {
    pub(crate) fn new(max_keys: usize, max_value: usize) -> Self {
        Self {
            known: BTreeMap::new(),
            revision: 0,
            live: 0,
            max_keys,
            max_value,
        }
    }

    /// The revision every change up to which is applied.
    #[cfg(test)]
    pub(crate) fn revision(&self) -> i64 {
        self.revision
    }

    /// Reads a key and its value: `None` (with a warning) for what is not the registry's or
    /// does not agree with its key.
    pub(crate) fn parse(&self, keys: &Keys, key: &[u8], value: &[u8]) -> Option<(Key, Value)> {
        let parsed = keys.parse(key)?;
        let shown = String::from_utf8_lossy(key);
        if value.len() > self.max_value {
            tracing::warn!(
                "etcd key {shown} skipped: its value is {} bytes, past the limit of {}",
                value.len(),
                self.max_value
            );
            return None;
        }
        let read = match &parsed {
            Key::Node(node) => serde_json::from_slice::<NodeInfo>(value)
                .map_err(|e| e.to_string())
                .and_then(|info| {
                    if info.name == *node {
                        Ok(Value::Node(info))
                    } else {
                        Err(format!("it names node `{}`", info.name))
                    }
                }),
            Key::Service { node, service } => serde_json::from_slice::<ServiceEntry>(value)
                .map_err(|e| e.to_string())
                .and_then(|entry| {
                    if entry.node.name == *node && entry.description.name == *service {
                        Ok(Value::Entry(Arc::new(entry)))
                    } else {
                        Err(format!(
                            "it is service `{}` of node `{}`",
                            entry.description.name, entry.node.name
                        ))
                    }
                }),
        };
        match read {
            Ok(value) => Some((parsed, value)),
            Err(why) => {
                tracing::warn!("etcd key {shown} skipped: {why}");
                None
            }
        }
    }

    /// Applies a change made at `revision` (`None`: a deletion), unless the key has a newer one.
    /// Says whether anything changed.
    pub(crate) fn apply(&mut self, key: Key, revision: i64, value: Option<Value>) -> bool {
        let was_live = match self.known.get(&key) {
            Some(known) if known.revision >= revision => return false,
            Some(known) => known.value.is_some(),
            None => false,
        };
        if value.is_some() && !was_live && self.live >= self.max_keys {
            tracing::warn!(
                "etcd key {key:?} skipped: the registry already holds {} keys, EtcdConfig::max_keys",
                self.max_keys
            );
            return false;
        }
        self.live = self.live + usize::from(value.is_some()) - usize::from(was_live);
        self.known.insert(key, Known { revision, value });
        true
    }

    /// Forgets everything: etcd's history went back, so what we hold may never have been.
    pub(crate) fn clear(&mut self) {
        self.known.clear();
        self.live = 0;
        self.revision = 0;
    }

    /// Every change up to `revision` is applied: tombstones older than it are dropped.
    pub(crate) fn advance(&mut self, revision: i64) {
        if revision > self.revision {
            self.revision = revision;
            self.known
                .retain(|_, k| k.value.is_some() || k.revision > revision);
        }
    }

    /// Starts again from a range read at `revision`; changes of ours newer than it are kept
    /// (the watch from `revision + 1` brings them again).
    pub(crate) fn reset(&mut self, read: Vec<(Key, i64, Value)>, revision: i64) {
        self.known.retain(|_, k| k.revision > revision);
        self.live = self.known.values().filter(|k| k.value.is_some()).count();
        self.revision = 0;
        for (key, at, value) in read {
            self.apply(key, at, Some(value));
        }
        self.advance(revision);
    }

    /// The keys of one node: its own and its services'.
    pub(crate) fn keys_of(&self, node: &str) -> Vec<Key> {
        self.known
            .iter()
            .filter(|(key, known)| {
                known.value.is_some()
                    && match key {
                        Key::Node(n) => n == node,
                        Key::Service { node: n, .. } => n == node,
                    }
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Whether the copy holds `node` in its generation and an entry of each of `services`.
    pub(crate) fn holds(&self, node: &NodeInfo, services: &[String]) -> bool {
        let live = |key: &Key| self.known.get(key).and_then(|k| k.value.as_ref());
        let node_there = matches!(
            live(&Key::Node(node.name.clone())),
            Some(Value::Node(n)) if n.generation == node.generation
        );
        node_there
            && services.iter().all(|service| {
                live(&Key::Service {
                    node: node.name.clone(),
                    service: service.clone(),
                })
                .is_some()
            })
    }

    /// The nodes, and the entries whose node is up in the same generation: an entry outlives
    /// its node only between two events of one transaction.
    pub(crate) fn contents(&self) -> (Vec<NodeInfo>, Vec<Arc<ServiceEntry>>) {
        let mut nodes = BTreeMap::new();
        let mut entries = Vec::new();
        for known in self.known.values() {
            match &known.value {
                Some(Value::Node(n)) => {
                    nodes.insert(n.name.clone(), n.clone());
                }
                Some(Value::Entry(e)) => entries.push(e.clone()),
                None => {}
            }
        }
        entries.retain(|e| {
            nodes
                .get(&e.node.name)
                .is_some_and(|n| n.generation == e.node.generation)
        });
        (nodes.into_values().collect(), entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cluster::options::CallOptions;
    use cluster::service::{ServiceDescription, version};

    fn node(name: &str, generation: u64) -> NodeInfo {
        NodeInfo::new(name, ([127, 0, 0, 1], 1).into(), generation)
    }

    fn entry(node_name: &str, generation: u64) -> Value {
        let d = ServiceDescription::new(
            "s",
            version(1, 0, 0, "", ""),
            None,
            CallOptions::new(),
            vec![],
        );
        Value::Entry(Arc::new(ServiceEntry::new(
            node(node_name, generation),
            Arc::new(d),
        )))
    }

    fn service(node: &str) -> Key {
        Key::Service {
            node: node.to_owned(),
            service: "s".to_owned(),
        }
    }

    #[test]
    fn the_newest_change_of_a_key_wins_whatever_the_order() {
        let mut m = Mirror::new(10, 1 << 20);
        assert!(m.apply(Key::Node("a".into()), 5, Some(Value::Node(node("a", 1)))));
        assert!(m.apply(service("a"), 6, Some(entry("a", 1))));
        // Our own deletion at 8, then the watch's older put at 7: the deletion stays.
        assert!(m.apply(service("a"), 8, None));
        assert!(!m.apply(service("a"), 7, Some(entry("a", 1))));
        assert!(!m.apply(service("a"), 8, None), "the same change twice");
        assert_eq!(m.contents().1.len(), 0);
        m.advance(8);
        assert_eq!(m.keys_of("a"), [Key::Node("a".into())]);
    }

    #[test]
    fn an_entry_of_another_generation_or_without_its_node_is_not_shown() {
        let mut m = Mirror::new(10, 1 << 20);
        m.apply(service("a"), 1, Some(entry("a", 1)));
        assert_eq!(m.contents().1.len(), 0, "no node");
        m.apply(Key::Node("a".into()), 2, Some(Value::Node(node("a", 2))));
        assert_eq!(m.contents().1.len(), 0, "an older generation's entry");
        m.apply(service("a"), 3, Some(entry("a", 2)));
        assert_eq!(m.contents().1.len(), 1);
    }

    #[test]
    fn keys_past_the_limit_are_skipped_and_a_range_read_starts_again() {
        let mut m = Mirror::new(2, 1 << 20);
        assert!(m.apply(Key::Node("a".into()), 1, Some(Value::Node(node("a", 1)))));
        assert!(m.apply(Key::Node("b".into()), 2, Some(Value::Node(node("b", 1)))));
        assert!(!m.apply(Key::Node("c".into()), 3, Some(Value::Node(node("c", 1)))));
        // A replacement is not a new key.
        assert!(m.apply(Key::Node("a".into()), 4, Some(Value::Node(node("a", 2)))));
        m.reset(
            vec![(Key::Node("c".into()), 9, Value::Node(node("c", 1)))],
            10,
        );
        assert_eq!(m.contents().0.len(), 1);
        assert_eq!(m.revision(), 10);
    }

    #[test]
    fn a_value_that_does_not_match_its_key_is_skipped() {
        let keys = Keys::new("/c", "x");
        let m = Mirror::new(10, 64);
        let info = crate::keys::node_value(&node("a", 1));
        assert!(
            m.parse(&keys, keys.node("a").as_bytes(), info.as_bytes())
                .is_some()
        );
        assert!(
            m.parse(&keys, keys.node("b").as_bytes(), info.as_bytes())
                .is_none()
        );
        assert!(m.parse(&keys, keys.node("a").as_bytes(), b"{").is_none());
        assert!(
            m.parse(&keys, keys.node("a").as_bytes(), &[b' '; 65])
                .is_none()
        );
    }
}
