//! The second service: it places orders, and calls `inventory` to do it.

/// Places orders.
#[cluster::service(name = "orders", version = "1.0.0", timeout = "5s")]
pub trait Orders {
    /// Reserves `count` of `item` in the inventory; says what was placed.
    async fn place(&self, item: String, count: u32) -> Result<String, String>;
}
