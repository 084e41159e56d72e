//! The call context and the extensible wire (docs/calls.md, "A call inside a call";
//! docs/wire.md): what a handler sees, what a call inside a handler inherits, layers, the
//! reply limit, connecting, draining, and nodes of two wire versions calling each other.
#![allow(unreachable_pub, missing_docs)]

#[path = "../support/mod.rs"]
mod support;

mod connect;
mod drain;
mod hops;
mod layers;
mod seen;
mod trace;
mod wire;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cluster::error::Downstream;
use cluster::{MemoryNetwork, MemoryRegistry, Node};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// What a handler saw of its call, sent back to the caller to assert on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Seen {
    pub node: String,
    pub caller: Option<String>,
    pub request_id: String,
    pub attempt: u32,
    pub remaining: Duration,
    pub budget: Option<Duration>,
    pub tenant: Option<String>,
}

impl Seen {
    fn here(node: &str) -> Seen {
        let ctx = cluster::context().expect("a handler has a context");
        Seen {
            node: node.to_owned(),
            caller: ctx.caller().map(str::to_owned),
            request_id: ctx.request_id().to_string(),
            attempt: ctx.attempt(),
            remaining: ctx.remaining(),
            budget: ctx.budget_remaining(),
            tenant: ctx.metadata().get("tenant").map(str::to_owned),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
pub enum OrderError {
    #[error(transparent)]
    Downstream(#[from] Downstream),
}

#[cluster::service(
    name = "orders",
    version = "1.0.0",
    timeout = "10s",
    retry(after = "100ms", budget = "10s")
)]
pub trait Orders {
    /// Places an order: calls `payments` (and `inventory`, by plan) from its handler.
    async fn place(&self, item: String) -> Result<(Seen, Seen), OrderError>;
    /// What the handler sees of its own call.
    #[call(idempotent)]
    async fn whoami(&self) -> Seen;
}

#[cluster::service(
    name = "payments",
    version = "1.0.0",
    timeout = "10s",
    retry(after = "100ms", budget = "10s")
)]
pub trait Payments {
    #[call(idempotent)]
    async fn charge(&self, cents: u64) -> Seen;
}

#[cluster::service(name = "inventory", version = "1.0.0")]
pub trait Inventory {
    #[call(idempotent)]
    async fn reserve(&self, item: String) -> Seen;
}

/// What `orders.place` calls, and how.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Plan {
    /// `payments.charge`, in the handler's task.
    Pay,
    /// `inventory.reserve`, in the handler's task.
    Reserve,
    /// `payments.charge`, from a task the handler spawns in its context.
    PayFromTask,
}

pub struct Shop {
    pub node: String,
    pub plan: Plan,
    pub payments: PaymentsClient,
    pub inventory: InventoryClient,
    /// When set, `place` waits for it before calling anything.
    pub gate: Option<Arc<Notify>>,
    pub started: AtomicUsize,
    /// How the spawned task's call ended (plan `PayFromTask`).
    pub spawned: std::sync::Mutex<Option<String>>,
}

impl Shop {
    pub fn new(node: &Node, plan: Plan) -> Self {
        Self {
            node: node.name().to_owned(),
            plan,
            payments: PaymentsClient::new(node),
            inventory: InventoryClient::new(node),
            gate: None,
            started: AtomicUsize::new(0),
            spawned: std::sync::Mutex::new(None),
        }
    }
}

