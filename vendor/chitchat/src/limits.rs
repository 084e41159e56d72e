//! Bounds on what a peer can make this node hold or do. Not upstream's: see ../README.md.
//!
//! Upstream trusts its peers: every node id in a digest becomes a node state, every key in a
//! delta is kept, and a message may decompress to any size. Here each of those has a bound, and
//! what passes one is dropped and counted ([`Refusals`]), with a WARN at most every
//! [`LOG_EVERY`].

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use crate::ChitchatId;

/// The most bytes one message (a delta, or a V1 digest) may decompress to. Chitchat's
/// datagrams are at most 64 KiB, and blocks of 16 KiB of gossip state compress about 4 to 10
/// times: 1 MiB is room for that with a margin, and caps what one datagram can make a node
/// allocate and decompress (a zstd block of 11 bytes can decompress to 64 KiB). The sender
/// keeps its deltas under it too, so a delta it builds is never refused for its size.
pub const MAX_DECOMPRESSED_LEN: usize = 1 << 20;

/// The most bytes a V0 or V1 digest (node ids and versions, in one datagram) may take: past
/// about 65,400 bytes no SYN could be sent, and a SYN-ACK would have no room left for its
/// delta. A larger cluster is listed in part (`ClusterState::compute_whole_digest`); V2
/// digests are in parts of one packet each, whatever the cluster's size.
pub const MAX_DIGEST_LEN: usize = 60_000;

/// The longest node name (`ChitchatId::node_id`, in bytes) accepted from a peer: the longest
/// `cluster` gives a node. A longer one would fill a V2 digest part on its own, or pass the
/// datagram's budget.
pub const MAX_NODE_ID_LEN: usize = 255;

/// The longest key plus value accepted from a peer. A longer one could never be sent on: a
/// delta is one datagram.
pub const MAX_KEY_VALUE_LEN: usize = 60_000;

/// At most one WARN about refusals this often.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// What chitchat keeps of its peers, at most. The node's own state is not bounded here: it is
/// the application's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChitchatLimits {
    /// Node states kept, this node's own included (each costs its keys and a failure-detector
    /// window of about 8 KB).
    pub max_nodes: usize,
    /// Keys kept per peer, deleted ones (tombstones) included.
    pub max_keys_per_node: usize,
    /// Bytes of keys and values kept per peer.
    pub max_bytes_per_node: usize,
}

impl Default for ChitchatLimits {
    fn default() -> Self {
        Self {
            max_nodes: 2048,
            max_keys_per_node: 256,
            max_bytes_per_node: 256 * 1024,
        }
    }
}

/// Why an update from a peer was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A delta for this node's own state: only this node writes it.
    OwnState,
    /// A node past `max_nodes`.
    TooManyNodes,
    /// A node whose name is longer than [`MAX_NODE_ID_LEN`].
    NodeIdTooLong,
    /// A key past `max_keys_per_node`.
    TooManyKeys,
    /// A value past `max_bytes_per_node`.
    TooManyBytes,
    /// A key and value longer than [`MAX_KEY_VALUE_LEN`].
    ValueTooLarge,
    /// Not upstream's (`auth.rs`): a key-value its owner did not sign (unsigned, or signed by
    /// another node, or with a certificate that does not name it).
    Unsigned,
    /// Not upstream's (`auth.rs`): a heartbeat past what the node can have reached by now.
    Heartbeat,
    /// Not upstream's (`auth.rs`, "the owner's list"): a value its owner lists and this node
    /// was never sent, though it holds later ones (a peer withheld it).
    Withheld,
    /// Not upstream's (`verifying.rs`): a value left for a later round, its message's budget
    /// for checking signatures spent.
    Deferred,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::OwnState => "a peer sent this node's own state",
            Refusal::TooManyNodes => "a new node past the limit of nodes",
            Refusal::NodeIdTooLong => "a node whose name is too long",
            Refusal::TooManyKeys => "a key past the limit of keys per node",
            Refusal::TooManyBytes => "a value past the limit of bytes per node",
            Refusal::ValueTooLarge => "a key and value longer than a datagram",
            Refusal::Unsigned => "a value not signed with a certificate of that node this node trusts (unsigned, signed by another node, or its certificate refused: a WARN says why)",
            Refusal::Heartbeat => "a heartbeat ahead of the node's clock",
            Refusal::Withheld => "a value its node lists was withheld (asked for again)",
            Refusal::Deferred => "a value left for a later round (its sender's budget for checking signatures is spent)",
        })
    }
}

