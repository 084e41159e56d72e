//! The local copy every registry backend keeps: who provides what, read without locks held
//! across calls, replaced whole on every change, with the change told as events and a log line.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock};

use tokio::sync::{broadcast, watch};

use super::summary::Summary;
use super::{NodeInfo, RegistryEvent, ServiceEntry};
use crate::fast_map::FastMap;

/// A snapshot of the registry. Lookups clone an `Arc` of a slice: readers never copy entries.
#[derive(Debug, Clone, Default)]
pub(crate) struct Index {
    pub(crate) nodes: BTreeMap<String, NodeInfo>,
    pub(crate) by_service: FastMap<String, Arc<[Arc<ServiceEntry>]>>,
}

impl Index {
    pub(crate) fn lookup(&self, service: &str) -> Arc<[Arc<ServiceEntry>]> {
        // A miss (a call waiting for a provider looks again on every change) allocates nothing.
        static NONE: LazyLock<Arc<[Arc<ServiceEntry>]>> = LazyLock::new(|| Arc::new([]));
        self.by_service
            .get(service)
            .cloned()
            .unwrap_or_else(|| NONE.clone())
    }

    pub(crate) fn entries(&self) -> impl Iterator<Item = &Arc<ServiceEntry>> {
        self.by_service.values().flat_map(|list| list.iter())
    }

    /// An index of `nodes` and `entries` (an entry's node counts as a node too). Of two
    /// entries of one node and service, the later wins, as with [`insert`](Self::insert). In
    /// O(N): the entries are grouped by service first, and each service's slice is built once
    /// (an `insert` per entry copies the service's slice each time, O(N²) for one service).
    pub(crate) fn build(
        nodes: impl IntoIterator<Item = NodeInfo>,
        entries: impl IntoIterator<Item = Arc<ServiceEntry>>,
    ) -> Self {
        let mut index = Index::default();
        for node in nodes {
            index.nodes.insert(node.name.clone(), node);
        }
        let mut grouped: HashMap<String, Vec<Option<Arc<ServiceEntry>>>> = HashMap::new();
        // Where each (service, node) sits in its group, to replace it in O(1).
        let mut at: HashMap<(String, String), usize> = HashMap::new();
        for entry in entries {
            index
                .nodes
                .insert(entry.node.name.clone(), entry.node.clone());
            let service = entry.description.name.clone();
            let group = grouped.entry(service.clone()).or_default();
            if let Some(old) = at.insert((service, entry.node.name.clone()), group.len()) {
                group[old] = None;
            }
            group.push(Some(entry));
        }
        index.by_service = grouped
            .into_iter()
            .map(|(service, group)| (service, group.into_iter().flatten().collect()))
            .collect();
        index
    }

    /// Adds or replaces (same node, same service) an entry.
    pub(crate) fn insert(&mut self, entry: Arc<ServiceEntry>) {
        self.nodes
            .insert(entry.node.name.clone(), entry.node.clone());
        let name = entry.description.name.clone();
        let mut list: Vec<_> = self
            .by_service
            .get(&name)
            .map(|l| l.to_vec())
            .unwrap_or_default();
        list.retain(|e| e.node.name != entry.node.name);
        list.push(entry);
        self.by_service.insert(name, list.into());
    }

    /// Removes the entry of `service` on `node`.
    pub(crate) fn remove(&mut self, node: &str, service: &str) {
        let Some(list) = self.by_service.get(service) else {
            return;
        };
        let kept: Arc<[Arc<ServiceEntry>]> = list
            .iter()
            .filter(|e| e.node.name != node)
            .cloned()
            .collect();
        if kept.is_empty() {
            self.by_service.remove(service);
        } else {
            self.by_service.insert(service.to_owned(), kept);
        }
    }

    /// Removes a node and all its entries.
    pub(crate) fn remove_node(&mut self, node: &str) {
        self.nodes.remove(node);
        let services: Vec<String> = self
            .by_service
            .iter()
            .filter(|(_, list)| list.iter().any(|e| e.node.name == node))
            .map(|(name, _)| name.clone())
            .collect();
        for service in services {
            self.remove(node, &service);
        }
    }

    /// The nodes of the entries marked suspect.
    fn suspected(&self) -> std::collections::BTreeSet<&str> {
        self.entries()
            .filter(|e| e.suspect)
            .map(|e| e.node.name.as_str())
            .collect()
    }

