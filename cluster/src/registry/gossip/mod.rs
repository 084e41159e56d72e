//! The gossip registry: every node holds a full copy, replicated by chitchat (scuttlebutt
//! anti-entropy with phi-accrual failure detection). `docs/registry.md` walks through it.

mod authorship;
mod claim;
mod config;
mod lateness;
mod push;
pub(crate) mod state;
mod transport;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use chitchat::{
    Chitchat, ChitchatConfig, ChitchatHandle, ChitchatId, ChitchatLimits, FailureDetectorConfig,
    Refusals,
};
use tokio::sync::{Notify, watch};

pub use config::GossipConfig;

use super::index::{Index, LocalCopy};
use super::{NodeInfo, Registry, RegistryError, RegistryFuture, ServiceEntry};
use crate::security::seal::Sealer;

/// The most nodes dead for over 30 s that this node's digests list, the newest deaths: the
/// others stay held until `purge_after` but are no longer sent (`vendor/chitchat/README.md`).
/// A hundred rollouts' worth of names at 60 bytes each would otherwise ride in every datagram.
pub(crate) const DEAD_IN_DIGEST: usize = 128;

/// Gossip's bytes and datagrams on the wire (sealed; a datagram too large for one goes as two
/// parts, counted apart), since the registry was made: [`GossipRegistry::traffic`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GossipTraffic {
    /// Bytes sent.
    pub sent_bytes: u64,
    /// Datagrams sent.
    pub sent_datagrams: u64,
    /// Bytes received, dropped ones included.
    pub received_bytes: u64,
    /// Datagrams received, dropped ones included.
    pub received_datagrams: u64,
    /// Datagrams sent larger than [`GossipConfig::max_datagram`]: those carrying state (a
    /// registration's entry), and digests asked for whole by a node of an earlier release. In
    /// a cluster with no news this count stays still.
    pub oversized_datagrams: u64,
    /// Datagrams dropped unread because they waited over a second in this node's receive
    /// queue: the node reads its gossip slower than it comes (a starved CPU), and newer news
    /// was queued behind them. A count that moves says this node is behind.
    pub late_datagrams: u64,
    /// Updates about a node that no node could have sent of itself, dropped since gossip last
    /// started: values its owner did not sign (or signed with a certificate that does not
    /// name it), heartbeats ahead of its clock, values its owner lists that a peer withheld
    /// while sending later ones, this node's own state sent back
    /// ([`GossipRegistry::forged_updates`]). Anything but 0 says a member lies, or a node of
    /// an earlier build (which does not sign) gossips in a cluster that signs.
    pub forged_updates: u64,
    /// Updates left for a later round since gossip last started: the budget for checking
    /// signatures of the peer that sent them (or of this node) was spent
    /// (`vendor/chitchat/src/verifying.rs`). A count that keeps moving says a peer sends more
    /// to check than this node will spend on it: a member flooding, or a CPU too starved.
    pub deferred_updates: u64,
}

/// Who signs a node's gossip state (`authorship.rs`), and the value of its certificate key.
type Signing = (Arc<dyn chitchat::Authenticator>, String);

/// How long after a new node's copy first holds another node a missing service may still be
/// on its way (`Registry::filling_until`): a second, or five gossip rounds if they are longer.
const FILLING_AFTER_FIRST_NEWS: (Duration, u32) = (Duration::from_secs(1), 5);

/// How long after gossip starts a new node's copy may be filling at all: five seconds, or 25
/// gossip rounds if they are longer. Seeds that answer later open no window.
const FILLING_AT_MOST: (Duration, u32) = (Duration::from_secs(5), 25);

