//! The orders process: serves `orders`, whose handler calls `inventory`.

use cluster::CallError;
use guide::inventory::InventoryClient;
use guide::orders::{Orders, OrdersServer};

/// Places orders through the inventory.
struct Shop {
    inventory: InventoryClient,
}

impl Orders for Shop {
    async fn place(&self, item: String, count: u32) -> Result<String, String> {
        let ctx = cluster::context().expect("inside a handler");
        println!(
            "placing {count} {item} for {}, {} ms left",
            ctx.caller().unwrap_or("?"),
            ctx.remaining().as_millis()
        );
        // A call inside a call: it must end before this handler's own deadline, and it
        // carries the same request id.
        match self.inventory.reserve(item.clone(), count).await {
            Ok(left) => Ok(format!("{count} {item} reserved, {left} left")),
            // inventory's own error, such as "only 3 apple left"
            Err(CallError::App { error, .. }) => Err(error),
            // No provider, a timeout, a refusal: the whole report (addresses, attempts) in
            // this process's log, a short reason to the caller, who may be outside the cluster.
            Err(e) => {
                eprintln!("inventory failed: {e}");
                Err("inventory is unavailable".to_owned())
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (node, _) = guide::join("orders-1").await?;
    let shop = Shop {
        inventory: InventoryClient::new(&node),
    };
    let _registration = node.serve(OrdersServer::new(shop)).await?;
    println!("orders-1 is ready");
    node.shutdown_on_signal().await;
    Ok(())
}