    /// The events that turn `self` into `next`, departures first (services down, then nodes
    /// down), then arrivals (nodes up, then services up): a consumer applying them in order
    /// never holds a service whose node it has dropped, and a node restarted under the same
    /// name goes down (old generation) before it comes up (new one). An entry that changed
    /// (another description, a new generation) goes down and up. An entry marked failing its
    /// health check counts as down: it goes down when marked, up when it passes again.
    pub(crate) fn changes_to(&self, next: &Index) -> Vec<RegistryEvent> {
        let key = |e: &Arc<ServiceEntry>| (e.node.name.clone(), e.description.name.clone());
        let serving = |index: &Index| -> HashMap<_, _> {
            index
                .entries()
                .filter(|e| !e.failing)
                .map(|e| (key(e), e.clone()))
                .collect()
        };
        let (old, new) = (serving(self), serving(next));
        // The same `Arc` is the same entry: a backend that republishes what it kept (the
        // resolver backend) is not compared field by field (`ServiceDescription` is not `Eq`,
        // so `Arc`'s own `==` compares the values).
        let same =
            |a: &Arc<ServiceEntry>, b: &Arc<ServiceEntry>| Arc::ptr_eq(a, b) || a.same_provider(b);
        let mut down: Vec<_> = old
            .iter()
            .filter(|(k, e)| new.get(*k).is_none_or(|n| !same(n, e)))
            .collect();
        let mut up: Vec<_> = new
            .iter()
            .filter(|(k, e)| old.get(*k).is_none_or(|o| !same(o, e)))
            .collect();
        down.sort_by(|a, b| a.0.cmp(b.0));
        up.sort_by(|a, b| a.0.cmp(b.0));

        let mut events: Vec<_> = down
            .into_iter()
            .map(|(_, e)| RegistryEvent::ServiceDown(Arc::clone(e)))
            .collect();
        for (name, node) in &self.nodes {
            if next.nodes.get(name) != Some(node) {
                events.push(RegistryEvent::NodeDown(node.clone()));
            }
        }
        for (name, node) in &next.nodes {
            if self.nodes.get(name) != Some(node) {
                events.push(RegistryEvent::NodeUp(node.clone()));
            }
        }
        events.extend(
            up.into_iter()
                .map(|(_, e)| RegistryEvent::ServiceUp(Arc::clone(e))),
        );
        events
    }
}

/// A registry backend's local copy: what [`Registry::lookup`](super::Registry::lookup) and the
/// other reads answer from, replaced whole on every change, each difference told as a
/// [`RegistryEvent`] and an info log line. Backends (in this crate and others) keep one and
/// delegate their reads to it.
#[derive(Debug)]
pub struct LocalCopy {
    index: RwLock<Arc<Index>>,
    // Serialises replacements, so that the diff is computed outside the lock lookups take.
    writer: Mutex<()>,
    events: broadcast::Sender<RegistryEvent>,
    changes: watch::Sender<u64>,
    // Moves on every replacement, after the new index is in place: a reader that reads it
    // before a lookup never stamps an older index with a newer count (`client/route.rs`).
    generation: AtomicU64,
    // The changes in the log: each at DEBUG, counted at INFO.
    summary: Summary,
    // Events since the copy was made, by kind (node up, node down, service up, service down):
    // read by the node's metrics when they are rendered.
    counted: [AtomicU64; 4],
}

impl Default for LocalCopy {
    fn default() -> Self {
        let (events, _) = broadcast::channel(1024);
        let (changes, _) = watch::channel(0);
        Self {
            index: RwLock::default(),
            writer: Mutex::default(),
            events,
            changes,
            generation: AtomicU64::new(0),
            summary: Summary::default(),
            counted: Default::default(),
        }
    }
}

impl LocalCopy {
    /// An empty copy.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the copy with these nodes and entries (an entry's node counts as a node too).
    pub fn replace_with(
        &self,
        nodes: impl IntoIterator<Item = NodeInfo>,
        entries: impl IntoIterator<Item = Arc<ServiceEntry>>,
    ) {
        self.replace(Index::build(nodes, entries));
    }

    /// The entries named `service`.
    pub fn lookup(&self, service: &str) -> Arc<[Arc<ServiceEntry>]> {
        self.current().lookup(service)
    }

    /// The service name held nearest to `service`, one no entry has, if one is near enough to
    /// be a slip of the keyboard (within a third of its length in edits): for an error's "did
    /// you mean". `None` if `service` has entries or no name is near. It reads every name the
    /// copy holds: for a failure, not for every call.
    pub fn nearest_service(&self, service: &str) -> Option<String> {
        let index = self.current();
        if index.by_service.contains_key(service) {
            return None;
        }
        let names = index.by_service.keys().map(String::as_str);
        crate::error::spelling::nearest(service, names).map(str::to_owned)
    }

