//! The first service: what is in stock.

/// What is in stock. The name, the version and the timeout travel with the service's registry
/// entry to every caller.
#[cluster::service(name = "inventory", version = "1.0.0", timeout = "2s")]
pub trait Inventory {
    /// How many of `item` are left. Reading twice does no harm, so a caller may retry it
    /// after a timeout.
    #[call(idempotent)]
    async fn stock(&self, item: String) -> u32;

    /// Takes `count` of `item` out of stock; how many are left. Not idempotent: a caller
    /// never sends it again once it may have run.
    async fn reserve(&self, item: String, count: u32) -> Result<u32, String>;
}