/// A registry replicated by gossip. One per node: give each node its own, with the same seeds.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use cluster::registry::{GossipConfig, GossipRegistry};
/// use cluster::{Identity, Keyring};
/// let keyring = Keyring::from_file("certs/gossip.key")?;
/// let registry = GossipRegistry::new(GossipConfig::new().keyring(keyring).seeds(["10.0.0.1:7280"]));
/// let identity = Identity::from_dir("certs", "search-1")?;
/// let node = cluster::Node::builder().identity(identity).registry(registry).start().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct GossipRegistry {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: GossipConfig,
    copy: LocalCopy,
    running: Mutex<Option<Arc<Running>>>,
    // When the node withdrew (marked itself leaving): its leave need not wait for that news to
    // spread again.
    withdrawn: Mutex<Option<tokio::time::Instant>>,
    /// The cluster of the node's certificate, once its node has said it.
    bound: Mutex<Option<String>>,
    /// The node's identity, once its node has given it: a sealed registry signs its state
    /// with it (`authorship.rs`).
    identity: Mutex<Option<crate::Identity>>,
    /// The node's TLS side, once its node has said its identity: the name claim's probe
    /// proves a holder by its certificate (`claim.rs`).
    tls: OnceLock<Arc<crate::security::tls::Tls>>,
    dropped: Arc<transport::Dropped>,
    traffic: Arc<transport::Traffic>,
    /// Why gossip ended without being told to, if it did.
    failure: Mutex<Option<String>>,
    /// The updates chitchat refused from peers (for its limits), since it last started.
    refusals: Mutex<Option<Arc<Refusals>>>,
    /// The descriptions read at the last rebuild: a rebuild reads only what changed. Held
    /// throughout a rebuild, so that rebuilds publish in the order they read the state.
    parsed: tokio::sync::Mutex<state::Parsed>,
}

struct Running {
    own: NodeInfo,
    /// When gossip started, and when the copy first held another node than this one: until a
    /// little after that, a missing service may only not have arrived yet (`filling_until`).
    started: tokio::time::Instant,
    heard: OnceLock<tokio::time::Instant>,
    handle: ChitchatHandle,
    chitchat: Arc<tokio::sync::Mutex<Chitchat>>,
    // Rebuilds the index when gossip changes something.
    watcher: tokio::task::JoinHandle<()>,
    // Waits for chitchat's task to end, which it does only when told to (`stop` aborts this
    // first) or when it fails: then the registry is marked failed.
    ended: OnceLock<tokio::task::JoinHandle<()>>,
    // Wakes the pusher (`push.rs`), which pushes this node's own changes to its peers.
    push: Arc<Notify>,
    pusher: OnceLock<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("own", &self.own)
            .finish_non_exhaustive()
    }
}

