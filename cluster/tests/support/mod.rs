//! Services, providers and clusters shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use cluster::{MemoryNetwork, MemoryRegistry, Node};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    pub id: u64,
    pub title: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
pub enum SearchError {
    #[error("bad query: {0}")]
    BadQuery(String),
}

/// The seed's numbers at 1/10 scale: timeout 6 s, pause 1 s, budget 21 s; constant pauses with no
/// jitter, as the seed's.
#[cluster::service(
    name = "search",
    version = "2.1.0",
    timeout = "6s",
    retry(after = "1s", budget = "21s", factor = 1.0, jitter = false)
)]
pub trait Search {
    /// Safe to run twice.
    #[call(idempotent)]
    async fn search(&self, query: String) -> Result<Vec<Hit>, SearchError>;
    /// Not idempotent: never run again once it may have run.
    async fn reindex(&self, full: bool) -> Result<u64, SearchError>;
    /// Panics with the message.
    #[call(idempotent)]
    async fn crash(&self, message: String) -> u32;
    /// Echoes bytes back (for frame limits).
    #[call(idempotent)]
    async fn echo(&self, bytes: Vec<u8>) -> Vec<u8>;
    /// `count` copies of `byte`: a reply much larger than its request.
    #[call(idempotent)]
    async fn repeat(&self, byte: u8, count: u32) -> Vec<u8>;
}

/// What a test provider does when called.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// Answers at once.
    Answer,
    /// Never answers (until dropped).
    Hang,
    /// Answers after a delay.
    Slow(Duration),
    /// Returns the provider's own error.
    Fail,
}

/// Counts what happens on a provider.
#[derive(Debug, Default)]
pub struct Counters {
    pub started: AtomicUsize,
    pub finished: AtomicUsize,
    pub dropped: AtomicUsize,
    pub running: AtomicUsize,
    /// `running` when each call started.
    pub running_at_start: std::sync::Mutex<Vec<usize>>,
}

impl Counters {
    pub fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }
}

