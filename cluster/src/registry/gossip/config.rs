use std::net::{SocketAddr, UdpSocket};
use std::ops::RangeInclusive;
use std::time::Duration;

use chitchat::MAX_KEY_VALUE_LEN;

use crate::registry::RegistryError;

/// How a [`GossipRegistry`](super::GossipRegistry) gossips.
///
/// | setting | default | why |
/// |---|---|---|
/// | `listen` | `127.0.0.1:0` (a port the OS picks) | |
/// | `advertise` | the listen address; required when that is a wildcard (`0.0.0.0`, `[::]`) | set it when peers reach this node by another address (NAT, a container's port mapping); its port 0 stands for the listen port |
/// | `seeds` | none | a few `host:port` gossip addresses of other nodes |
/// | `keyring` or `insecure` | neither: joining fails | a keyring seals every datagram (XChaCha20-Poly1305); `insecure()` gossips in plaintext, said by name |
/// | `cluster_id` | the cluster of the node's certificate | set it only for an `insecure()` registry, where it is required |
/// | `replay_window` | 30 s | a sealed datagram sent longer ago (by the sender's clock) is refused: nodes' clocks must agree within it |
/// | `clock_skew` | 500 ms | on a signed registry (`docs/security.md`, "Signed gossip"), a heartbeat more than this (and 100 ms) ahead of this node's clock, counted from its node's start, is refused: nodes' clocks must agree within it. A lying member can hold a node's heartbeats back by as much: it must be below `dead_after` by more than 100 ms (refused otherwise); with `dead_after` 0, phi alone may take a node held back that long for dead |
/// | `gossip_interval` | 200 ms | a crashed node is out of every lookup in about 2 s (30 nodes) |
/// | `phi_threshold` | 6 | past it a node is *suspect*: still in lookups, called only when no replica that is not suspect can be (about 0.4–1.2 s of silence, shorter in larger clusters, where heartbeats are relayed more often) |
/// | `dead_after` | 2 s | the least silence before a node is dead and out of every lookup: a stall shorter than this (a pause, a starved CPU) takes no provider away; a crash is out of every lookup in this and one round. 0: no suspect phase, phi alone declares a node dead (as before issue 14: after about 0.6 s of silence) |
/// | `push_fanout` | 128 | a change of this node's own state (its start, a registration) is pushed at once to this many peers, live ones first (all of them in a cluster of up to 129); the rest hear it by gossip, in a round or two. Each push is one datagram of the digest each way |
/// | `max_datagram` | 1,232 bytes | a gossip round's SYN to a peer is as many datagrams of at most this size as the digest of every node takes (about 50 nodes a datagram), each answered with one of the same size when there is no news: none is IP-fragmented on any path, since 1,232 is IPv6's minimum MTU less its headers. Raise it on a network whose MTU is known to be larger (8,952 with 9,000-byte jumbo frames). A datagram carrying state (a registration's entry of up to `max_entry_bytes`) is larger |
/// | `purge_after` | 1 h | a dead node's state is forgotten after this |
/// | `max_entry_bytes` | 16 KiB | chitchat silently stops replicating a node that has a value of 64 KB or more |
/// | `max_nodes` | 2,048 | 1,000 live nodes and the old generations of a rolling restart of all of them: a node dead for over 30 s gives its place to a new one, a more recent death does not. Each node costs every node a failure-detector window (8 KB) and its share of every round's digest (about 25 bytes) |
/// | `max_keys_per_node` | 256 | a node holds 5 keys and one per service (a deleted one stays for `purge_after`) |
/// | `max_bytes_per_node` | 256 KiB | sixteen entries of `max_entry_bytes`, a hundred of a usual 2 KiB |
///
/// The last three bound what a peer can make this node hold (past them its updates are dropped,
/// counted in [`GossipRegistry::refused_updates`](super::GossipRegistry::refused_updates), with
/// a WARN at most every 10 s), and what this node may register itself: peers with the same
/// settings would drop the rest. Every duration is checked when the registry starts
/// ([`validate`](Self::validate)). `docs/registry.md` ("Limits") says why each bound is where
/// it is.
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
    /// How far ahead of this node's clock another node's may be, on a signed registry.
    pub clock_skew: Duration,
    /// Time between gossip rounds.
    pub gossip_interval: Duration,
    /// The failure detector's threshold, past which a node is suspect.
    pub phi_threshold: f64,
    /// The least silence before a node is declared dead.
    pub dead_after: Duration,
    /// The most peers a change of this node's own state is pushed to at once.
    pub push_fanout: usize,
    /// The most bytes of a gossip datagram that carries no news (sealed).
    pub max_datagram: usize,
    /// How long a dead node's state is kept.
    pub purge_after: Duration,
    /// The largest encoded service description accepted at registration.
    pub max_entry_bytes: usize,
    /// The most nodes held, this one included.
    pub max_nodes: usize,
    /// The most keys held of one node, deleted ones included.
    pub max_keys_per_node: usize,
    /// The most bytes of keys and values held of one node.
    pub max_bytes_per_node: usize,
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
            clock_skew: Duration::from_millis(500),
            gossip_interval: Duration::from_millis(200),
            phi_threshold: 6.0,
            dead_after: Duration::from_secs(2),
            push_fanout: 128,
            max_datagram: chitchat::DEFAULT_DATAGRAM_BUDGET,
            purge_after: Duration::from_secs(3600),
            max_entry_bytes: 16 * 1024,
            max_nodes: 2048,
            max_keys_per_node: 256,
            max_bytes_per_node: 256 * 1024,
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

    /// How far ahead of this node's clock another node's may be before its heartbeats are
    /// refused, on a signed registry (`docs/security.md`, "Signed gossip").
    pub fn clock_skew(mut self, skew: Duration) -> Self {
        self.clock_skew = skew;
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

    /// The least silence before a node is declared dead (below it, a node past the phi
    /// threshold is only suspect). Zero leaves phi alone to declare it, with no suspect phase.
    pub fn dead_after(mut self, silence: Duration) -> Self {
        self.dead_after = silence;
        self
    }

    /// The most peers a change of this node's own state is pushed to at once; 0 leaves every
    /// change to gossip rounds.
    pub fn push_fanout(mut self, peers: usize) -> Self {
        self.push_fanout = peers;
        self
    }

    /// The most bytes of a gossip datagram that carries no news, sealed: the digest of every
    /// node goes in as many datagrams of this size as it takes (1,232 by default, which no
    /// path fragments; 576 to 65,507).
    pub fn max_datagram(mut self, bytes: usize) -> Self {
        self.max_datagram = bytes;
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

    /// The most nodes held, this one included: a peer that names more is not heard about them.
    pub fn max_nodes(mut self, nodes: usize) -> Self {
        self.max_nodes = nodes;
        self
    }

    /// The most keys held of one node (5, and one per service), deleted ones included.
    pub fn max_keys_per_node(mut self, keys: usize) -> Self {
        self.max_keys_per_node = keys;
        self
    }

    /// The most bytes of keys and values held of one node.
    pub fn max_bytes_per_node(mut self, bytes: usize) -> Self {
        self.max_bytes_per_node = bytes;
        self
    }

    /// Checks every setting against its range, as [`GossipRegistry`](super::GossipRegistry)
    /// does when it starts: the error names the setting, its value and the range.
    pub fn validate(&self) -> Result<(), RegistryError> {
        let bad = |setting: &str, value: &dyn std::fmt::Debug, range: &str| {
            Err(RegistryError::Gossip(format!(
                "GossipConfig::{setting} is {value:?}; it must be within {range}"
            )))
        };
        let within = |d: Duration, range: &RangeInclusive<Duration>| range.contains(&d);
        match self.advertise {
            Some(advertise) if advertise.ip().is_unspecified() => {
                return Err(RegistryError::Gossip(format!(
                    "GossipConfig::advertise is {advertise}, a wildcard: advertise the address peers reach this node at"
                )));
            }
            None if self.listen.ip().is_unspecified() => {
                return Err(RegistryError::Gossip(format!(
                    "GossipConfig::listen is {}, which peers cannot gossip to: give GossipConfig::advertise the address they reach this node at",
                    self.listen
                )));
            }
            _ => {}
        }
        if !within(self.gossip_interval, &GOSSIP_INTERVAL) {
            return bad("gossip_interval", &self.gossip_interval, "1ms..=1h");
        }
        if !within(self.dead_after, &DEAD_AFTER) {
            return bad("dead_after", &self.dead_after, "0s..=1h");
        }
        if self.push_fanout > usize::from(u16::MAX) {
            return bad("push_fanout", &self.push_fanout, "0..=65535");
        }
        if !MAX_DATAGRAM.contains(&self.max_datagram) {
            return bad("max_datagram", &self.max_datagram, "576..=65507");
        }
        if !within(self.purge_after, &PURGE_AFTER) {
            return bad("purge_after", &self.purge_after, "1s..=30 days");
        }
        if !within(self.replay_window, &REPLAY_WINDOW) {
            return bad("replay_window", &self.replay_window, "1s..=1 day");
        }
        if !within(self.clock_skew, &CLOCK_SKEW) {
            return bad("clock_skew", &self.clock_skew, "0s..=10min");
        }
        // A lying member can hold a node's heartbeats back by the skew allowed and the lead:
        // past `dead_after`, that would make a live node dead.
        if !self.dead_after.is_zero()
            && self.clock_skew + Duration::from_millis(super::authorship::LEAD_MS)
                >= self.dead_after
        {
            let most = self
                .dead_after
                .saturating_sub(Duration::from_millis(super::authorship::LEAD_MS + 1));
            return Err(RegistryError::Gossip(format!(
                "GossipConfig::clock_skew is {:?}; it must be at most {most:?}, more than 100 ms below dead_after ({:?}): a lying member can hold a node's heartbeats back by it",
                self.clock_skew, self.dead_after
            )));
        }
        if !(self.phi_threshold.is_finite() && self.phi_threshold > 0.0) {
            return bad(
                "phi_threshold",
                &self.phi_threshold,
                "a finite number above 0",
            );
        }
        if !(1..=MAX_KEY_VALUE_LEN).contains(&self.max_entry_bytes) {
            return bad(
                "max_entry_bytes",
                &self.max_entry_bytes,
                &format!("1..={MAX_KEY_VALUE_LEN} (a value must fit in a datagram)"),
            );
        }
        if !(2..=usize::from(u16::MAX)).contains(&self.max_nodes) {
            return bad("max_nodes", &self.max_nodes, "2..=65535");
        }
        if !(MIN_KEYS..=usize::from(u16::MAX)).contains(&self.max_keys_per_node) {
            return bad(
                "max_keys_per_node",
                &self.max_keys_per_node,
                &format!("{MIN_KEYS}..=65535"),
            );
        }
        if self.max_bytes_per_node < self.max_entry_bytes + MIN_OWN_BYTES {
            return bad(
                "max_bytes_per_node",
                &self.max_bytes_per_node,
                &format!(
                    "at least max_entry_bytes ({}) + {MIN_OWN_BYTES}",
                    self.max_entry_bytes
                ),
            );
        }
        Ok(())
    }
}

const GOSSIP_INTERVAL: RangeInclusive<Duration> =
    Duration::from_millis(1)..=Duration::from_secs(3600);
const DEAD_AFTER: RangeInclusive<Duration> = Duration::ZERO..=Duration::from_secs(3600);
const PURGE_AFTER: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(30 * 24 * 3600);
const CLOCK_SKEW: RangeInclusive<Duration> = Duration::ZERO..=Duration::from_secs(600);
const REPLAY_WINDOW: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(24 * 3600);
/// From IPv4's least datagram every host must take whole to UDP's largest.
const MAX_DATAGRAM: RangeInclusive<usize> = 576..=65_507;
/// A node's own keys besides its services (`rpc`, `status`, `rev`, `frame`, `wire`,
/// `chitchat.protocol`), and room for a few services.
const MIN_KEYS: usize = 16;
/// Room for those keys' bytes.
const MIN_OWN_BYTES: usize = 1024;

/// chitchat must be told the address it advertises before it binds; with port 0 the OS picks
/// one here first. Another process could take it in between; the bind then fails loudly.
pub(super) fn resolve_port(listen: SocketAddr) -> std::io::Result<SocketAddr> {
    if listen.port() != 0 {
        return Ok(listen);
    }
    UdpSocket::bind(listen)?.local_addr()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(config: GossipConfig, setting: &str) {
        match config.validate() {
            Err(RegistryError::Gossip(why)) => {
                assert!(why.contains(&format!("GossipConfig::{setting} ")), "{why}");
                assert!(why.contains("must be "), "{why}");
            }
            other => panic!("{setting}: {other:?}"),
        }
    }

    #[test]
    fn the_defaults_are_valid() {
        GossipConfig::new().validate().unwrap();
    }

    #[test]
    fn a_wildcard_is_never_advertised() {
        let wildcard: SocketAddr = "0.0.0.0:7280".parse().unwrap();
        let why = |config: GossipConfig| match config.validate() {
            Err(RegistryError::Gossip(why)) => why,
            other => panic!("{other:?}"),
        };
        let listening = why(GossipConfig::new().listen(wildcard));
        assert!(listening.contains("GossipConfig::advertise"), "{listening}");
        let advertising = why(GossipConfig::new().advertise(wildcard));
        assert!(advertising.contains("a wildcard"), "{advertising}");
        GossipConfig::new()
            .listen(wildcard)
            .advertise("10.0.0.3:7280".parse().unwrap())
            .validate()
            .unwrap();
    }

    #[test]
    fn each_setting_out_of_its_range_is_named() {
        let c = GossipConfig::new;
        refused(c().gossip_interval(Duration::ZERO), "gossip_interval");
        refused(c().gossip_interval(Duration::MAX), "gossip_interval");
        refused(
            c().gossip_interval(Duration::from_secs(3601)),
            "gossip_interval",
        );
        refused(c().dead_after(Duration::MAX), "dead_after");
        refused(c().push_fanout(usize::MAX), "push_fanout");
        refused(c().purge_after(Duration::MAX), "purge_after");
        refused(c().purge_after(Duration::ZERO), "purge_after");
        refused(c().replay_window(Duration::MAX), "replay_window");
        refused(c().clock_skew(Duration::MAX), "clock_skew");
        refused(c().clock_skew(Duration::from_secs(2)), "clock_skew");
        refused(c().phi_threshold(f64::NAN), "phi_threshold");
        refused(c().phi_threshold(-1.0), "phi_threshold");
        refused(c().phi_threshold(f64::INFINITY), "phi_threshold");
        refused(c().max_entry_bytes(0), "max_entry_bytes");
        refused(c().max_entry_bytes(64 * 1024), "max_entry_bytes");
        refused(c().max_nodes(1), "max_nodes");
        refused(c().max_nodes(1 << 20), "max_nodes");
        refused(c().max_keys_per_node(4), "max_keys_per_node");
        refused(c().max_bytes_per_node(1024), "max_bytes_per_node");
        refused(c().max_datagram(575), "max_datagram");
        refused(c().max_datagram(65_508), "max_datagram");
    }

    #[test]
    fn the_bounds_themselves_are_valid() {
        let c = GossipConfig::new;
        for config in [
            c().gossip_interval(Duration::from_millis(1)),
            c().gossip_interval(Duration::from_secs(3600)),
            c().purge_after(Duration::from_secs(30 * 24 * 3600)),
            c().max_nodes(2),
            c().max_keys_per_node(16),
            c().max_entry_bytes(1).max_bytes_per_node(1025),
            c().max_datagram(576),
            c().max_datagram(65_507),
        ] {
            config.validate().unwrap();
        }
    }
}
