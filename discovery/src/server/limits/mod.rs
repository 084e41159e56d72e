//! What a client or a peer can make the server hold, and the ranges numbers from the wire are
//! kept in: one [`Limits`], each limit with its default and why (`docs/discovery.md`, "Limits").
//!
//! - [`numbers`]: lease durations, intervals and timestamps from a registration, a query or a
//!   replication batch, clamped or refused before they become arithmetic;
//! - the registry's own caps (applications, instances, metadata, the delta window) are checked
//!   by the store (`store/writes.rs`), the outbox's by the peers (`peers/pending.rs`);
//! - [`connections`]: the connection cap, and the timeouts that close a connection that stalls;
//! - [`warn`]: warnings a peer can trigger again and again, at most one per source and interval.

pub(crate) mod connections;
pub(crate) mod numbers;
pub(crate) mod warn;

use std::time::Duration;

/// Every limit of a registry server. The defaults suit an estate of a few thousand instances;
/// each is a `cluster-discovery serve` flag.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Limits {
    /// The largest request body accepted, in bytes: 1 MiB (a registration is about 2 KiB).
    /// Replication batches may be 8 times larger. More is a 413.
    pub max_body_bytes: usize,
    /// The most items in one replication batch: 1,000 (Eureka's peers send 250). Each answer
    /// to an item may carry a whole instance, so the count bounds the answer too. More is a 413.
    pub max_batch_items: usize,
    /// The most applications in the registry: 1,000. A registration of a new one past it is a
    /// 429.
    pub max_apps: usize,
    /// The most instances of one application: 1,000. A new one past it is a 429.
    pub max_instances_per_app: usize,
    /// The most instances in the registry, all applications together: 10,000. A new one past it
    /// is a 429. Also bounds the delta window (twice this many entries).
    pub max_instances: usize,
    /// The most metadata entries of one instance (and of its `dataCenterInfo`): 128. More is a
    /// 413, in a registration or a metadata update.
    pub max_metadata_entries: usize,
    /// The most text one instance may hold, in bytes, all its fields and its metadata's keys and
    /// values together: 64 KiB (a Spring instance holds about 1 KiB; a cluster node's service
    /// description a few). More is a 413.
    pub max_instance_bytes: usize,
    /// The longest lease an instance may ask for (`leaseInfo.durationInSecs`, and the renewal
    /// interval): 1 day. A longer one is shortened to it, so that no instance outlives its
    /// process by more than a day.
    pub max_lease: Duration,
    /// How far ahead of this server's clock a client's `lastDirtyTimestamp` may be: 1 day. The
    /// newer copy of an instance wins, so a copy dated years ahead would win over every later
    /// registration of the instance; it is refused with 400.
    pub max_clock_skew: Duration,
    /// The most connections open at once: 1,024. One past it is answered 503 and closed.
    pub max_connections: usize,
    /// How long a client has to send a request's head, and how long an idle keep-alive
    /// connection stays open: 10 s. Then the connection is closed (slow-loris).
    pub header_read_timeout: Duration,
    /// How long a request may take from its head to its response, body read included: 30 s.
    /// Then it is answered 408 (a body trickled byte by byte).
    pub request_timeout: Duration,
    /// How long a response may wait for a client that does not read it: 30 s. Then the
    /// connection is closed.
    pub write_timeout: Duration,
    /// The most writes waiting for one peer: 30,000 (three kinds of write for each of 10,000
    /// instances). Past it the oldest is given up (counted in `failed`).
    pub max_peer_queue: usize,
    /// The most one warning a client can provoke (a bad request, a wrong credential, a bad
    /// batch) is logged per source: once per 10 s, with the count of those suppressed.
    pub warning_interval: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 1024 * 1024,
            max_batch_items: 1_000,
            max_apps: 1_000,
            max_instances_per_app: 1_000,
            max_instances: 10_000,
            max_metadata_entries: 128,
            max_instance_bytes: 64 * 1024,
            max_lease: Duration::from_secs(24 * 3600),
            max_clock_skew: Duration::from_secs(24 * 3600),
            max_connections: 1_024,
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            max_peer_queue: 30_000,
            warning_interval: Duration::from_secs(10),
        }
    }
}
