//! A [`cluster::Registry`] with no registry server: the endpoints of a few service names come
//! from any [`Resolve`] (a Kubernetes headless service through [`Dns`](crate::resolve::Dns), a
//! list through [`Static`](crate::resolve::Static)), and each endpoint says itself, when asked
//! over an authenticated connection, which node it is and what it serves
//! ([`Node::describe_peer`]).
//!
//! 1. [`ResolverRegistry::new`] takes the resolver and the names; the node starts with it as its
//!    registry, and tells it so ([`Registry::started`], which calls
//!    [`ResolverRegistry::attach`]): the backend now has the node to ask with, and starts the
//!    refresh task.
//! 2. Every refresh period (`round.rs`), within the round's deadline: each name is resolved (a
//!    failure keeps that name's last answer); at most `max_endpoints` endpoints are looked up
//!    and asked to describe themselves, a bounded number at once; each answer is held to the
//!    bounds of `bounds.rs` (services, functions, bytes), and one unchanged keeps its entries;
//!    the local copy is replaced whole with the node's own entries and every endpoint that
//!    answered.
//! 3. An endpoint that fails `drop_after` probes in a row, or is missing from that many
//!    answers, is dropped. One that answers as a new generation replaces its entries. One that
//!    drains answers that it serves nothing, and is dropped at once.
//! 4. The node's own `register`, `deregister`, `join` and `leave` only change its own entries
//!    here: a provider is found by being asked, and its answer is those entries. So a
//!    withdrawn (draining) node answers that it serves nothing.

mod bounds;
mod round;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use cluster::registry::{
    LocalCopy, NodeInfo, Registry, RegistryError, RegistryFuture, ServiceEntry,
};
use cluster::{Describer, Node};
use tokio::sync::Mutex as AsyncMutex;

use crate::resolve::{Endpoint, Resolve};

/// What the resolver backend resolves, and how often.
///
/// | setting | default |
/// |---|---|
/// | `services` | none: the names resolved every period |
/// | `refresh` | 2 s: how often names are resolved and endpoints asked |
/// | `probe_timeout` | 1 s: how long one endpoint has to describe itself |
/// | `drop_after` | 3 failed probes (or missing answers) in a row |
/// | `max_concurrent_probes` | 16: endpoints asked at once |
/// | `max_endpoints` | 256: endpoints asked, and kept, over all names; more are left out, with a WARN |
/// | `max_services_per_node` | 32: services one answer may list; more and the answer is refused |
/// | `max_functions_per_service` | 256: functions one description may list; more and the answer is refused |
/// | `max_description_bytes` | 16 KiB: one description's size as compact JSON (the gossip backend's `max_entry_bytes`); more and the answer is refused |
/// | `round_timeout` | `None`: the refresh period, at least `probe_timeout`; what a round has not done by then waits for the next |
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ResolverRegistryConfig {
    /// The service names resolved every period.
    pub services: Vec<String>,
    /// How often the names are resolved and the endpoints asked.
    pub refresh: Duration,
    /// How long one endpoint has to describe itself.
    pub probe_timeout: Duration,
    /// Failed probes in a row (or answers of the resolver without the endpoint) after which an
    /// endpoint is dropped.
    pub drop_after: u32,
    /// Endpoints asked at once (and names resolved at once).
    pub max_concurrent_probes: usize,
    /// Endpoints asked, and kept, over all names.
    pub max_endpoints: usize,
    /// Services one describe answer may list; an answer with more is refused whole.
    pub max_services_per_node: usize,
    /// Functions one description may list; an answer with a service of more is refused whole.
    pub max_functions_per_service: usize,
    /// One description's size, encoded as compact JSON (as the gossip backend measures
    /// `max_entry_bytes`); an answer with a larger one is refused whole.
    pub max_description_bytes: usize,
    /// How long one round (resolving, looking host names up, asking) may take; `None` is the
    /// refresh period, or `probe_timeout` if that is longer.
    pub round_timeout: Option<Duration>,
}

impl Default for ResolverRegistryConfig {
    fn default() -> Self {
        Self {
            services: Vec::new(),
            refresh: Duration::from_secs(2),
            probe_timeout: Duration::from_secs(1),
            drop_after: 3,
            max_concurrent_probes: 16,
            max_endpoints: 256,
            max_services_per_node: 32,
            max_functions_per_service: 256,
            max_description_bytes: 16 * 1024,
            round_timeout: None,
        }
    }
}

