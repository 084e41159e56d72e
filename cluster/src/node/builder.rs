use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use super::{Listener, Node, NodeInner};
use crate::client::peers::{DEFAULT_COOLDOWN, DEFAULT_PANIC_THRESHOLD, Peers};
use crate::layer::{ClientLayer, ProviderLayer};
use crate::registry::{MemoryRegistry, NodeInfo, Registry, RegistryError};
use crate::security::Identity;
use crate::server::{DEFAULT_MAX_CONCURRENT_CALLS, Dispatcher};
use crate::transport::tcp::{
    self, ConnectConfig, ConnectionLimits, DEFAULT_MAX_BUFFERED_BYTES, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_OPENING_CONNECTIONS, FrameLimits, ServeConfig, TcpConnector,
};
use crate::transport::{
    Connector, DEFAULT_MAX_FRAME, ENVELOPE_OVERHEAD, MAX_FRAME_LIMIT, MemoryNetwork, WIRE_VERSIONS,
};

/// The default time to open a connection to a peer (TCP and the handshake), 1 s: on a LAN it
/// takes well under a millisecond, and a peer that drops packets costs this much of an attempt,
/// not the whole attempt, before the call tries another provider.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The default bound on requests in flight on one connection, 1000; more
/// wait on this side, where a timeout means the request was never sent.
pub const DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION: usize = 1000;

/// The default time a frame that has begun to arrive has to finish, 10 s: a frame limit's worth
/// (8 MiB) takes under a second on a LAN; a peer that sends half a frame and stops is closed.
pub const DEFAULT_FRAME_TIMEOUT: Duration = Duration::from_secs(10);

/// The default time a connection with nothing in flight stays open, 5 min. The caller closes
/// it first (at three quarters of the provider's, which its handshake tells), so that a request
/// never meets a close on its way.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The largest bound on requests in flight on one connection a node may set.
const MAX_IN_FLIGHT_LIMIT: usize = 1 << 20;

/// The longest node name, in bytes: it travels in every handshake and registry entry, and
/// gossip peers refuse a node of a longer one.
const MAX_NAME: usize = chitchat::MAX_NODE_ID_LEN;

/// The smallest frame limit a node may set: room for the envelope and a few arguments.
const MIN_FRAME: usize = 4 << 10;

/// Configures and starts a [`Node`].
///
/// | setting | default |
/// |---|---|
/// | `name` | `node-<generation>` |
/// | `listen` | `127.0.0.1:0` (a port the OS picks) |
/// | `advertise` | the address listened on; required when that is a wildcard (`0.0.0.0`, `[::]`) |
/// | `registry` | a private [`MemoryRegistry`]: the node sees only itself |
/// | `memory` | off: real TCP |
/// | `max_frame` | 8 MiB (4 KiB to 1 GiB) |
/// | `outlier_cooldown` | 2 s, doubling with each ejection in a row up to 32 s |
/// | `panic_threshold` | 0.5: when more than half a service's replicas fail their health check, all are called |
/// | `max_concurrent_calls` | 1024: more are refused before they run, never queued |
/// | `drain_timeout` | 30 s: how long a shutdown waits for running calls |
/// | `connect_timeout` | 1 s: opening a connection, TCP and handshake |
/// | `max_in_flight_per_connection` | 1000 (1 to 2^20) |
/// | `max_opening_connections` | 256: connected but silent; past it the oldest of the busiest address is closed |
/// | `max_connections` | 1024, and at most half the file limit: past it, a peer holding more than its share loses one |
/// | `max_buffered_bytes` | 32 MiB (at least `max_frame`): bytes held for peers, node-wide |
/// | `frame_timeout` | 10 s: a frame begun and not finished closes its connection |
/// | `idle_timeout` | 5 min: a connection with nothing in flight is closed |
/// | `wire_versions` | every version this build speaks, [`WIRE_VERSIONS`] |
/// | `client_layer`, `provider_layer` | none |
/// | `identity` or `insecure` | neither: over TCP, one must be given ([`StartError::Setting`]) |
/// | `metrics`, `metrics_insecure`, `metrics_global` | off: nothing recorded, nothing served (`docs/operations.md`) |
#[derive(Default)]
#[must_use]
pub struct NodeBuilder {
    identity: Option<Identity>,
    insecure: bool,
    connect_timeout: Option<Duration>,
    max_in_flight: Option<usize>,
    max_opening: Option<usize>,
    max_connections: Option<usize>,
    max_buffered_bytes: Option<usize>,
    frame_timeout: Option<Duration>,
    idle_timeout: Option<Duration>,
    wire: Option<std::ops::RangeInclusive<u32>>,
    client_layers: Vec<Arc<dyn ClientLayer>>,
    provider_layers: Vec<Arc<dyn ProviderLayer>>,
    name: Option<String>,
    listen: Option<SocketAddr>,
    advertise: Option<SocketAddr>,
    registry: Option<Arc<dyn Registry>>,
    memory: Option<MemoryNetwork>,
    max_frame: Option<usize>,
    outlier_cooldown: Option<Duration>,
    panic_threshold: Option<f64>,
    max_concurrent_calls: Option<usize>,
    drain_timeout: Option<Duration>,
    metrics: Option<super::metrics::Wanted>,
    gossip: Option<crate::registry::GossipRegistry>,
}