/// Updates from peers dropped since the node started, by reason.
#[derive(Debug, Default)]
pub struct Refusals {
    own_state: AtomicU64,
    nodes: AtomicU64,
    keys: AtomicU64,
    bytes: AtomicU64,
    unsigned: AtomicU64,
    heartbeats: AtomicU64,
    withheld: AtomicU64,
    deferred: AtomicU64,
    log: Mutex<LogState>,
}

#[derive(Debug, Default)]
struct LogState {
    unlogged: u64,
    logged: Option<Instant>,
}

impl Refusals {
    pub(crate) fn note(&self, why: Refusal, node: &ChitchatId) {
        let counter = match why {
            Refusal::OwnState => &self.own_state,
            Refusal::TooManyNodes | Refusal::NodeIdTooLong => &self.nodes,
            Refusal::TooManyKeys => &self.keys,
            Refusal::TooManyBytes | Refusal::ValueTooLarge => &self.bytes,
            Refusal::Unsigned => &self.unsigned,
            Refusal::Heartbeat => &self.heartbeats,
            Refusal::Withheld => &self.withheld,
            Refusal::Deferred => &self.deferred,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if why == Refusal::Deferred {
            // Not upstream's: not a refusal (the value comes again in a later round), so not in
            // `total` and not a WARN, whose count of refusals it made contradict itself.
            return;
        }
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.unlogged += 1;
        if log.logged.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
            warn!(
                "refused a gossip update about node {}: {why} ({} refused since the last such line, {} in all; at most one line per {LOG_EVERY:?})",
                node.node_id,
                log.unlogged,
                self.total()
            );
            log.unlogged = 0;
            log.logged = Some(Instant::now());
        }
    }

    /// Deltas for this node's own state, dropped.
    pub fn own_state(&self) -> u64 {
        self.own_state.load(Ordering::Relaxed)
    }

    /// New nodes not admitted (past `max_nodes`, or of a name past `MAX_NODE_ID_LEN`).
    pub fn nodes(&self) -> u64 {
        self.nodes.load(Ordering::Relaxed)
    }

    /// Keys dropped past `max_keys_per_node`.
    pub fn keys(&self) -> u64 {
        self.keys.load(Ordering::Relaxed)
    }

    /// Values dropped past `max_bytes_per_node` or [`MAX_KEY_VALUE_LEN`].
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Not upstream's (`auth.rs`): key-values dropped for a signature that is missing, wrong,
    /// or not by the node they are for.
    pub fn unsigned(&self) -> u64 {
        self.unsigned.load(Ordering::Relaxed)
    }

    /// Not upstream's (`auth.rs`): heartbeats dropped for being ahead of what their node can
    /// have reached.
    pub fn heartbeats(&self) -> u64 {
        self.heartbeats.load(Ordering::Relaxed)
    }

    /// Not upstream's (`auth.rs`, "the owner's list"): times a node's state was found to
    /// lack a value its owner lists, below values it holds (a peer withheld it), and asked for
    /// again.
    pub fn withheld(&self) -> u64 {
        self.withheld.load(Ordering::Relaxed)
    }

    /// Not upstream's (`verifying.rs`): values left for a later round, their message's budget
    /// for checking signatures spent. Not refused: not in [`Self::total`].
    pub fn deferred(&self) -> u64 {
        self.deferred.load(Ordering::Relaxed)
    }

    /// What no node of the cluster could have said or done of itself: [`Self::own_state`],
    /// [`Self::unsigned`], [`Self::heartbeats`] and [`Self::withheld`].
    pub fn forged(&self) -> u64 {
        self.own_state() + self.unsigned() + self.heartbeats() + self.withheld()
    }

    /// Every update dropped.
    pub fn total(&self) -> u64 {
        self.own_state() + self.nodes() + self.keys() + self.bytes() + self.unsigned()
            + self.heartbeats()
            + self.withheld()
    }
}