impl ResolverRegistryConfig {
    /// The defaults, resolving these names.
    pub fn services<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            services: names.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// How often names are resolved and endpoints asked (at least 10 ms).
    pub fn refresh(mut self, every: Duration) -> Self {
        self.refresh = every.max(Duration::from_millis(10));
        self
    }

    /// How long one endpoint has to describe itself.
    pub fn probe_timeout(mut self, timeout: Duration) -> Self {
        self.probe_timeout = timeout;
        self
    }

    /// Failed probes in a row after which an endpoint is dropped (at least 1).
    pub fn drop_after(mut self, probes: u32) -> Self {
        self.drop_after = probes.max(1);
        self
    }

    /// Endpoints asked at once, and names resolved and host names looked up at once (at
    /// least 1).
    pub fn max_concurrent_probes(mut self, probes: usize) -> Self {
        self.max_concurrent_probes = probes.max(1);
        self
    }

    /// Endpoints asked, and kept, over all names.
    pub fn max_endpoints(mut self, endpoints: usize) -> Self {
        self.max_endpoints = endpoints;
        self
    }

    /// Services one describe answer may list.
    pub fn max_services_per_node(mut self, services: usize) -> Self {
        self.max_services_per_node = services;
        self
    }

    /// Functions one description may list.
    pub fn max_functions_per_service(mut self, functions: usize) -> Self {
        self.max_functions_per_service = functions;
        self
    }

    /// One description's size, encoded as compact JSON.
    pub fn max_description_bytes(mut self, bytes: usize) -> Self {
        self.max_description_bytes = bytes;
        self
    }

    /// How long one round may take (at least 10 ms).
    pub fn round_timeout(mut self, timeout: Duration) -> Self {
        self.round_timeout = Some(timeout.max(Duration::from_millis(10)));
        self
    }

    /// The largest describe answer worth reading: every service at its largest (MessagePack is
    /// no larger than the JSON the bound measures), and room for the node's own fields.
    fn max_answer_bytes(&self) -> usize {
        self.max_services_per_node
            .saturating_mul(self.max_description_bytes)
            .saturating_add(64 << 10)
    }

    /// The round's deadline: `round_timeout`, or the refresh period, at least one probe's time.
    fn round_deadline(&self) -> Duration {
        self.round_timeout
            .unwrap_or_else(|| self.refresh.max(self.probe_timeout))
    }
}

/// A registry backend that resolves names and asks each endpoint what it serves. Clones share
/// one local copy.
#[derive(Debug, Clone)]
pub struct ResolverRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    resolver: Arc<dyn Resolve>,
    config: ResolverRegistryConfig,
    copy: LocalCopy,
    own: Mutex<Own>,
    /// What each endpoint last said, and its failures since.
    peers: Mutex<BTreeMap<SocketAddr, Peer>>,
    /// Each name's last answer: kept when the resolver fails.
    answers: Mutex<HashMap<String, Vec<Endpoint>>>,
    describer: Mutex<Option<Describer>>,
    /// One refresh at a time, so that events come out in order; the number of the last round.
    refreshing: AsyncMutex<u64>,
    stopped: AtomicBool,
    task: Mutex<Option<tokio::task::AbortHandle>>,
    warned: round::Warned,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolverRegistry")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The node this registry belongs to, and its entries.
#[derive(Debug, Default)]
struct Own {
    node: Option<NodeInfo>,
    entries: BTreeMap<String, Arc<ServiceEntry>>,
}

/// One endpoint: what it last said, how many probes in a row it has failed since, and when it
/// was last asked (the round's number).
#[derive(Debug, Default)]
struct Peer {
    answer: Option<bounds::Answer>,
    failures: u32,
    asked: u64,
}

impl ResolverRegistry {
    /// A backend on `resolver`. It asks nothing until its node starts with it (or it is
    /// [`attach`](Self::attach)ed to one).
    pub fn new(resolver: impl Resolve, config: ResolverRegistryConfig) -> Self {
        Self::from_arc(Arc::new(resolver), config)
    }

