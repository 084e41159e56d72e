use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

/// How a [`GossipRegistry`](super::GossipRegistry) gossips.
///
/// | setting | default | why |
/// |---|---|---|
/// | `listen` | `127.0.0.1:0` (a port the OS picks) | |
/// | `advertise` | the listen address | set it when peers reach this node by another address |
/// | `seeds` | none | a few `host:port` gossip addresses of other nodes |
/// | `keyring` or `insecure` | neither: joining fails | a keyring seals every datagram (ChaCha20-Poly1305); `insecure()` gossips in plaintext, said by name |
/// | `cluster_id` | the cluster of the node's certificate | set it only for an `insecure()` registry, where it is required |
/// | `replay_window` | 30 s | a sealed datagram sent longer ago (by the sender's clock) is refused: nodes' clocks must agree within it |
/// | `gossip_interval` | 200 ms | a crashed node is out of every lookup in about 2 s (30 nodes) |
/// | `phi_threshold` | 6 | chitchat defaults to 8; 6 keeps crash detection near 2 s at 30 nodes, at the price of less tolerance for a stalled process (about 1.5 s of silence) |
/// | `purge_after` | 1 h | a dead node's state is forgotten after this |
/// | `max_entry_bytes` | 16 KiB | chitchat silently stops replicating a node that has a value of 64 KB or more |
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GossipConfig {
    /// UDP address to gossip on.
    pub listen: SocketAddr,
    /// The address peers use for this node, if not `listen`.
    pub advertise: Option<SocketAddr>,
    /// Gossip addresses of some other nodes.
    pub seeds: Vec<String>,
    /// The cluster's name; by default the node certificate's.
    pub cluster_id: Option<String>,
    /// The keys that seal gossip.
    pub keyring: Option<crate::Keyring>,
    /// Gossip in plaintext.
    pub insecure: bool,
    /// How old a sealed datagram may be.
    pub replay_window: Duration,
    /// Time between gossip rounds.
    pub gossip_interval: Duration,
    /// The failure detector's threshold.
    pub phi_threshold: f64,
    /// How long a dead node's state is kept.
    pub purge_after: Duration,
    /// The largest encoded service description accepted at registration.
    pub max_entry_bytes: usize,
}

impl Default for GossipConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise: None,
            seeds: Vec::new(),
            cluster_id: None,
            keyring: None,
            insecure: false,
            replay_window: Duration::from_secs(30),
            gossip_interval: Duration::from_millis(200),
            phi_threshold: 6.0,
            purge_after: Duration::from_secs(3600),
            max_entry_bytes: 16 * 1024,
        }
    }
}

impl GossipConfig {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The UDP address to gossip on.
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// The address peers use for this node.
    pub fn advertise(mut self, addr: SocketAddr) -> Self {
        self.advertise = Some(addr);
        self
    }

    /// Gossip addresses of some other nodes.
    pub fn seeds<S: ToString>(mut self, seeds: impl IntoIterator<Item = S>) -> Self {
        self.seeds = seeds.into_iter().map(|s| s.to_string()).collect();
        self
    }

    /// The cluster's name. A node with an identity takes its certificate's (a different one
    /// here is refused); an `insecure()` registry needs one.
    pub fn cluster_id(mut self, id: impl Into<String>) -> Self {
        self.cluster_id = Some(id.into());
        self
    }

    /// The keys that seal every datagram: a node without them cannot join, read the registry
    /// or add to it. Keep a clone of the keyring to rotate keys while the node runs.
    pub fn keyring(mut self, keyring: crate::Keyring) -> Self {
        self.keyring = Some(keyring);
        self
    }

    /// Gossips in plaintext: anyone who reaches the port can join, read every entry and add
    /// its own. For a laptop or a test, said by name; the registry logs a WARN when it starts.
    pub fn insecure(mut self) -> Self {
        self.insecure = true;
        self
    }

    /// How old a sealed datagram may be before it is refused as a replay.
    pub fn replay_window(mut self, window: Duration) -> Self {
        self.replay_window = window;
        self
    }

    /// Time between gossip rounds.
    pub fn gossip_interval(mut self, interval: Duration) -> Self {
        self.gossip_interval = interval;
        self
    }

    /// The failure detector's threshold.
    pub fn phi_threshold(mut self, phi: f64) -> Self {
        self.phi_threshold = phi;
        self
    }

    /// How long a dead node's state is kept.
    pub fn purge_after(mut self, period: Duration) -> Self {
        self.purge_after = period;
        self
    }

    /// The largest encoded service description accepted.
    pub fn max_entry_bytes(mut self, bytes: usize) -> Self {
        self.max_entry_bytes = bytes;
        self
    }
}

/// chitchat must be told the address it advertises before it binds; with port 0 the OS picks
/// one here first. Another process could take it in between; the bind then fails loudly.
pub(super) fn resolve_port(listen: SocketAddr) -> std::io::Result<SocketAddr> {
    if listen.port() != 0 {
        return Ok(listen);
    }
    UdpSocket::bind(listen)?.local_addr()
}