/// A node could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// The listener could not be bound.
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The registry refused the node.
    Registry(RegistryError),
    /// A setting is out of its range.
    Setting(String),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Listen { addr, .. } => write!(f, "cannot listen on {addr}"),
            Self::Registry(e) => write!(f, "the registry refused the node: {e}"),
            Self::Setting(why) => write!(f, "invalid setting: {why}"),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Listen { source, .. } => Some(source),
            Self::Registry(e) => Some(e),
            Self::Setting(_) => None,
        }
    }
}

impl From<RegistryError> for StartError {
    fn from(e: RegistryError) -> Self {
        Self::Registry(e)
    }
}

impl NodeBuilder {
    /// The node's name, unique in the cluster.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The address to serve calls on.
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = Some(addr);
        self
    }

    /// The address other nodes call this one at, which its registry entry carries: set it
    /// when the node listens on a wildcard (`0.0.0.0`, `[::]`), behind NAT or a container's
    /// port mapping. Its port 0 stands for the port the node listens on.
    pub fn advertise(mut self, addr: SocketAddr) -> Self {
        self.advertise = Some(addr);
        self
    }

    /// The registry to share with the other nodes.
    pub fn registry(mut self, registry: impl Registry) -> Self {
        // A gossip registry's traffic is one of the node's metrics.
        self.gossip = (&registry as &dyn std::any::Any)
            .downcast_ref::<crate::registry::GossipRegistry>()
            .cloned();
        self.registry = Some(Arc::new(registry));
        self
    }

    /// Uses an in-process network instead of TCP (tests with a paused clock).
    pub fn memory(mut self, network: &MemoryNetwork) -> Self {
        self.memory = Some(network.clone());
        self
    }

    /// The largest frame this node sends or accepts, in bytes: at most [`MAX_FRAME_LIMIT`].
    pub fn max_frame(mut self, bytes: usize) -> Self {
        self.max_frame = Some(bytes);
        self
    }

    /// How long a peer is passed over, while others can serve, the first time it is ejected
    /// (its connection failed, or it timed out, panicked or refused as overloaded 3 times in
    /// a row); each ejection in a row doubles it, up to 16 times.
    pub fn outlier_cooldown(mut self, cooldown: Duration) -> Self {
        self.outlier_cooldown = Some(cooldown);
        self
    }

    /// The share of a service's replicas (0 to 1) that may fail their health check and be
    /// passed over by this node's calls; when more fail at once, every replica is called
    /// again, with a WARN. 1 passes over every failing replica, even the last; 0 never
    /// passes one over.
    pub fn panic_threshold(mut self, share: f64) -> Self {
        self.panic_threshold = Some(share);
        self
    }

    /// The most calls that run at once here; more are refused with `Overloaded` before they
    /// run, and clients retry them elsewhere.
    pub fn max_concurrent_calls(mut self, limit: usize) -> Self {
        self.max_concurrent_calls = Some(limit);
        self
    }

    /// How long [`Node::shutdown`] waits for running calls to finish.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = Some(timeout);
        self
    }

    /// How long opening a connection to a peer may take, TCP and handshake together; a peer
    /// that does not answer in time is passed over for another provider within the attempt.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// The most requests in flight on one connection; more wait on this side, where a timeout
    /// means they were never sent (and any function may be retried).
    pub fn max_in_flight_per_connection(mut self, limit: usize) -> Self {
        self.max_in_flight = Some(limit);
        self
    }

    /// The most connections that may be opening at once (connected, but not yet through the
    /// handshake or their first frame); past it, a new connection closes the one that has been
    /// opening longest, so that a peer holding many silent connections cannot lock callers out.
    pub fn max_opening_connections(mut self, limit: usize) -> Self {
        self.max_opening = Some(limit);
        self
    }

    /// The most connections past their handshake that this node serves at once (lowered to
    /// half the process's file limit). Past it, a new caller closes a connection of the peer
    /// that holds the most, if that peer holds more than its share; so a peer flooding the node
    /// cannot lock the others out. See `docs/reliability.md`.
    pub fn max_connections(mut self, limit: usize) -> Self {
        self.max_connections = Some(limit);
        self
    }

    /// The bytes this node holds for its callers at once: frames being received, requests in
    /// flight and replies not yet sent. A connection that would pass it is not read from until
    /// bytes come back (each may still hold 16 KiB of small requests; one connection at most a quarter of it). Raised to `max_frame`
    /// if lower, so that one frame of the limit can always arrive.
    pub fn max_buffered_bytes(mut self, bytes: usize) -> Self {
        self.max_buffered_bytes = Some(bytes);
        self
    }

    /// How long a frame that has begun to arrive may take to finish, on both sides: a request
    /// on this node as a provider, a reply on this node as a caller; past it, its connection
    /// is closed. A peer that reads none of its replies for this long is closed too. It must
    /// cover the largest frame at the link's speed.
    pub fn frame_timeout(mut self, timeout: Duration) -> Self {
        self.frame_timeout = Some(timeout);
        self
    }

    /// How long a connection with nothing in flight and nothing received stays open. The
    /// caller's side closes its connections sooner, after three quarters of the shorter of its
    /// own `idle_timeout` and the provider's, and opens a new one for the next call.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = Some(timeout);
        self
    }

    /// The wire versions this node speaks, a range within [`WIRE_VERSIONS`]. Pinning the
    /// older version (`1..=1`) lets a node of this build take part in a cluster of the first
    /// release: no handshake, and no context (caller, request id, deadline, metadata) crosses.
    pub fn wire_versions(mut self, versions: std::ops::RangeInclusive<u32>) -> Self {
        self.wire = Some(versions);
        self
    }

    /// The node's certificate and key, and its cluster's CA: every connection it makes or
    /// serves is mutual TLS, its calls go only to providers whose certificate names the node
    /// of the registry entry, and its handlers see each caller's verified name. The node's
    /// name is the certificate's (a different [`name`](Self::name) is refused at start).
    pub fn identity(mut self, identity: Identity) -> Self {
        self.identity = Some(identity);
        self
    }

    /// Serves and calls in plaintext, with no identity: anyone who reaches the port can call,
    /// and callers' names are their own claims. For a laptop or a test, said by name; the node
    /// logs a WARN when it starts. A plaintext node and a secure one refuse each other at once.
    pub fn insecure(mut self) -> Self {
        self.insecure = true;
        self
    }

    /// Records metrics (`docs/operations.md`, "Metrics") into a recorder of the node's own, and
    /// serves them as `GET /metrics` in Prometheus's text format at `addr` (port 0: one the OS
    /// picks, [`Node::metrics_addr`]). Over mutual TLS with the node's identity: a scraper must
    /// present a certificate of the cluster's CA. In plaintext on an [`insecure`](Self::insecure)
    /// node. Replaces an earlier `metrics*` setting. With the `admin` feature.
    #[cfg(feature = "admin")]
    pub fn metrics(mut self, addr: SocketAddr) -> Self {
        self.metrics = Some(super::metrics::Wanted::Serve {
            addr,
            plaintext: false,
        });
        self
    }

    /// As [`metrics`](Self::metrics), served in plaintext even on a secure node: anyone who
    /// reaches `addr` reads them (service and node names, rates, latencies). Logs a WARN at start.
    /// With the `admin` feature.
    #[cfg(feature = "admin")]
    pub fn metrics_insecure(mut self, addr: SocketAddr) -> Self {
        self.metrics = Some(super::metrics::Wanted::Serve {
            addr,
            plaintext: true,
        });
        self
    }

    /// Records metrics into the recorder the process installed through the `metrics` facade
    /// (`metrics::set_global_recorder`, or an exporter's `install`), with no endpoint of the
    /// node's own; nothing is kept if none is installed when the node starts. Every node of the
    /// process then adds to the same series. Replaces an earlier `metrics*` setting.
    pub fn metrics_global(mut self) -> Self {
        self.metrics = Some(super::metrics::Wanted::Global);
        self
    }

    /// Adds a layer around every call this node makes; layers run in the order added.
    pub fn client_layer(mut self, layer: impl ClientLayer) -> Self {
        self.client_layers.push(Arc::new(layer));
        self
    }

    /// Adds a layer around every request this node serves; layers run in the order added.
    pub fn provider_layer(mut self, layer: impl ProviderLayer) -> Self {
        self.provider_layers.push(Arc::new(layer));
        self
    }

    /// Starts listening and joins the registry.
    pub async fn start(self) -> Result<Node, StartError> {
        let generation = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let max_frame = within(
            "max_frame",
            self.max_frame.unwrap_or(DEFAULT_MAX_FRAME),
            MIN_FRAME..=MAX_FRAME_LIMIT,
        )?;
        let wire = self.wire.unwrap_or(WIRE_VERSIONS);
        if wire.is_empty()
            || !WIRE_VERSIONS.contains(wire.start())
            || !WIRE_VERSIONS.contains(wire.end())
        {
            return Err(StartError::Setting(format!(
                "wire_versions {wire:?} is not within the versions this build speaks, {WIRE_VERSIONS:?}"
            )));
        }
        let max_in_flight = within(
            "max_in_flight_per_connection",
            self.max_in_flight
                .unwrap_or(DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION),
            1..=MAX_IN_FLIGHT_LIMIT,
        )?;
        let max_opening = within(
            "max_opening_connections",
            self.max_opening.unwrap_or(DEFAULT_MAX_OPENING_CONNECTIONS),
            1..=usize::MAX,
        )?;
        let max_concurrent = within(
            "max_concurrent_calls",
            self.max_concurrent_calls
                .unwrap_or(DEFAULT_MAX_CONCURRENT_CALLS),
            1..=usize::MAX,
        )?;
        let max_connections = within(
            "max_connections",
            self.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS),
            1..=usize::MAX,
        )?;
        let max_buffered_bytes = within(
            "max_buffered_bytes",
            self.max_buffered_bytes
                .unwrap_or(DEFAULT_MAX_BUFFERED_BYTES),
            1..=usize::MAX,
        )?
        .max(max_frame);
        let frame_timeout = positive("frame_timeout", self.frame_timeout, DEFAULT_FRAME_TIMEOUT)?;
        let idle_timeout = positive("idle_timeout", self.idle_timeout, DEFAULT_IDLE_TIMEOUT)?;
        let connect_timeout = self.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        if connect_timeout.is_zero() {
            return Err(StartError::Setting(
                "connect_timeout is zero: no connection could ever open".to_owned(),
            ));
        }
        let over_tcp = self.memory.is_none();
        if let Some(advertised) = self.advertise {
            if !over_tcp {
                return Err(StartError::Setting(
                    "advertise() is for TCP: a node on a memory network has its address there"
                        .to_owned(),
                ));
            }
            if advertised.ip().is_unspecified() {
                return Err(StartError::Setting(format!(
                    "advertise({advertised}) is a wildcard: advertise the address other nodes reach this one at"
                )));
            }
        }
        if over_tcp
            && self.advertise.is_none()
            && let Some(listen) = self.listen
            && listen.ip().is_unspecified()
        {
            return Err(StartError::Setting(format!(
                "the node listens on {listen}, which other nodes cannot call it at: give advertise() the address they reach it by"
            )));
        }
        let tls = match (&self.identity, self.insecure, &self.memory) {
            (Some(_), true, _) => {
                return Err(StartError::Setting(
                    "both identity() and insecure() were given: choose one".to_owned(),
                ));
            }
            (Some(identity), false, _) => {
                if let Some(name) = &self.name
                    && name != identity.node()
                {
                    return Err(StartError::Setting(format!(
                        "the node is named `{name}`, its certificate names `{}`",
                        identity.node()
                    )));
                }
                Some(
                    identity
                        .tls()
                        .map_err(|e| StartError::Setting(e.to_string()))?,
                )
            }
            (None, false, None) => {
                return Err(StartError::Setting(
                    "no identity: give the node one (NodeBuilder::identity, from the files `cluster init` and `cluster issue` write), or call insecure() to serve in plaintext".to_owned(),
                ));
            }
            // The in-process network has no sockets to secure.
            (None, _, _) => None,
        };
        // Wire 1 has no handshake, so no TLS: a secure node speaks wire 2 and later.
        let wire = match &tls {
            Some(_) if *wire.end() < 2 => {
                return Err(StartError::Setting(
                    "wire version 1 has no TLS: a node that speaks only wire 1 must be insecure()"
                        .to_owned(),
                ));
            }
            Some(_) => (*wire.start()).max(2)..=*wire.end(),
            None => wire,
        };
        let name = self
            .name
            .or_else(|| self.identity.as_ref().map(|i| i.node().to_owned()))
            .unwrap_or_else(|| format!("node-{generation}"));
        within("the length of the node's name", name.len(), 1..=MAX_NAME)?;
        let metrics = super::metrics::start(self.metrics, tls.as_ref(), self.insecure).await?;
        let dispatcher = Arc::new(Dispatcher::new(
            max_frame.saturating_sub(ENVELOPE_OVERHEAD),
            max_concurrent,
            self.provider_layers.into(),
        ));
        if let Some(metrics) = &metrics {
            let _ = dispatcher.meters.set(metrics.meters.clone());
        }
        let shared_name: Arc<str> = Arc::from(name.as_str());
        let registry = self
            .registry
            .unwrap_or_else(|| Arc::new(MemoryRegistry::new()));

        // The listener is bound now (its port goes in the registry entry), and accepts once the
        // node has joined: the registry's name claim may probe an address that reaches this
        // very port (another of its addresses, or a forwarder a member points at it), which
        // must not answer as the holder of the node's own name (`registry/gossip/claim.rs`).
        let (accept, accepting) = watch::channel(false);
        let (addr, listener, connector, incoming) = match self.memory {
            Some(network) => {
                let addr = network.bind(&dispatcher);
                (
                    addr,
                    Listener::Memory {
                        network: network.clone(),
                    },
                    Connector::Memory(network),
                    None,
                )
            }
            None => {
                let addr = self
                    .listen
                    .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
                let (stop, stopped) = watch::channel(false);
                let serving = ServeConfig {
                    node: shared_name.clone(),
                    versions: wire.clone(),
                    limits: FrameLimits {
                        max_frame,
                        frame_timeout,
                        idle_timeout,
                    },
                    connection: ConnectionLimits {
                        max_in_flight,
                        // One frame of the limit, beside a connection's small requests; and at
                        // most a quarter of the node's bytes while others wait for theirs.
                        per_connection: (max_frame + tcp::FLOOR).max(max_buffered_bytes / 4),
                    },
                    max_buffered_bytes,
                    max_opening,
                    max_connections,
                    tls: tls.clone(),
                };
                let (local, task, incoming) =
                    tcp::serve(addr, dispatcher.clone(), serving, stopped, accepting)
                        .await
                        .map_err(|source| StartError::Listen { addr, source })?;
                let connecting = ConnectConfig {
                    node: shared_name.clone(),
                    versions: wire.clone(),
                    max_frame,
                    connect_timeout,
                    max_in_flight,
                    frame_timeout,
                    idle_timeout,
                    tls: tls.clone(),
                };
                // Where other nodes call: what it advertises, on the port it got for port 0.
                let advertised = self.advertise.map_or(local, |a| match a.port() {
                    0 => SocketAddr::new(a.ip(), local.port()),
                    _ => a,
                });
                (
                    advertised,
                    Listener::Tcp { stop, task },
                    Connector::Tcp(TcpConnector::new(connecting)),
                    Some(incoming),
                )
            }
        };
        let info = NodeInfo::new(name, addr, generation)
            .with_max_frame(Some(max_frame))
            .with_wire(Some(wire.clone()));
        match &self.identity {
            Some(identity) => registry.bind_identity(identity)?,
            None if over_tcp => tracing::warn!(
                "node {info} serves and calls in PLAINTEXT (insecure()): anyone who reaches {addr} can call it"
            ),
            None => {}
        }
        let describe = crate::server::describe::Source {
            info: info.clone(),
            registry: registry.clone(),
        };
        let _ = dispatcher.describe.set(describe);
        let _ = dispatcher.generation.set(generation);
        registry.join(info.clone()).await?;
        let _ = accept.send(true);
        tracing::info!("node {info} started");
        let node = Node {
            inner: Arc::new(NodeInner {
                info,
                name: shared_name,
                wire,
                requests: Default::default(),
                client_layers: self.client_layers.into(),
                registry,
                connector,
                max_frame,
                peers: Peers::new(
                    self.outlier_cooldown.unwrap_or(DEFAULT_COOLDOWN),
                    self.panic_threshold
                        .filter(|share| share.is_finite())
                        .map_or(DEFAULT_PANIC_THRESHOLD, |share| share.clamp(0.0, 1.0)),
                ),
                dispatcher,
                supervisors: Mutex::default(),
                stopped: Default::default(),
                drain_timeout: self.drain_timeout.unwrap_or(Duration::from_secs(30)),
                listener: Mutex::new(Some(listener)),
                meters: metrics.as_ref().map(|m| m.meters.clone()),
                incoming,
                gossip: self.gossip,
                metrics_addr: metrics
                    .as_ref()
                    .and_then(|m| m.endpoint.as_ref().map(|e| e.addr)),
                metrics_endpoint: Mutex::default(),
            }),
        };
        if let Some(mut metrics) = metrics {
            metrics.attach(&node);
            *node
                .inner
                .metrics_endpoint
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = metrics.endpoint.take();
        }
        node.inner.registry.started(&node);
        Ok(node)
    }
}

