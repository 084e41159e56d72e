//! Services shared by the example binaries and the tests: `greeter` (for nodes in separate
//! processes) and `ledger` with its rolling-deploy scenario ([`deploy`]).

pub mod deploy;
mod logs;
pub mod secrets;

pub use logs::log_filter;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What `greet` answers: the greeting and the node that made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Greeting {
    /// The greeting.
    pub text: String,
    /// The node that served it.
    pub node: String,
}

/// A trivial service, enough to see which process answers.
#[cluster::service(
    name = "greeter",
    version = "1.0.0",
    timeout = "2s",
    retry(after = "50ms", budget = "10s")
)]
pub trait Greeter {
    /// Greets `name`; safe to run twice.
    #[call(idempotent)]
    async fn greet(&self, name: String) -> Greeting;
}

/// The provider: greets from its node.
#[derive(Debug)]
pub struct Host {
    /// The node's name.
    pub node: String,
}

impl Greeter for Host {
    async fn greet(&self, name: String) -> Greeting {
        Greeting {
            text: format!("hello, {name}"),
            node: self.node.clone(),
        }
    }
}

/// A ledger: an idempotent read and a non-idempotent write, which must run exactly once.
#[cluster::service(
    name = "ledger",
    version = "1.0.0",
    timeout = "2s",
    retry(after = "20ms", budget = "10s")
)]
pub trait Ledger {
    /// The balance of an account; safe to run twice.
    #[call(idempotent)]
    async fn balance(&self, account: u64) -> u64;
    /// Records deposit `id`; running it twice would count it twice.
    async fn deposit(&self, id: u64, amount: u64) -> u64;
}

/// How often each deposit ran, across every replica: the proof of exactly once.
pub type Executions = Arc<Mutex<HashMap<u64, u32>>>;

/// A ledger replica: takes `work` per call, and counts each deposit in `executions`.
#[derive(Debug)]
pub struct Book {
    /// Time each call takes.
    pub work: Duration,
    /// Shared by all replicas.
    pub executions: Executions,
}

impl Ledger for Book {
    async fn balance(&self, account: u64) -> u64 {
        tokio::time::sleep(self.work).await;
        account * 10
    }

    async fn deposit(&self, id: u64, amount: u64) -> u64 {
        tokio::time::sleep(self.work).await;
        *self.executions.lock().unwrap().entry(id).or_insert(0) += 1;
        amount
    }
}
