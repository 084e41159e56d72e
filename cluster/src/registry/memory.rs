use std::sync::{Arc, Mutex};

use super::index::{Index, LocalCopy};
use super::{NodeInfo, Registry, RegistryError, RegistryFuture, ServiceEntry};

/// A registry held in this process and shared by the nodes of this process: for tests and for
/// single-process deployments. Every change is visible to every node at once.
#[derive(Debug, Clone, Default)]
pub struct MemoryRegistry {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    copy: LocalCopy,
    // Serialises writers: each takes the current index, changes a copy and publishes it.
    writer: Mutex<()>,
}

impl MemoryRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn update(
        &self,
        change: impl FnOnce(&mut Index),
    ) -> RegistryFuture<'_, Result<(), RegistryError>> {
        let _writer = self.inner.writer.lock().unwrap_or_else(|p| p.into_inner());
        self.inner.copy.update(change);
        Box::pin(std::future::ready(Ok(())))
    }
}

impl Registry for MemoryRegistry {
    fn register(&self, entry: ServiceEntry) -> RegistryFuture<'_, Result<(), RegistryError>> {
        self.update(|index| index.insert(Arc::new(entry)))
    }

    fn deregister(
        &self,
        node: &str,
        service: &str,
    ) -> RegistryFuture<'_, Result<(), RegistryError>> {
        self.update(|index| index.remove(node, service))
    }

    fn join(&self, node: NodeInfo) -> RegistryFuture<'_, Result<(), RegistryError>> {
        self.update(|index| {
            // A restart under the same name replaces the earlier life and its entries.
            if index.nodes.get(&node.name).is_some_and(|n| n != &node) {
                index.remove_node(&node.name);
            }
            index.nodes.insert(node.name.clone(), node);
        })
    }

    fn leave(&self, node: &str) -> RegistryFuture<'_, Result<(), RegistryError>> {
        self.update(|index| index.remove_node(node))
    }

    fn local_copy(&self) -> &LocalCopy {
        &self.inner.copy
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::options::CallOptions;
    use crate::registry::RegistryEvent;
    use crate::service::{ServiceDescription, version};

    fn entry(node: &str, port: u16) -> ServiceEntry {
        entry_of(node, port, 1)
    }

    fn entry_of(node: &str, port: u16, minor: u64) -> ServiceEntry {
        let d = ServiceDescription::new(
            "search",
            version(2, minor, 0, "", ""),
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

        reg.register(entry_of("a", 1, 2)).await.unwrap(); // replaced, not added
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
                RegistryEvent::ServiceUp(e) => {
                    format!("up {} {}", e.node.name, e.description.version)
                }
                RegistryEvent::ServiceDown(e) => {
                    format!("down {} {}", e.node.name, e.description.version)
                }
                RegistryEvent::NodeUp(n) => format!("node up {}", n.name),
                RegistryEvent::NodeDown(n) => format!("node down {}", n.name),
            });
        }
        assert_eq!(
            kinds,
            [
                "node up a",
                "up a 2.1.0",
                "node up b",
                "up b 2.1.0",
                "down a 2.1.0",
                "up a 2.2.0",
                "down b 2.1.0",
                "down a 2.2.0",
                "node down a"
            ]
        );
    }
}
