//! Replication between registry servers: peer forwarding, not consensus.
//!
//! A write a client made is applied, then forwarded once to every peer, in batches on Eureka's
//! endpoint (`POST peerreplication/batch/`). A write that arrives as a replication (on the batch
//! endpoint, or with Eureka's `x-netflix-discovery-replication: true` header) is applied and
//! never forwarded on: one hop, never two. On a server with credentials, a replication is only
//! taken from a caller with the peer credentials (`access::guard`), and this server sends its
//! own peer credentials with every batch and start-up pull. Expiries are not replicated: each
//! server decides them from its own heartbeats, which every peer receives.

mod pending;
mod queue;
mod receive;
mod send;
mod sync;
mod wire;

use super::routes::REPLICATION_HEADER;

pub(crate) use queue::{Peers, Settings};
pub(in crate::server) use receive::batch;
pub(crate) use sync::sync_from_peers;
pub use wire::{Action, Item};

/// Counts of replication traffic, for operators and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ReplicationStats {
    /// Writes this server decided to forward, counted once per peer.
    pub forwarded: u64,
    /// Replicated writes this server applied (batch items and marked single requests).
    pub applied: u64,
    /// Writes given up on: a peer did not take them for `GIVE_UP_AFTER` (10 min), or its queue
    /// was full ([`Limits::max_peer_queue`](crate::server::Limits::max_peer_queue)) and they
    /// were the oldest.
    pub failed: u64,
}

/// `http://host:port/eureka/` with exactly one trailing slash.
pub(crate) fn base_url(url: &str) -> String {
    format!("{}/", url.trim_end_matches('/'))
}

/// The header that marks a single replicated request.
pub const MARKER: (&str, &str) = (REPLICATION_HEADER, "true");