impl Orders for Arc<Shop> {
    async fn place(&self, _item: String) -> Result<(Seen, Seen), OrderError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let here = Seen::here(&self.node);
        if let Some(gate) = &self.gate {
            gate.notified().await;
        }
        let there = match self.plan {
            Plan::Pay => self.payments.charge(100).await.map_err(Downstream::from)?,
            Plan::Reserve => self
                .inventory
                .reserve("book".into())
                .await
                .map_err(Downstream::from)?,
            Plan::PayFromTask => {
                let ctx = cluster::context().expect("in a handler");
                let payments = self.payments.clone();
                let shop = self.clone();
                let task = tokio::spawn(ctx.scope(async move {
                    let result = payments.charge(100).await;
                    let outcome = match &result {
                        Ok(_) => "ok".to_owned(),
                        Err(cluster::CallError::Rpc(e)) => e.kind().to_string(),
                        Err(e) => format!("{e:?}"),
                    };
                    *shop.spawned.lock().unwrap() = Some(outcome);
                    result
                }));
                task.await
                    .expect("the task ends")
                    .map_err(Downstream::from)?
            }
        };
        Ok((here, there))
    }

    async fn whoami(&self) -> Seen {
        Seen::here(&self.node)
    }
}

/// A payments provider that takes `delay` to answer, and counts what happens to its calls.
pub struct Bank {
    pub node: String,
    pub delay: Duration,
    pub counters: Arc<support::Counters>,
}

impl Bank {
    pub fn new(node: &Node, delay: Duration) -> Self {
        Self {
            node: node.name().to_owned(),
            delay,
            counters: Arc::default(),
        }
    }
}

/// Counts a call out when dropped, finished or not.
struct Tally(Arc<support::Counters>, bool);

impl Drop for Tally {
    fn drop(&mut self) {
        let counter = if self.1 {
            &self.0.finished
        } else {
            &self.0.dropped
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

impl Payments for Arc<Bank> {
    async fn charge(&self, _cents: u64) -> Seen {
        self.counters.started.fetch_add(1, Ordering::SeqCst);
        let mut tally = Tally(self.counters.clone(), false);
        tokio::time::sleep(self.delay).await;
        tally.1 = true;
        Seen::here(&self.node)
    }
}

pub struct Stock(pub String);

impl Inventory for Stock {
    async fn reserve(&self, item: String) -> Seen {
        // `panic:N` panics with a message of N bytes.
        if let Some(n) = item.strip_prefix("panic:") {
            panic!("{}", "P".repeat(n.parse().unwrap_or(1)));
        }
        Seen::here(&self.0)
    }
}

/// A cluster on the in-memory network (for tests on the paused clock) or on TCP.
pub struct Net {
    pub registry: MemoryRegistry,
    pub memory: Option<MemoryNetwork>,
    /// TCP in plaintext (`insecure()`): wire 1 has no TLS.
    pub plaintext: bool,
}

impl Net {
    pub fn memory() -> Self {
        Self {
            registry: MemoryRegistry::new(),
            memory: Some(MemoryNetwork::new()),
            plaintext: false,
        }
    }

    pub fn tcp() -> Self {
        Self {
            registry: MemoryRegistry::new(),
            memory: None,
            plaintext: false,
        }
    }

    /// Nodes on TCP in plaintext, as a first-release cluster (which had no TLS) is.
    pub fn plaintext() -> Self {
        Self {
            plaintext: true,
            ..Self::tcp()
        }
    }

    pub fn builder(&self, name: &str) -> cluster::NodeBuilder {
        let builder = Node::builder().name(name).registry(self.registry.clone());
        match &self.memory {
            Some(net) => builder.memory(net),
            None if self.plaintext => builder.insecure(),
            None => builder.identity(support::identity(name)),
        }
    }

    pub async fn node(&self, name: &str) -> Node {
        self.builder(name).start().await.expect("node starts")
    }

    /// A node serving orders with `plan`.
    pub async fn shop(&self, name: &str, plan: Plan) -> (Node, Arc<Shop>) {
        let node = self.node(name).await;
        let shop = Arc::new(Shop::new(&node, plan));
        let _r = node.serve(OrdersServer::new(shop.clone())).await.unwrap();
        (node, shop)
    }

    /// A node serving payments that take `delay`.
    pub async fn bank(&self, name: &str, delay: Duration) -> (Node, Arc<Bank>) {
        let node = self.node(name).await;
        let bank = Arc::new(Bank::new(&node, delay));
        let _r = node.serve(PaymentsServer::new(bank.clone())).await.unwrap();
        (node, bank)
    }
}
