use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tokio::sync::{broadcast, watch};

use super::{NodeInfo, Registry, RegistryError, RegistryEvent, RegistryFuture, ServiceEntry};

/// A registry held in this process and shared by the nodes of this process: for tests and for
/// single-process deployments. Every change is visible to every node at once.
#[derive(Debug, Clone)]
pub struct MemoryRegistry {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: RwLock<State>,
    events: broadcast::Sender<RegistryEvent>,
    changes: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    nodes: HashMap<String, NodeInfo>,
    // Lookups clone an `Arc` of the slice: readers never copy entries.
    by_service: HashMap<String, Arc<[Arc<ServiceEntry>]>>,
}

impl Default for MemoryRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        let (events, _) = broadcast::channel(1024);
        let (changes, _) = watch::channel(0);
        Self {
            inner: Arc::new(Inner {
                state: RwLock::new(State::default()),
                events,
                changes,
            }),
        }
    }

    fn write(&self, change: impl FnOnce(&mut State) -> Vec<RegistryEvent>) {
        let events = {
            let mut state = self.inner.state.write().unwrap_or_else(|p| p.into_inner());
            change(&mut state)
        };
        if events.is_empty() {
            return;
        }
        for event in events {
            log(&event);
            // No subscriber is not an error: events are for whoever listens.
            let _ = self.inner.events.send(event);
        }
        self.inner.changes.send_modify(|v| *v += 1);
    }

    fn read<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.inner.state.read().unwrap_or_else(|p| p.into_inner()))
    }
}

fn log(event: &RegistryEvent) {
    match event {
        RegistryEvent::ServiceUp(e) => tracing::info!(
            "service {} {} became available on node {}",
            e.description.name,
            e.description.version,
            e.node
        ),
        RegistryEvent::ServiceDown(e) => tracing::info!(
            "service {} {} went away from node {}",
            e.description.name,
            e.description.version,
            e.node
        ),
        RegistryEvent::NodeUp(n) => tracing::info!("node {n} joined"),
        RegistryEvent::NodeDown(n) => tracing::info!("node {n} left"),
    }
}

impl State {
    fn remove_service(&mut self, node: &str, service: &str) -> Option<Arc<ServiceEntry>> {
        let entries = self.by_service.get(service)?;
        let gone = entries.iter().find(|e| e.node.name == node)?.clone();
        let kept: Arc<[Arc<ServiceEntry>]> = entries
            .iter()
            .filter(|e| e.node.name != node)
            .cloned()
            .collect();
        if kept.is_empty() {
            self.by_service.remove(service);
        } else {
            self.by_service.insert(service.to_owned(), kept);
        }
        Some(gone)
    }
}