    /// [`new`](Self::new), with a shared resolver (as [`ResolverConfig::build`](crate::resolve::ResolverConfig::build) returns).
    pub fn from_arc(resolver: Arc<dyn Resolve>, config: ResolverRegistryConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                resolver,
                config,
                copy: LocalCopy::new(),
                own: Mutex::default(),
                peers: Mutex::default(),
                answers: Mutex::default(),
                describer: Mutex::default(),
                refreshing: AsyncMutex::new(0),
                stopped: AtomicBool::new(false),
                task: Mutex::default(),
                warned: round::Warned::default(),
            }),
        }
    }

    /// Asks endpoints on behalf of `node` (its identity authenticates every probe) and starts
    /// the refresh task, whose first round runs at once. The node calls it when it starts with
    /// this registry ([`Registry::started`]); calling it again moves the backend to `node`.
    pub fn attach(&self, node: &Node) {
        *lock(&self.inner.describer) = Some(node.describer());
        let task = tokio::spawn(background(Arc::downgrade(&self.inner)));
        if let Some(old) = lock(&self.inner.task).replace(task.abort_handle()) {
            old.abort();
        }
    }

    /// Resolves and asks now (the refresh task does so every period).
    pub async fn refresh(&self) {
        self.inner.refresh().await;
    }
}

async fn background(inner: Weak<Inner>) {
    let Some(every) = inner.upgrade().map(|i| i.config.refresh) else {
        return;
    };
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if inner.stopped.load(Ordering::SeqCst) {
            return;
        }
        inner.refresh().await;
    }
}

impl Inner {
    fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        lock(&self.describer).take();
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }

    /// Replaces the local copy with the own entries and every described endpoint's.
    fn publish(&self) {
        let own = lock(&self.own);
        let own_name = own.node.as_ref().map(|n| n.name.clone());
        // Of two endpoints that are one node (two addresses of one pod), the newest generation,
        // then the lowest address.
        let mut by_name: BTreeMap<String, &bounds::Answer> = BTreeMap::new();
        let peers = lock(&self.peers);
        for described in peers.values().filter_map(|p| p.answer.as_ref()) {
            if described.draining || Some(&described.node.name) == own_name.as_ref() {
                continue;
            }
            let kept = by_name
                .entry(described.node.name.clone())
                .or_insert(described);
            if described.node.generation > kept.node.generation {
                *kept = described;
            }
        }
        let nodes: Vec<NodeInfo> = own
            .node
            .iter()
            .cloned()
            .chain(by_name.values().map(|d| d.node.clone()))
            .collect();
        let entries: Vec<Arc<ServiceEntry>> = own
            .entries
            .values()
            .cloned()
            // The entries kept for each answer: the same `Arc`s as long as the answer is the same.
            .chain(by_name.values().flat_map(|d| d.entries.iter().cloned()))
            .collect();
        drop(peers);
        drop(own);
        self.copy.replace_with(nodes, entries);
    }

    fn check_own(&self, node: &str) -> Result<(), RegistryError> {
        match &lock(&self.own).node {
            Some(own) if own.name != node => Err(RegistryError::NotLocal {
                node: node.to_owned(),
                own: own.name.clone(),
            }),
            _ => Ok(()),
        }
    }
}

impl Registry for ResolverRegistry {
    fn started(&self, node: &Node) {
        self.attach(node);
    }

    fn register(&self, entry: ServiceEntry) -> RegistryFuture<'_, Result<(), RegistryError>> {
        Box::pin(async move {
            self.inner.check_own(&entry.node.name)?;
            lock(&self.inner.own)
                .entries
                .insert(entry.description.name.clone(), Arc::new(entry));
            self.inner.publish();
            Ok(())
        })
    }

    fn deregister(
        &self,
        node: &str,
        service: &str,
    ) -> RegistryFuture<'_, Result<(), RegistryError>> {
        let checked = self.inner.check_own(node);
        let service = service.to_owned();
        Box::pin(async move {
            checked?;
            lock(&self.inner.own).entries.remove(&service);
            self.inner.publish();
            Ok(())
        })
    }

    fn join(&self, node: NodeInfo) -> RegistryFuture<'_, Result<(), RegistryError>> {
        Box::pin(async move {
            lock(&self.inner.own).node = Some(node);
            self.inner.publish();
            Ok(())
        })
    }

    fn leave(&self, node: &str) -> RegistryFuture<'_, Result<(), RegistryError>> {
        let checked = self.inner.check_own(node);
        Box::pin(async move {
            checked?;
            self.inner.stop();
            *lock(&self.inner.own) = Own::default();
            self.inner.publish();
            Ok(())
        })
    }

    fn local_copy(&self) -> &LocalCopy {
        &self.inner.copy
    }

    fn halt(&self) -> RegistryFuture<'_, ()> {
        self.inner.stop();
        Box::pin(std::future::ready(()))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
