//! The events another process sees, in the order the in-process registry tells them
//! (`cluster/src/registry/memory.rs`'s test): the same `LocalCopy` makes them.

use std::sync::Arc;

use cluster::CallOptions;
use cluster::registry::{NodeInfo, Registry, RegistryEvent, ServiceEntry};
use cluster::service::{ServiceDescription, version};

use crate::support::registry_at;

fn entry(node: &str, port: u16, minor: u64) -> ServiceEntry {
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

fn told(e: RegistryEvent) -> String {
    match e {
        RegistryEvent::ServiceUp(e) => format!("up {} {}", e.node.name, e.description.version),
        RegistryEvent::ServiceDown(e) => format!("down {} {}", e.node.name, e.description.version),
        RegistryEvent::NodeUp(n) => format!("node up {}", n.name),
        RegistryEvent::NodeDown(n) => format!("node down {}", n.name),
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn another_process_is_told_each_change_in_order() {
    let (here, there) = (registry_at("/e"), registry_at("/e"));
    let watcher = registry_at("/e");
    watcher
        .join(NodeInfo::new("w", ([127, 0, 0, 1], 9).into(), 1))
        .await
        .unwrap();
    let mut events = watcher.events();

    here.join(entry("a", 1, 1).node).await.unwrap();
    here.register(entry("a", 1, 1)).await.unwrap();
    there.join(entry("b", 2, 1).node).await.unwrap();
    there.register(entry("b", 2, 1)).await.unwrap();
    here.register(entry("a", 1, 2)).await.unwrap(); // replaced, not added
    there.deregister("b", "search").await.unwrap();
    here.leave("a").await.unwrap();

    let expected = [
        "node up a",
        "up a 2.1.0",
        "node up b",
        "up b 2.1.0",
        "down a 2.1.0",
        "up a 2.2.0",
        "down b 2.1.0",
        "down a 2.2.0",
        "node down a",
    ];
    let mut seen = Vec::new();
    while seen.len() < expected.len() {
        let next = tokio::time::timeout(std::time::Duration::from_secs(10), events.recv());
        seen.push(told(next.await.expect("every event arrives").unwrap()));
    }
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn an_entry_of_a_node_not_joined_here_is_refused() {
    let registry = registry_at("/e");
    registry.join(entry("a", 1, 1).node).await.unwrap();
    match registry.register(entry("z", 2, 1)).await {
        Err(cluster::registry::RegistryError::NotLocal { node, own }) => {
            assert_eq!((node.as_str(), own.as_str()), ("z", "a"));
        }
        other => panic!("{other:?}"),
    }
}
