//! The inventory process: serves `inventory` to the nodes of the orders service only.

use std::collections::HashMap;
use std::sync::Mutex;

use cluster::Callers;
use guide::inventory::{Inventory, InventoryServer};

/// The stock, in memory.
struct Store {
    items: Mutex<HashMap<String, u32>>,
}

impl Inventory for Store {
    async fn stock(&self, item: String) -> u32 {
        let items = self.items.lock().unwrap();
        items.get(&item).copied().unwrap_or(0)
    }

    async fn reserve(&self, item: String, count: u32) -> Result<u32, String> {
        // Who called: the node named by the caller's certificate.
        let ctx = cluster::context().expect("inside a handler");
        let caller = ctx.caller().unwrap_or("?");
        let mut items = self.items.lock().unwrap();
        let left = items.get_mut(&item).ok_or(format!("no {item} here"))?;
        if *left < count {
            return Err(format!("only {left} {item} left"));
        }
        *left -= count;
        println!("reserved {count} {item} for {caller}, {left} left");
        Ok(*left)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (node, gossip) = guide::join("inventory-1").await?;
    let store = Store {
        items: Mutex::new(HashMap::from([("apple".to_owned(), 10)])),
    };
    // guide:start serve
    // Only nodes named orders-* may call inventory.
    let server = InventoryServer::new(store);
    let _registration = node
        .serve(Callers::only(["orders-*"]).may_call(server))
        .await?;
    // guide:end serve
    println!("inventory-1 is ready, gossip at {gossip}");
    // Serves until ctrl-c, then leaves the cluster cleanly.
    node.shutdown_on_signal().await;
    Ok(())
}
