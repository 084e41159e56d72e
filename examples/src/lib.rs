//! Services shared by the example binaries and the tests: `greeter` (for nodes in separate
//! processes), `probe` (what the abuse suite measures a node with), `ledger` with its
//! rolling-deploy scenario ([`deploy`]), and `bank`, whose deposits run at most once.

pub mod deploy;
mod logs;
pub mod secrets;

pub use logs::{BUFFERED_LOG_LINES, DROPPED_REPORT_PERIOD, Logs, init_logs, log_filter};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// What the abuse suite (`tests/abuse.rs`) calls besides `greeter`, served by `cluster-node
/// --probe`: a function that counts its runs (did a refused request run?), one that takes its
/// time (a request still in flight), and one whose declared timeout is three years.
#[cluster::service(name = "probe", version = "1.0.0", timeout = "2s")]
pub trait Probe {
    /// How many times `count` has run on this node, this run included.
    async fn count(&self) -> u64;
    /// Sleeps `ms` milliseconds, then answers them.
    async fn sleep(&self, ms: u64) -> u64;
    /// Answers `n` at once; declared with a timeout of three years.
    #[call(timeout = "26280h")]
    async fn patient(&self, n: u64) -> u64;
}

/// The provider of `probe`.
#[derive(Debug, Default)]
pub struct Counter {
    runs: AtomicU64,
}

impl Probe for Counter {
    async fn count(&self) -> u64 {
        self.runs.fetch_add(1, Ordering::SeqCst) + 1
    }

    async fn sleep(&self, ms: u64) -> u64 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        ms
    }

    async fn patient(&self, n: u64) -> u64 {
        n
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

/// A bank whose deposits run at most once (`docs/calls.md`): a retry after a deposit may have
/// run goes to the process it may have run on, which answers from its record. Attempts of 1 s,
/// a budget of 20 s: a provider that stalls for a few seconds answers every deposit it took.
#[cluster::service(
    name = "bank",
    version = "1.0.0",
    timeout = "1s",
    retry(after = "100ms", budget = "20s")
)]
pub trait Bank {
    /// Records deposit `id`; the number of deposits this replica has run.
    #[call(at_most_once)]
    async fn deposit(&self, id: u64) -> u64;
}

/// A bank replica: tells `ran` of every deposit it runs (`cluster-node --bank` prints it).
pub struct Teller {
    /// Called once for each deposit run here.
    pub ran: Box<dyn Fn(u64) + Send + Sync>,
    runs: AtomicU64,
}

impl Teller {
    /// A replica that tells `ran` of each deposit.
    pub fn new(ran: impl Fn(u64) + Send + Sync + 'static) -> Self {
        Self {
            ran: Box::new(ran),
            runs: AtomicU64::new(0),
        }
    }
}

impl Bank for Teller {
    async fn deposit(&self, id: u64) -> u64 {
        (self.ran)(id);
        self.runs.fetch_add(1, Ordering::SeqCst) + 1
    }
}