/// A duration setting, or its default; zero is refused (nothing could ever finish).
fn positive(
    setting: &str,
    value: Option<Duration>,
    default: Duration,
) -> Result<Duration, StartError> {
    match value.unwrap_or(default) {
        Duration::ZERO => Err(StartError::Setting(format!(
            "{setting} is zero: nothing could ever finish within it"
        ))),
        // Timers further out than this are no limit at all; tokio's would overflow.
        value => Ok(value.min(crate::transport::tcp::MAX_DEADLINE)),
    }
}

/// `value` of `setting`, if it is in `range`; a [`StartError::Setting`] that says the range if
/// not: a setting that could never work is refused at start, not found out in production.
fn within(
    setting: &str,
    value: usize,
    range: std::ops::RangeInclusive<usize>,
) -> Result<usize, StartError> {
    if range.contains(&value) {
        return Ok(value);
    }
    let allowed = if *range.end() == usize::MAX {
        format!("at least {}", range.start())
    } else {
        format!("from {} to {}", range.start(), range.end())
    };
    Err(StartError::Setting(format!(
        "{setting} is {value}; it must be {allowed}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn settings_that_could_never_work_are_refused_at_start() {
        let refused = [
            Node::builder().max_frame(0),
            Node::builder().max_frame(MAX_FRAME_LIMIT + 1),
            Node::builder().wire_versions(3..=4),
            #[allow(clippy::reversed_empty_ranges)] // what a caller might pass
            Node::builder().wire_versions(2..=1),
            Node::builder().max_in_flight_per_connection(0),
            Node::builder().max_in_flight_per_connection(usize::MAX),
            Node::builder().max_opening_connections(0),
            Node::builder().max_concurrent_calls(0),
            Node::builder().connect_timeout(Duration::ZERO),
            Node::builder().frame_timeout(Duration::ZERO),
            Node::builder().idle_timeout(Duration::ZERO),
            Node::builder().max_connections(0),
            Node::builder().max_buffered_bytes(0),
            Node::builder().name(""),
            Node::builder().name("n".repeat(MAX_NAME + 1)),
        ];
        for builder in refused {
            let started = builder.memory(&MemoryNetwork::new()).start().await;
            let Err(StartError::Setting(why)) = started else {
                panic!("started: {started:?}");
            };
            assert!(!why.is_empty());
        }
        let Err(StartError::Setting(why)) = Node::builder().max_frame(10).start().await else {
            panic!("a 10-byte frame limit started")
        };
        assert_eq!(why, "max_frame is 10; it must be from 4096 to 1073741824");
    }
}