    /// Every entry.
    pub fn services(&self) -> Vec<Arc<ServiceEntry>> {
        self.current().entries().cloned().collect()
    }

    /// Every node.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.current().nodes.values().cloned().collect()
    }

    pub(crate) fn current(&self) -> Arc<Index> {
        self.index.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the index with `next`, logging and sending an event for each change. A change
    /// of suspicion alone (`ServiceEntry::suspect`) makes no event, but moves
    /// [`changes`](Self::changes): lookups answer differently.
    pub(crate) fn replace(&self, next: Index) {
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.current();
        let events = current.changes_to(&next);
        let suspicion = current.suspected() != next.suspected();
        *self.index.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(next);
        self.generation.fetch_add(1, Ordering::Release);
        if events.is_empty() {
            if suspicion {
                self.changes.send_modify(|v| *v += 1);
            }
            return;
        }
        for event in events {
            self.summary.note(&event);
            let kind = match event {
                RegistryEvent::NodeUp(_) => 0,
                RegistryEvent::NodeDown(_) => 1,
                RegistryEvent::ServiceUp(_) => 2,
                RegistryEvent::ServiceDown(_) => 3,
            };
            self.counted[kind].fetch_add(1, Ordering::Relaxed);
            // No subscriber is not an error: events are for whoever listens.
            let _ = self.events.send(event);
        }
        self.summary.changed();
        self.changes.send_modify(|v| *v += 1);
    }

    /// Changes the index under a function of the current one. Callers serialise their updates
    /// (a read-modify-write between two replacements).
    pub(crate) fn update(&self, change: impl FnOnce(&mut Index)) {
        let mut next = (*self.current()).clone();
        change(&mut next);
        self.replace(next);
    }

    /// Events from now on.
    pub fn events(&self) -> broadcast::Receiver<RegistryEvent> {
        self.events.subscribe()
    }

    /// A counter that moves on every change.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Events since the copy was made: nodes up, nodes down, service entries up, down.
    pub(crate) fn counted_events(&self) -> [u64; 4] {
        self.counted
            .each_ref()
            .map(|count| count.load(Ordering::Relaxed))
    }

    /// Nodes, service names and entries in the copy now.
    pub(crate) fn sizes(&self) -> (usize, usize, usize) {
        let index = self.current();
        let entries = index.by_service.values().map(|list| list.len()).sum();
        (index.nodes.len(), index.by_service.len(), entries)
    }

    /// A count of replacements of the copy, read before a lookup: while it has not moved, what
    /// that lookup found is still the copy's.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::service::ServiceDescription;

    fn entry(node: &str, service: &str, version: &str) -> Arc<ServiceEntry> {
        let json = format!(
            r#"{{"name":"{service}","version":"{version}","options":{{}},"functions":[],"wire":2}}"#
        );
        let description: ServiceDescription = serde_json::from_str(&json).expect("a description");
        let addr = SocketAddr::from(([127, 0, 0, 1], 7000));
        Arc::new(ServiceEntry::new(
            NodeInfo::new(node, addr, 1),
            Arc::new(description),
        ))
    }

    #[test]
    fn build_groups_by_service_and_the_later_of_two_entries_wins() {
        let entries = vec![
            entry("a", "search", "1.0.0"),
            entry("b", "search", "1.0.0"),
            entry("a", "orders", "1.0.0"),
            entry("a", "search", "2.0.0"),
        ];
        let built = Index::build([], entries.clone());
        let mut inserted = Index::default();
        for e in entries {
            inserted.insert(e);
        }
        for index in [&built, &inserted] {
            let search = index.lookup("search");
            let versions: Vec<_> = search
                .iter()
                .map(|e| (e.node.name.as_str(), e.description.version.to_string()))
                .collect();
            assert_eq!(versions, [("b", "1.0.0".into()), ("a", "2.0.0".into())]);
            assert_eq!(index.lookup("orders").len(), 1);
            assert_eq!(index.nodes.len(), 2);
        }
    }

    #[test]
    fn build_keeps_nodes_without_entries() {
        let addr = SocketAddr::from(([127, 0, 0, 1], 7001));
        let index = Index::build([NodeInfo::new("idle", addr, 1)], []);
        assert!(index.nodes.contains_key("idle"));
        assert_eq!(index.entries().count(), 0);
    }
}
