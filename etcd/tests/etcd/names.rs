//! One live process per name, on etcd as on gossip: a live holder keeps its name, a crashed
//! one gives it up at once to its restart.

use cluster::registry::RegistryError;
use cluster::{Node, StartError};

use crate::support::{identity, registry_at};

async fn start(name: &str) -> Result<Node, StartError> {
    Node::builder()
        .identity(identity(name))
        .registry(registry_at("/n"))
        .start()
        .await
}

#[tokio::test]
async fn a_name_held_by_a_live_process_is_refused_and_a_crashed_holders_is_taken_over() {
    let holder = start("orders-1").await.unwrap();
    match start("orders-1").await {
        Err(StartError::Registry(RegistryError::NameTaken { name, holder: at })) => {
            assert_eq!(name, "orders-1");
            assert_eq!(at, holder.addr());
        }
        other => panic!(
            "a second process took a live name: {:?}",
            other.map(|n| n.addr())
        ),
    }
    // The holder still is the one in the registry.
    let seen_by_other = start("observer").await.unwrap();
    let listed: Vec<_> = seen_by_other
        .registry()
        .nodes()
        .into_iter()
        .filter(|n| n.name == "orders-1")
        .collect();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].addr, holder.addr());

    // A crash (no leave: its lease is still alive for its TTL) then a restart: the holder does
    // not answer on its port, so the restart takes the name at once.
    holder.kill().await;
    let restarted = start("orders-1")
        .await
        .expect("the restart takes the name over");
    crate::support::until("the observer sees the restart", || {
        seen_by_other
            .registry()
            .nodes()
            .iter()
            .any(|n| n.name == "orders-1" && n.addr == restarted.addr())
    })
    .await;
}