impl GossipRegistry {
    /// A registry that starts gossiping when its node starts.
    pub fn new(config: GossipConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                copy: LocalCopy::default(),
                running: Mutex::new(None),
                withdrawn: Mutex::new(None),
                bound: Mutex::new(None),
                identity: Mutex::new(None),
                tls: OnceLock::new(),
                dropped: Arc::default(),
                traffic: Arc::default(),
                failure: Mutex::new(None),
                refusals: Mutex::new(None),
                parsed: tokio::sync::Mutex::default(),
            }),
        }
    }

    /// Where this registry gossips (UDP), once its node has started.
    pub fn gossip_addr(&self) -> Option<SocketAddr> {
        self.running()
            .map(|r| r.handle.chitchat_id().gossip_advertise_addr)
    }

    fn running(&self) -> Option<Arc<Running>> {
        self.inner
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn running_or_stopped(&self) -> Result<Arc<Running>, RegistryError> {
        self.running().ok_or(RegistryError::Stopped)
    }

    /// The running registry, if `node` is the node it belongs to.
    fn own(&self, node: &str) -> Result<Arc<Running>, RegistryError> {
        let running = self.running_or_stopped()?;
        if node != running.own.name {
            return Err(RegistryError::NotLocal {
                node: node.to_owned(),
                own: running.own.name.clone(),
            });
        }
        Ok(running)
    }

    async fn start(&self, own: NodeInfo) -> Result<(), RegistryError> {
        if self.running().is_some() {
            return Ok(());
        }
        self.inner.config.validate()?;
        let handle = self.spawn(&own).await?;
        *self
            .inner
            .withdrawn
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
        let chitchat = handle.chitchat();
        let notify = Arc::new(Notify::new());
        let (live, listener) = {
            let cc = chitchat.lock().await;
            *self
                .inner
                .refusals
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(cc.refusals());
            // Any key set anywhere (every change also bumps a revision key) rebuilds at once;
            // deletions and liveness changes come through the live-nodes watcher.
            let wake = notify.clone();
            let listener = cc.subscribe_event("", move |_| wake.notify_one());
            (cc.live_nodes_watcher(), listener)
        };
        let watcher = crate::background::spawn(watch_gossip(
            self.inner.clone(),
            chitchat.clone(),
            live,
            notify,
            listener,
        ));
        let ended = handle.termination_watcher();
        let running = Arc::new(Running {
            own,
            started: tokio::time::Instant::now(),
            heard: OnceLock::new(),
            handle,
            chitchat,
            watcher,
            ended: OnceLock::new(),
            push: Arc::new(Notify::new()),
            pusher: OnceLock::new(),
        });
        let config = &self.inner.config;
        let _ = running
            .pusher
            .set(crate::background::spawn(push::push_changes(
                Arc::downgrade(&running),
                running.push.clone(),
                config.push_fanout,
                push::spacing(config.gossip_interval),
            )));
        *self.inner.running.lock().unwrap_or_else(|p| p.into_inner()) = Some(running.clone());
        *self.inner.failure.lock().unwrap_or_else(|p| p.into_inner()) = None;
        // Published first: an end seen before `running` is in place would go unnoticed.
        let _ = running.ended.set(crate::background::spawn(watch_end(
            self.inner.clone(),
            Arc::downgrade(&running),
            ended,
        )));
        if let Err(e) = self.claim(&running).await {
            if let Some(running) = self.stop().await {
                running.handle.abort();
            }
            return Err(e);
        }
        self.rebuild(&running).await;
        tracing::info!(
            "gossip for node {} on {}, seeds {:?}",
            running.own,
            running.handle.chitchat_id().gossip_advertise_addr,
            self.inner.config.seeds
        );
        Ok(())
    }

    /// Why gossip stopped without being told to, if it did: chitchat's task ended (a bug, or a
    /// socket that failed). The registry has then stopped: its copy is empty (the node is out
    /// of the cluster both ways, as its peers see it once its heartbeats stop), every write
    /// returns [`RegistryError::Stopped`], and an ERROR was logged. Restart the node.
    pub fn failure(&self) -> Option<String> {
        self.inner
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Updates from peers dropped for passing a limit ([`GossipConfig`]'s `max_nodes`,
    /// `max_keys_per_node`, `max_bytes_per_node`, or this node's own state sent back by a
    /// peer), since gossip last started.
    pub fn refused_updates(&self) -> u64 {
        self.refusals(chitchat::Refusals::total)
    }

    /// A count of chitchat's refusals, 0 when gossip has not started.
    fn refusals(&self, count: impl Fn(&chitchat::Refusals) -> u64) -> u64 {
        self.inner
            .refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_deref()
            .map_or(0, count)
    }

    /// The digest of every node state this node knows, which its gossip rounds send to each
    /// peer they pick: in how many datagrams (each within [`GossipConfig::max_datagram`], and
    /// each answered by one), and its bytes in all, before sealing. `(0, 0)` when stopped.
    /// `docs/registry.md` says what that costs as a cluster grows.
    pub async fn digest_parts(&self) -> (usize, usize) {
        match self.running() {
            Some(running) => running.chitchat.lock().await.digest_parts(),
            None => (0, 0),
        }
    }

    /// What gossip has cost this node on the wire since the registry was made, both ways.
    pub fn traffic(&self) -> GossipTraffic {
        let t = &self.inner.traffic;
        let read = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        GossipTraffic {
            sent_bytes: read(&t.sent_bytes),
            sent_datagrams: read(&t.sent_datagrams),
            received_bytes: read(&t.received_bytes),
            received_datagrams: read(&t.received_datagrams),
            oversized_datagrams: read(&t.oversized_datagrams),
            late_datagrams: read(&t.late_datagrams),
            forged_updates: self.forged_updates(),
            deferred_updates: self.refusals(chitchat::Refusals::deferred),
        }
    }

    /// Updates about a node that it could not have sent of itself, dropped since gossip last
    /// started (`authorship.rs`): a value not signed by its node, a heartbeat ahead of its
    /// node's clock, a value its node lists that a peer withheld below later ones, or this
    /// node's own state sent back. Each is also in
    /// [`refused_updates`](Self::refused_updates); a WARN says so, at most every 10 s.
    pub fn forged_updates(&self) -> u64 {
        self.refusals(chitchat::Refusals::forged)
    }

    /// Not an API: what a member holding the gossip key and its own certificate can do with a
    /// build of its own, for the tests of `authorship.rs`. Rewrites this node's copy of the
    /// newest generation of `victim`'s state (`edit`, and its heartbeat if given), signs what
    /// changed with this node's own key, and pushes it to its peers.
    #[doc(hidden)]
    pub async fn __forge(
        &self,
        victim: &str,
        heartbeat: Option<u64>,
        edit: impl FnOnce(&mut chitchat::NodeState),
    ) -> bool {
        let Some(running) = self.running() else {
            return false;
        };
        let forged = {
            let mut cc = running.chitchat.lock().await;
            let Some(id) = cc
                .node_states()
                .keys()
                .filter(|id| &*id.node_id == victim)
                .max_by_key(|id| id.generation_id)
                .cloned()
            else {
                return false;
            };
            chitchat::auth::forge::rewrite(&mut cc, &id, heartbeat.map(chitchat::Heartbeat), edit)
        };
        running.push.notify_one();
        forged
    }

    /// Gossip datagrams dropped since the registry was made: not sealed, not opened with any
    /// key held, replayed, or not gossip at all.
    pub fn dropped_datagrams(&self) -> u64 {
        self.inner.dropped.total()
    }

    /// The cluster's name and how datagrams are carried, or why gossip cannot start.
    fn carriage(&self) -> Result<(String, transport::GossipTransport), RegistryError> {
        let config = &self.inner.config;
        let bound = self
            .inner
            .bound
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let Some(cluster) = bound.or_else(|| config.cluster_id.clone()) else {
            return Err(RegistryError::Gossip(
                "no cluster name: a node with an identity gives its certificate's; an insecure() registry needs GossipConfig::cluster_id".to_owned(),
            ));
        };
        let sealer = match (&config.keyring, config.insecure) {
            (Some(_), true) => {
                return Err(RegistryError::Gossip(
                    "both keyring() and insecure() were given: choose one".to_owned(),
                ));
            }
            (Some(keyring), false) => Some(Arc::new(Sealer::new(
                keyring.clone(),
                &cluster,
                config.replay_window,
            ))),
            (None, true) => {
                tracing::warn!(
                    "gossip for cluster `{cluster}` is PLAINTEXT (insecure()): anyone who reaches its port can join and add entries"
                );
                None
            }
            (None, false) => {
                return Err(RegistryError::Gossip(
                    "no gossip key: give GossipConfig::keyring (the key file `cluster init` writes), or insecure() to gossip in plaintext".to_owned(),
                ));
            }
        };
        let carriage = transport::GossipTransport {
            sealer,
            max_datagram: config.max_datagram,
            dropped: self.inner.dropped.clone(),
            traffic: self.inner.traffic.clone(),
        };
        Ok((cluster, carriage))
    }

    /// Who signs this node's state and judges the others' (`authorship.rs`), with the value of
    /// its certificate key: on a sealed registry whose node has an identity. None on an
    /// `insecure()` one, or a sealed one without an identity (a WARN says so).
    fn authorship(
        &self,
        carriage: &transport::GossipTransport,
    ) -> Result<Option<Signing>, RegistryError> {
        if carriage.sealer.is_none() {
            return Ok(None);
        }
        let identity = self
            .inner
            .identity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let Some(identity) = identity else {
            tracing::warn!(
                "gossip is sealed but NOT SIGNED: the node has no identity, so any holder of the gossip key can rewrite any node's state here"
            );
            return Ok(None);
        };
        let config = &self.inner.config;
        let (authorship, cert) = authorship::Authorship::new(&identity, config.clock_skew)
            .map_err(|e| RegistryError::Gossip(format!("signed gossip: {e}")))?;
        tracing::info!(
            "gossip state signed with node {}'s certificate key, and every node's checked against the cluster's CA",
            identity.node()
        );
        if config.dead_after.is_zero() {
            tracing::warn!(
                "GossipConfig::dead_after is 0: phi alone declares a node dead, and a member holding the gossip key can hold a node's heartbeats back by clock_skew ({:?}) and 100 ms, enough to have it declared dead; keep dead_after above clock_skew",
                config.clock_skew
            );
        }
        Ok(Some((Arc::new(authorship), cert)))
    }

    /// Starts chitchat. With port 0 the port is picked before chitchat binds it (chitchat must
    /// advertise it first), so another socket may take it in between: then a new port is
    /// picked, a few times.
    async fn spawn(&self, own: &NodeInfo) -> Result<ChitchatHandle, RegistryError> {
        let config = &self.inner.config;
        let (cluster_id, carriage) = self.carriage()?;
        let mut keys = state::initial_keys(own);
        let auth = self.authorship(&carriage)?;
        if let Some((_, cert)) = &auth {
            // First: its version is below every value it vouches for, so that a peer holds it
            // before it reads them.
            keys.insert(0, (authorship::CERT.to_owned(), cert.clone()));
        }
        let auth = auth.map(|(a, _)| a);
        let mut tries = 0;
        loop {
            tries += 1;
            let listen = config::resolve_port(config.listen)
                .map_err(|e| RegistryError::Gossip(e.to_string()))?;
            // Port 0 in `advertise` stands for the port listened on.
            let advertise = config.advertise.map_or(listen, |a| match a.port() {
                0 => SocketAddr::new(a.ip(), listen.port()),
                _ => a,
            });
            let chitchat_config = ChitchatConfig {
                chitchat_id: ChitchatId::new(own.name.clone(), own.generation, advertise),
                cluster_id: cluster_id.clone(),
                gossip_interval: config.gossip_interval,
                listen_addr: listen,
                seed_nodes: config.seeds.clone(),
                failure_detector_config: FailureDetectorConfig {
                    phi_threshold: config.phi_threshold,
                    // The default (5 s) makes a crash right after start take over 10 s to detect.
                    initial_interval: config.gossip_interval,
                    dead_node_grace_period: config.purge_after,
                    min_dead_after: config.dead_after,
                    max_dead_in_digest: DEAD_IN_DIGEST,
                    ..FailureDetectorConfig::default()
                },
                marked_for_deletion_grace_period: config.purge_after,
                catchup_callback: None,
                extra_liveness_predicate: None,
                protocol_version: transport::PROTOCOL,
                // What chitchat writes; the seal adds its own.
                datagram_budget: config.max_datagram.saturating_sub(carriage.overhead()),
            };
            let limits = ChitchatLimits {
                max_nodes: config.max_nodes,
                max_keys_per_node: config.max_keys_per_node,
                max_bytes_per_node: config.max_bytes_per_node,
            };
            match chitchat::spawn_chitchat_with(
                chitchat_config,
                limits,
                auth.clone(),
                keys.clone(),
                &carriage,
            )
            .await
            {
                Ok(handle) => return Ok(handle),
                Err(e) if config.listen.port() == 0 && tries < 5 => {
                    tracing::debug!("gossip could not bind {listen} ({e:#}); picking another port");
                }
                Err(e) => return Err(RegistryError::Gossip(format!("{e:#}"))),
            }
        }
    }

    /// Changes this node's own state (unless `edit` refuses), then has it pushed to its peers
    /// at once rather than waiting for the next gossip round (`push.rs`).
    async fn change(
        &self,
        edit: impl FnOnce(&mut chitchat::NodeState) -> Result<(), RegistryError>,
    ) -> Result<(), RegistryError> {
        let running = self.running_or_stopped()?;
        {
            let mut cc = running.chitchat.lock().await;
            let me = cc.self_node_state();
            edit(me)?;
            state::bump_revision(me);
        }
        running.push.notify_one();
        self.rebuild(&running).await;
        Ok(())
    }

    async fn rebuild(&self, running: &Running) {
        rebuild(&self.inner, &running.chitchat).await;
    }

    async fn stop(&self) -> Option<Arc<Running>> {
        let running = self
            .inner
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()?;
        running.watcher.abort();
        if let Some(ended) = running.ended.get() {
            ended.abort();
        }
        if let Some(pusher) = running.pusher.get() {
            pusher.abort();
        }
        Some(running)
    }
}

/// Replaces the local copy with the index of chitchat's state, parsing only the descriptions
/// that changed, and those after chitchat's lock is given back (gossip goes on meanwhile). One
/// rebuild at a time (a local change, a gossip event), so that they publish in the order they
/// read the state and an older one never wins.
async fn rebuild(inner: &Inner, chitchat: &tokio::sync::Mutex<Chitchat>) {
    let mut parsed = inner.parsed.lock().await;
    let snapshot = state::snapshot(&*chitchat.lock().await, &parsed);
    inner.copy.replace(state::index_from(snapshot, &mut parsed));
    let running = inner
        .running
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    if let Some(running) = running
        && running.heard.get().is_none()
        && inner
            .copy
            .nodes()
            .iter()
            .any(|node| node.name != running.own.name)
    {
        let _ = running.heard.set(tokio::time::Instant::now());
    }
}

/// Marks the registry failed when chitchat's task ends while `running` is still the running
/// registry (`stop` takes it out first, and aborts this, when the end is asked for).
async fn watch_end(
    inner: Arc<Inner>,
    running: Weak<Running>,
    ended: impl Future<Output = anyhow::Result<()>>,
) {
    let result = ended.await;
    let Some(running) = running.upgrade() else {
        return;
    };
    {
        let mut slot = inner.running.lock().unwrap_or_else(|p| p.into_inner());
        if !slot.as_ref().is_some_and(|r| Arc::ptr_eq(r, &running)) {
            return;
        }
        *slot = None;
    }
    running.watcher.abort();
    if let Some(pusher) = running.pusher.get() {
        pusher.abort();
    }
    let why = match result {
        Ok(()) => "it returned".to_owned(),
        Err(e) => format!("{e:#}"),
    };
    tracing::error!(
        "gossip for node {} ended unexpectedly ({why}): the registry has stopped, its copy is emptied and every write refused; restart the node",
        running.own
    );
    *inner.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
    inner.copy.replace(Index::default());
}

async fn watch_gossip(
    inner: Arc<Inner>,
    chitchat: Arc<tokio::sync::Mutex<Chitchat>>,
    mut live: watch::Receiver<BTreeMap<ChitchatId, chitchat::NodeState>>,
    notify: Arc<Notify>,
    _listener: chitchat::ListenerHandle,
) {
    loop {
        tokio::select! {
            changed = live.changed() => if changed.is_err() { return },
            () = notify.notified() => {}
        }
        rebuild(&inner, &chitchat).await;
    }
}

impl Registry for GossipRegistry {
    fn register(&self, entry: ServiceEntry) -> RegistryFuture<'_, Result<(), RegistryError>> {
        Box::pin(async move {
            self.own(&entry.node.name)?;
            let (key, value) =
                state::service_key_value(&entry.description, self.inner.config.max_entry_bytes)?;
            let config = &self.inner.config;
            let failing = state::failing_key(&entry.description.name);
            self.change(|me| {
                state::check_room(me, &key, &value, &entry.description.name, config)?;
                if entry.failing {
                    state::check_room(me, &failing, "1", &entry.description.name, config)?;
                    me.set(failing, "1".to_owned());
                } else if me.get(&failing).is_some() {
                    me.delete(&failing);
                }
                me.set(key, value);
                Ok(())
            })
            .await
        })
    }

    fn deregister(
        &self,
        node: &str,
        service: &str,
    ) -> RegistryFuture<'_, Result<(), RegistryError>> {
        let (node, key) = (node.to_owned(), state::service_key(service));
        let failing = state::failing_key(service);
        Box::pin(async move {
            self.own(&node)?;
            self.change(|me| {
                me.delete(&key);
                if me.get(&failing).is_some() {
                    me.delete(&failing);
                }
                Ok(())
            })
            .await
        })
    }

    fn bind_cluster(&self, cluster: &str) -> Result<(), RegistryError> {
        if let Some(configured) = &self.inner.config.cluster_id
            && configured != cluster
        {
            return Err(RegistryError::Gossip(format!(
                "the registry is configured for cluster `{configured}`, the node's certificate is for `{cluster}`"
            )));
        }
        *self.inner.bound.lock().unwrap_or_else(|p| p.into_inner()) = Some(cluster.to_owned());
        Ok(())
    }

    fn bind_identity(&self, identity: &crate::Identity) -> Result<(), RegistryError> {
        self.bind_cluster(identity.cluster())?;
        *self
            .inner
            .identity
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(identity.clone());
        let tls = identity
            .tls()
            .map_err(|e| RegistryError::Gossip(e.to_string()))?;
        let _ = self.inner.tls.set(tls);
        Ok(())
    }

    fn join(&self, node: NodeInfo) -> RegistryFuture<'_, Result<(), RegistryError>> {
        Box::pin(self.start(node))
    }

    /// Marks the node leaving and deletes its entries, pushed to every peer at once; gossip
    /// goes on, so this node keeps its copy of everyone else's entries.
    fn withdraw(&self, node: &str) -> RegistryFuture<'_, Result<(), RegistryError>> {
        let node = node.to_owned();
        Box::pin(async move {
            self.own(&node)?;
            self.change(|me| {
                state::mark_leaving(me);
                Ok(())
            })
            .await?;
            let mut withdrawn = self
                .inner
                .withdrawn
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            withdrawn.get_or_insert_with(tokio::time::Instant::now);
            Ok(())
        })
    }

    /// chitchat has no graceful leave: withdraw (mark the node leaving, delete its entries,
    /// push that to every peer), give it two gossip rounds to spread, then stop.
    fn leave(&self, node: &str) -> RegistryFuture<'_, Result<(), RegistryError>> {
        let node = node.to_owned();
        Box::pin(async move {
            self.withdraw(&node).await?;
            // Two rounds since the withdrawal: a peer that missed the push (a lost datagram)
            // hears it in a round. A drain usually took longer than that already.
            let since = *self
                .inner
                .withdrawn
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let since = since.unwrap_or_else(tokio::time::Instant::now);
            let two_rounds = self.inner.config.gossip_interval.saturating_mul(2);
            tokio::time::sleep_until(since.checked_add(two_rounds).unwrap_or(since)).await;
            if let Some(running) = self.stop().await {
                let _ = running.handle.initiate_shutdown();
            }
            self.inner.copy.replace(Index::default());
            Ok(())
        })
    }

    fn halt(&self) -> RegistryFuture<'_, ()> {
        Box::pin(async move {
            if let Some(running) = self.stop().await {
                running.handle.abort();
            }
            self.inner.copy.replace(Index::default());
        })
    }

    /// A node with seeds fills its copy from them: until a second after the copy first holds
    /// another node (the rest of the state follows within a few rounds), and never past five
    /// seconds after gossip started (both longer with gossip rounds over 200 ms). A node whose
    /// only seed is itself, or that has none, is the first of its cluster: its copy is whole
    /// at once.
    fn filling_until(&self) -> Option<tokio::time::Instant> {
        let running = self.running()?;
        let own = running.handle.chitchat_id().gossip_advertise_addr;
        let seeded = self.inner.config.seeds.iter().any(|seed| {
            seed.parse::<SocketAddr>()
                .map_or(true, |addr| addr != own && addr != self.inner.config.listen)
        });
        if !seeded {
            return None;
        }
        let rounds = |(at_least, rounds): (Duration, u32)| {
            at_least.max(self.inner.config.gossip_interval.saturating_mul(rounds))
        };
        let at_most = running.started + rounds(FILLING_AT_MOST);
        let until = match running.heard.get() {
            Some(heard) => (*heard + rounds(FILLING_AFTER_FIRST_NEWS)).min(at_most),
            None => at_most,
        };
        (until > tokio::time::Instant::now()).then_some(until)
    }

    fn local_copy(&self) -> &LocalCopy {
        &self.inner.copy
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn joined(name: &str) -> GossipRegistry {
        let registry = GossipRegistry::new(GossipConfig::new().insecure().cluster_id("test"));
        let addr = SocketAddr::from(([127, 0, 0, 1], 1));
        registry
            .join(NodeInfo::new(name, addr, 1))
            .await
            .expect("joins");
        assert_eq!(registry.nodes().len(), 1, "it sees itself");
        registry
    }

    async fn until(what: &str, condition: impl Fn() -> bool) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while !condition() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("gave up waiting until {what}"));
    }

    #[tokio::test]
    async fn gossip_that_ends_unasked_marks_the_registry_failed_and_empties_its_copy() {
        let registry = joined("n1").await;
        // chitchat's task ends as it would on a panic or a failed socket.
        registry.running().expect("running").handle.abort();
        until("the registry is marked failed", || {
            registry.failure().is_some()
        })
        .await;
        assert!(registry.nodes().is_empty(), "no stale copy");
        assert!(registry.gossip_addr().is_none());
        assert_eq!(
            registry.withdraw("n1").await,
            Err(RegistryError::Stopped),
            "writes are refused"
        );
    }

    #[tokio::test]
    async fn gossip_stopped_on_purpose_is_no_failure() {
        let halted = joined("n1").await;
        halted.halt().await;
        let left = joined("n2").await;
        left.leave("n2").await.expect("leaves");
        // chitchat's tasks have ended by now; the watchers were told first.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(halted.failure(), None);
        assert_eq!(left.failure(), None);
    }

    #[tokio::test]
    async fn a_setting_out_of_range_is_refused_at_join_by_name() {
        let registry = GossipRegistry::new(
            GossipConfig::new()
                .insecure()
                .cluster_id("test")
                .gossip_interval(Duration::ZERO),
        );
        let addr = SocketAddr::from(([127, 0, 0, 1], 1));
        let Err(RegistryError::Gossip(why)) = registry.join(NodeInfo::new("n1", addr, 1)).await
        else {
            panic!("joined with a gossip interval of zero");
        };
        assert!(why.contains("gossip_interval"), "{why}");
        assert!(registry.gossip_addr().is_none());
    }
}