impl Registry for MemoryRegistry {
    fn register(&self, entry: ServiceEntry) -> RegistryFuture<'_, Result<(), RegistryError>> {
        let entry = Arc::new(entry);
        self.write(|state| {
            let mut events = Vec::new();
            if !state.nodes.contains_key(&entry.node.name) {
                state
                    .nodes
                    .insert(entry.node.name.clone(), entry.node.clone());
                events.push(RegistryEvent::NodeUp(entry.node.clone()));
            }
            if let Some(old) = state.remove_service(&entry.node.name, &entry.description.name) {
                events.push(RegistryEvent::ServiceDown(old));
            }
            let service = entry.description.name.clone();
            let mut list: Vec<_> = state
                .by_service
                .get(&service)
                .map(|l| l.to_vec())
                .unwrap_or_default();
            list.push(entry.clone());
            state.by_service.insert(service, list.into());
            events.push(RegistryEvent::ServiceUp(entry));
            events
        });
        Box::pin(std::future::ready(Ok(())))
    }

    fn deregister(
        &self,
        node: &str,
        service: &str,
    ) -> RegistryFuture<'_, Result<(), RegistryError>> {
        self.write(|state| {
            state
                .remove_service(node, service)
                .map(RegistryEvent::ServiceDown)
                .into_iter()
                .collect()
        });
        Box::pin(std::future::ready(Ok(())))
    }

    fn join(&self, node: NodeInfo) -> RegistryFuture<'_, Result<(), RegistryError>> {
        self.write(|state| {
            if state.nodes.insert(node.name.clone(), node.clone()).as_ref() == Some(&node) {
                return Vec::new();
            }
            vec![RegistryEvent::NodeUp(node)]
        });
        Box::pin(std::future::ready(Ok(())))
    }

    fn leave(&self, node: &str) -> RegistryFuture<'_, Result<(), RegistryError>> {
        self.write(|state| {
            let services: Vec<String> = state
                .by_service
                .iter()
                .filter(|(_, list)| list.iter().any(|e| e.node.name == node))
                .map(|(name, _)| name.clone())
                .collect();
            let mut events: Vec<RegistryEvent> = services
                .iter()
                .filter_map(|s| state.remove_service(node, s))
                .map(RegistryEvent::ServiceDown)
                .collect();
            if let Some(info) = state.nodes.remove(node) {
                events.push(RegistryEvent::NodeDown(info));
            }
            events
        });
        Box::pin(std::future::ready(Ok(())))
    }

    fn lookup(&self, service: &str) -> Arc<[Arc<ServiceEntry>]> {
        self.read(|state| {
            state
                .by_service
                .get(service)
                .cloned()
                .unwrap_or_else(|| Arc::new([]))
        })
    }

    fn services(&self) -> Vec<Arc<ServiceEntry>> {
        self.read(|state| {
            state
                .by_service
                .values()
                .flat_map(|l| l.iter().cloned())
                .collect()
        })
    }

    fn nodes(&self) -> Vec<NodeInfo> {
        self.read(|state| state.nodes.values().cloned().collect())
    }

    fn events(&self) -> broadcast::Receiver<RegistryEvent> {
        self.inner.events.subscribe()
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::options::CallOptions;
    use crate::service::{ServiceDescription, version};

    fn entry(node: &str, port: u16) -> ServiceEntry {
        let d = ServiceDescription::new(
            "search",
            version(2, 1, 0, "", ""),
            None,
            CallOptions::new(),
            vec![],
        );
        ServiceEntry::new(
            NodeInfo::new(node, ([127, 0, 0, 1], port).into(), 1),
            Arc::new(d),
        )
    }

    #[tokio::test]
    async fn register_replace_deregister_and_leave_emit_events() {
        let reg = MemoryRegistry::new();
        let mut events = reg.events();
        let mut changes = reg.changes();
        reg.register(entry("a", 1)).await.unwrap();
        reg.register(entry("b", 2)).await.unwrap();
        assert_eq!(reg.lookup("search").len(), 2);
        assert!(changes.has_changed().unwrap());
        changes.borrow_and_update();

        reg.register(entry("a", 3)).await.unwrap(); // replaced, not added
        assert_eq!(reg.lookup("search").len(), 2);
        reg.deregister("b", "search").await.unwrap();
        assert_eq!(reg.lookup("search").len(), 1);
        reg.leave("a").await.unwrap();
        assert!(reg.lookup("search").is_empty());
        assert_eq!(
            reg.nodes()
                .iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>(),
            ["b"]
        );
        assert!(changes.has_changed().unwrap());

        let mut kinds = Vec::new();
        while let Ok(e) = events.try_recv() {
            kinds.push(match e {
                RegistryEvent::ServiceUp(e) => format!("up {}", e.node.name),
                RegistryEvent::ServiceDown(e) => format!("down {}", e.node.name),
                RegistryEvent::NodeUp(n) => format!("node up {}", n.name),
                RegistryEvent::NodeDown(n) => format!("node down {}", n.name),
            });
        }
        assert_eq!(
            kinds,
            [
                "node up a",
                "up a",
                "node up b",
                "up b",
                "down a",
                "up a",
                "down b",
                "down a",
                "node down a"
            ]
        );
    }
}
