//! The frontend: places one order, tries to read the inventory directly, and leaves.

use std::time::Duration;

use guide::inventory::InventoryClient;
use guide::orders::OrdersClient;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (node, _) = guide::join("web-1").await?;

    // A new node learns who serves what by gossip, within a second or so: the calls wait up
    // to 10 s for a provider to appear.
    let wait = Duration::from_secs(10);
    let orders = OrdersClient::new(&node);
    let placed = orders
        .place("apple".into(), 2)
        .wait_for_provider(wait)
        .await?;
    println!("web-1 placed an order: {placed}");

    // inventory admits only orders-*: this call is refused.
    let inventory = InventoryClient::new(&node);
    let read = inventory.stock("apple".into());
    match read.wait_for_provider(wait).await {
        Ok(n) => println!("web-1 read the stock: {n}"),
        Err(e) => println!("web-1 may not read the stock: {e}"),
    }

    node.shutdown().await;
    Ok(())
}