/// Tracks one running call: counts it out when dropped, whether it finished or was cancelled.
struct Running {
    counters: Arc<Counters>,
    finished: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.counters.running.fetch_sub(1, Ordering::SeqCst);
        if !self.finished {
            self.counters.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

pub struct Engine {
    pub name: String,
    pub mode: std::sync::Mutex<Mode>,
    pub counters: Arc<Counters>,
}

impl Engine {
    pub fn new(name: &str, mode: Mode) -> Self {
        Self {
            name: name.to_owned(),
            mode: std::sync::Mutex::new(mode),
            counters: Arc::default(),
        }
    }

    pub fn set_mode(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    async fn work(&self) -> Result<(), SearchError> {
        let c = &self.counters;
        let running = c.running.fetch_add(1, Ordering::SeqCst);
        c.running_at_start.lock().unwrap().push(running);
        c.started.fetch_add(1, Ordering::SeqCst);
        let mut guard = Running {
            counters: c.clone(),
            finished: false,
        };
        let mode = *self.mode.lock().unwrap();
        match mode {
            Mode::Answer => {}
            Mode::Hang => std::future::pending::<()>().await,
            Mode::Slow(d) => tokio::time::sleep(d).await,
            Mode::Fail => {
                guard.finished = true;
                c.finished.fetch_add(1, Ordering::SeqCst);
                return Err(SearchError::BadQuery("rejected by the provider".into()));
            }
        }
        guard.finished = true;
        c.finished.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

impl Search for Arc<Engine> {
    async fn search(&self, query: String) -> Result<Vec<Hit>, SearchError> {
        self.work().await?;
        Ok(vec![Hit {
            id: 1,
            title: format!("{query} from {}", self.name),
        }])
    }

    async fn reindex(&self, _full: bool) -> Result<u64, SearchError> {
        self.work().await?;
        Ok(42)
    }

    async fn crash(&self, message: String) -> u32 {
        self.counters.started.fetch_add(1, Ordering::SeqCst);
        panic!("{message}");
    }

    async fn echo(&self, bytes: Vec<u8>) -> Vec<u8> {
        bytes
    }

    async fn repeat(&self, byte: u8, count: u32) -> Vec<u8> {
        vec![byte; count as usize]
    }
}

/// A registry the test clusters can be built on: the in-process one here, a Eureka-backed one
/// in `discovery/tests/calls_on_eureka`, which runs these same call-path tests.
pub trait TestRegistry: cluster::Registry + Clone {
    /// A new, empty registry shared by every node of one test cluster.
    fn fresh() -> Self;
}

impl TestRegistry for MemoryRegistry {
    fn fresh() -> Self {
        MemoryRegistry::new()
    }
}

/// A cluster in one process: one registry, and an in-memory or a TCP network.
pub struct TestCluster<R> {
    pub registry: R,
    pub memory: Option<MemoryNetwork>,
}

/// The cluster of the core tests: on the in-process registry.
pub type Cluster = TestCluster<MemoryRegistry>;

impl<R: TestRegistry> TestCluster<R> {
    /// Nodes on the in-memory network: for tests on tokio's paused clock.
    pub fn memory() -> Self {
        Self {
            registry: R::fresh(),
            memory: Some(MemoryNetwork::new()),
        }
    }

    /// Nodes on real TCP sockets on loopback, ports from the OS.
    pub fn tcp() -> Self {
        Self {
            registry: R::fresh(),
            memory: None,
        }
    }

    pub fn registry_events(
        &self,
    ) -> tokio::sync::broadcast::Receiver<cluster::registry::RegistryEvent> {
        cluster::Registry::events(&self.registry)
    }

    pub fn registry_is_empty(&self) -> bool {
        cluster::Registry::services(&self.registry).is_empty()
    }

    pub async fn node(&self, name: &str) -> Node {
        let builder = Node::builder().name(name).registry(self.registry.clone());
        let builder = match &self.memory {
            Some(net) => builder.memory(net),
            None => builder.identity(identity(name)),
        };
        builder.start().await.expect("node starts")
    }

    /// A node serving an [`Engine`] in `mode`.
    pub async fn provider(&self, name: &str, mode: Mode) -> (Node, Arc<Engine>) {
        let node = self.node(name).await;
        let engine = Arc::new(Engine::new(name, mode));
        let _registration = node
            .serve(SearchServer::new(engine.clone()))
            .await
            .expect("serves");
        (node, engine)
    }
}

/// Waits until `condition` holds, checking every few milliseconds; panics after 10 s of real
/// time, which only a broken test reaches.
pub async fn until(what: &str, condition: impl Fn() -> bool) {
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(
            std::time::Instant::now() < give_up,
            "gave up waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The tests' cluster CA, made once per test binary and thrown away.
pub fn authority() -> &'static cluster::Authority {
    static CA: std::sync::OnceLock<cluster::Authority> = std::sync::OnceLock::new();
    CA.get_or_init(|| cluster::Authority::new("test").expect("a CA"))
}

/// A certificate for `name` from the tests' CA.
pub fn identity(name: &str) -> cluster::Identity {
    authority().issue(name).expect("an identity")
}

/// The tests' gossip keyring (one per test binary).
pub fn keyring() -> cluster::Keyring {
    static KEY: std::sync::OnceLock<cluster::GossipKey> = std::sync::OnceLock::new();
    cluster::Keyring::new(KEY.get_or_init(cluster::GossipKey::generate).clone())
}

/// A node on real TCP with its own gossip registry, seeded with `seeds`.
pub async fn gossip_node(
    name: &str,
    seeds: &[std::net::SocketAddr],
) -> (Node, cluster::registry::GossipRegistry) {
    let config = cluster::registry::GossipConfig::new()
        .keyring(keyring())
        .seeds(seeds.iter().map(|s| s.to_string()));
    let registry = cluster::registry::GossipRegistry::new(config);
    let node = Node::builder()
        .identity(identity(name))
        .registry(registry.clone())
        .start()
        .await
        .expect("node starts");
    (node, registry)
}

/// A gossip node serving an [`Engine`].
pub async fn gossip_provider(
    name: &str,
    seeds: &[std::net::SocketAddr],
    mode: Mode,
) -> (Node, Arc<Engine>, std::net::SocketAddr) {
    let (node, registry) = gossip_node(name, seeds).await;
    let engine = Arc::new(Engine::new(name, mode));
    let _registration = node
        .serve(SearchServer::new(engine.clone()))
        .await
        .expect("serves");
    (node, engine, registry.gossip_addr().expect("gossiping"))
}

/// Waits (on real time, up to `limit`) until `node`'s registry copy satisfies `condition`;
/// returns how long that took. Wakes on every registry change, not on a timer.
pub async fn seen(
    node: &Node,
    limit: Duration,
    condition: impl Fn(&Node) -> bool,
) -> Result<Duration, Duration> {
    let start = std::time::Instant::now();
    let mut changes = node.registry().changes();
    let wait = async {
        while !condition(node) {
            if changes.changed().await.is_err() {
                break;
            }
        }
    };
    match tokio::time::timeout(limit, wait).await {
        Ok(()) if condition(node) => Ok(start.elapsed()),
        _ => Err(start.elapsed()),
    }
}

/// How many providers of `search` `node` sees.
/// Providers of `search` in the node's registry that pass their health check.
pub fn providers(node: &Node) -> usize {
    let entries = node.registry().lookup("search");
    entries.iter().filter(|e| !e.failing).count()
}

/// Installs a log subscriber once, for `RUST_LOG=debug cargo test`.
pub fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A bank for issue 15's rules: a deposit that must run at most once, a balance that may be
/// hedged. Timeout 5 s, budget 30 s, a retry 1 s after a failure; throttling as the library's.
#[cluster::service(
    name = "bank",
    version = "1.0.0",
    timeout = "5s",
    retry(after = "1s", budget = "30s", factor = 1.0, jitter = false)
)]
pub trait Bank {
    /// Records deposit `id`: running it twice would count it twice.
    #[call(at_most_once)]
    async fn deposit(&self, id: u64) -> u64;
    /// Hedged: after 50 ms without an answer, a copy to another replica.
    #[call(idempotent, hedge(after = "50ms", max = 1))]
    async fn balance(&self) -> String;
}

/// A bank replica: how long each function takes here, and what ran.
#[derive(Default)]
pub struct Vault {
    pub name: String,
    /// How long a deposit takes.
    pub deposit_takes: std::sync::Mutex<Duration>,
    /// How long a balance takes.
    pub balance_takes: std::sync::Mutex<Duration>,
    /// Deposits that ran to their end here.
    pub deposits: std::sync::Mutex<Vec<u64>>,
    /// Balances that started here, and those dropped before their end.
    pub balances: AtomicUsize,
    pub balances_dropped: Arc<AtomicUsize>,
}

impl Vault {
    pub fn new(name: &str) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_owned(),
            ..Self::default()
        })
    }

    pub fn ran(&self) -> Vec<u64> {
        self.deposits.lock().unwrap().clone()
    }
}

/// Counts a balance dropped before its end.
struct Dropped(Option<Arc<AtomicUsize>>);

impl Drop for Dropped {
    fn drop(&mut self) {
        if let Some(count) = &self.0 {
            count.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Bank for Arc<Vault> {
    async fn deposit(&self, id: u64) -> u64 {
        let takes = *self.deposit_takes.lock().unwrap();
        tokio::time::sleep(takes).await;
        let mut deposits = self.deposits.lock().unwrap();
        deposits.push(id);
        deposits.len() as u64
    }

    async fn balance(&self) -> String {
        self.balances.fetch_add(1, Ordering::SeqCst);
        let mut dropped = Dropped(Some(self.balances_dropped.clone()));
        let takes = *self.balance_takes.lock().unwrap();
        tokio::time::sleep(takes).await;
        dropped.0 = None;
        self.name.clone()
    }
}

impl<R: TestRegistry> TestCluster<R> {
    /// A node serving a [`Vault`].
    pub async fn bank(&self, name: &str) -> (Node, Arc<Vault>) {
        let node = self.node(name).await;
        let vault = Vault::new(name);
        let _registration = node
            .serve(BankServer::new(vault.clone()))
            .await
            .expect("serves");
        (node, vault)
    }
}

/// Calls `search` in a loop until stopped; counts the calls that went through and keeps the
/// errors of those that did not.
pub struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl Load {
    pub fn start(client: SearchClient) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn({
            let (stop, ok) = (stop.clone(), ok.clone());
            async move {
                let mut failed = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    match client.search("rust".into()).await {
                        Ok(_) => {
                            ok.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => failed.push(e.to_string()),
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                failed
            }
        });
        Self { stop, ok, task }
    }

    /// Waits until `more` calls went through after this one.
    pub async fn progress(&self, more: usize) {
        let target = self.ok.load(Ordering::SeqCst) + more;
        until("calls go through", || {
            self.ok.load(Ordering::SeqCst) >= target
        })
        .await;
    }

    /// Stops; the calls that went through, and the errors of those that did not.
    pub async fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        let failed = self.task.await.unwrap();
        (self.ok.load(Ordering::SeqCst), failed)
    }
}
