//! Typed functions called over HTTP with JSON: three services on mutual-TLS nodes in one
//! process, and a gateway in front of them (`docs/gateway-calls.md`). What the Python client
//! of `discovery/conformance/functions.py` calls; it prints the gateway's URL and the two API
//! keys, one per line, then serves until its standard input closes.
//!
//! - `inventory.reserve(item, count) -> Result<u32, StockError>`: admits only `gateway-1` and
//!   `shop-*` as callers (its provider's allow-list);
//! - `inventory.slow(ms) -> u64`: answers after `ms` milliseconds;
//! - `shop.order(item, count) -> Result<String, String>`: calls `inventory.reserve` itself;
//! - `bank.deposit(id) -> u64` (`at_most_once`): its first run takes longer than its 300 ms
//!   timeout, so the call path asks again, and is answered from the provider's record;
//!   `bank.deposits() -> Vec<u64>` lists what ran.
//!
//! Edge callers: `shop` (key `shop-key-0123456789abcdef`) may call `inventory.*` and
//! `shop.*`; `ops` (key `ops-key-0123456789abcdef0`) may call everything.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cluster::{Authority, Callers, MemoryRegistry, Node};
use cluster_discovery::gateway::{EdgeCallers, FunctionRoute, Gateway};
use serde::{Deserialize, Serialize};

const SHOP_KEY: &str = "shop-key-0123456789abcdef";
const OPS_KEY: &str = "ops-key-0123456789abcdef0";

/// Why a reservation failed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum StockError {
    /// Fewer left than asked for.
    OutOfStock {
        /// How many are left.
        left: u32,
    },
    /// No such item.
    UnknownItem,
}

impl std::fmt::Display for StockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StockError::OutOfStock { left } => write!(f, "out of stock, {left} left"),
            StockError::UnknownItem => write!(f, "unknown item"),
        }
    }
}

/// A stock of apples.
#[cluster::service(name = "inventory", version = "1.0.0", timeout = "5s")]
pub trait Inventory {
    /// Takes `count` of `item`; what is left.
    #[call(idempotent)]
    async fn reserve(&self, item: String, count: u32) -> Result<u32, StockError>;
    /// Answers `ms` after `ms` milliseconds.
    #[call(idempotent)]
    async fn slow(&self, ms: u64) -> u64;
}

/// Orders, through the inventory.
#[cluster::service(name = "shop", version = "1.0.0", timeout = "5s")]
pub trait Shop {
    /// Reserves through `inventory`: a call inside a handler.
    async fn order(&self, item: String, count: u32) -> Result<String, String>;
}

/// Deposits that must not run twice.
#[cluster::service(
    name = "bank",
    version = "1.0.0",
    timeout = "300ms",
    retry(after = "20ms", budget = "10s", factor = 1.0, jitter = false)
)]
pub trait Bank {
    /// Records deposit `id`; how many deposits ran.
    #[call(at_most_once)]
    async fn deposit(&self, id: u64) -> u64;
    /// The deposits that ran, in order.
    #[call(idempotent)]
    async fn deposits(&self) -> Vec<u64>;
}

struct Stock(std::sync::Mutex<u32>);

impl Inventory for Arc<Stock> {
    async fn reserve(&self, item: String, count: u32) -> Result<u32, StockError> {
        if item != "apple" {
            return Err(StockError::UnknownItem);
        }
        let mut left = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if count > *left {
            return Err(StockError::OutOfStock { left: *left });
        }
        *left -= count;
        Ok(*left)
    }

    async fn slow(&self, ms: u64) -> u64 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        ms
    }
}

struct Front(InventoryClient);

impl Shop for Front {
    async fn order(&self, item: String, count: u32) -> Result<String, String> {
        match self.0.reserve(item.clone(), count).await {
            Ok(left) => Ok(format!("{count} {item} ordered, {left} left")),
            Err(e) => Err(e.to_string()),
        }
    }
}

#[derive(Default)]
struct Vault {
    slow_once: AtomicBool,
    ran: std::sync::Mutex<Vec<u64>>,
}

impl Bank for Arc<Vault> {
    async fn deposit(&self, id: u64) -> u64 {
        // The first deposit outlasts its attempt: the call path asks the same process again.
        if !self.slow_once.swap(true, Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let mut ran = self.ran.lock().unwrap_or_else(|e| e.into_inner());
        ran.push(id);
        ran.len() as u64
    }

    async fn deposits(&self) -> Vec<u64> {
        self.ran.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let authority = Authority::new("demo")?;
    let registry = MemoryRegistry::new();
    let node = async |name: &str| -> Result<Node, Box<dyn std::error::Error>> {
        Ok(Node::builder()
            .name(name)
            .identity(authority.issue(name)?)
            .registry(registry.clone())
            .start()
            .await?)
    };
    let inventory = node("inventory-1").await?;
    let stock = Arc::new(Stock(std::sync::Mutex::new(100)));
    let _ = inventory
        .serve(Callers::only(["gateway-1", "shop-*"]).may_call(InventoryServer::new(stock)))
        .await?;
    let shop = node("shop-1").await?;
    let _ = shop
        .serve(ShopServer::new(Front(InventoryClient::new(&shop))))
        .await?;
    let bank = node("bank-1").await?;
    let _ = bank
        .serve(BankServer::new(Arc::new(Vault::default())))
        .await?;

    let gateway_node = node("gateway-1").await?;
    let edge = EdgeCallers::new()
        .key("shop", SHOP_KEY, ["inventory.*", "shop.*"])
        .key("ops", OPS_KEY, ["*"]);
    let gateway = Gateway::new()
        .functions("/api/*", FunctionRoute::new(&gateway_node, edge))
        .workers(1)
        .start(([127, 0, 0, 1], 0).into())
        .await?;
    println!("{}\n{SHOP_KEY}\n{OPS_KEY}", gateway.url());

    // Until the caller closes our standard input (or goes away).
    let _ =
        tokio::task::spawn_blocking(|| std::io::copy(&mut std::io::stdin(), &mut std::io::sink()))
            .await;
    gateway.shutdown().await;
    for node in [gateway_node, bank, shop, inventory] {
        node.shutdown().await;
    }
    Ok(())
}
