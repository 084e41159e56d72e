//! The registry itself: leases keyed by application and instance id, status overrides, the
//! delta window, and expiry decided when the registry is read.
//!
//! Nothing is evicted on a timer. Every operation first *settles* the registry at the current
//! time: an instance whose last heartbeat is older than its lease duration is quiet; if more
//! quiet instances than the threshold allows went quiet together (and there are at least the
//! minimum number of instances), the registry is in self-preservation and keeps serving them;
//! otherwise the quiet ones are expired (a `DELETED` entry in the delta) and forgotten.
//!
//! Instances expired within their last lease duration still count as quiet for that decision:
//! a partition cuts instances off at once, but their staggered heartbeats make them go quiet
//! one by one, and a rule that saw only the currently quiet would expire them all, one at a
//! time, without ever seeing more than one.

mod deadlines;
mod deltas;
mod expiry;
mod lease;
mod reads;
mod snapshot;
mod writes;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use super::{Clock, ServerConfig};
use crate::model::{Instance, Status};
use deadlines::Deadlines;
use deltas::Deltas;
use lease::Lease;
pub(crate) use snapshot::Snapshot;

#[derive(Debug, Default)]
struct State {
    apps: BTreeMap<String, BTreeMap<String, Lease>>,
    /// Status overrides by (application, instance id): an id is unique only within its
    /// application, and an override outlives neither its instance's cancel nor its expiry.
    overrides: HashMap<(String, String), Status>,
    /// When each lease goes quiet: the counts that settle the registry without visiting it.
    deadlines: Deadlines,
    deltas: Deltas,
    version: u64,
    preserving: bool,
    renewals: u64,
    /// Until when each recent expiry still counts as quiet (expiry time + its lease duration).
    expired_until: VecDeque<u64>,
    /// Until when reads answer 503 (0: not warming up); see [`Store::begin_warm_up`].
    warm_until: u64,
}

/// Why a registration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// A required field is empty.
    #[error("Missing {0}")]
    Missing(&'static str),
    /// The body names another application than the path.
    #[error("Mismatched appName, expecting {expected} but was {found}")]
    MismatchedApp {
        /// From the path.
        expected: String,
        /// From the body.
        found: String,
    },
    /// A field holds a character XML cannot carry (a control character other than tab,
    /// newline and carriage return, or U+FFFE / U+FFFF). Accepted, it would break every XML
    /// read of the registry, which is how the Python client reads it.
    #[error(
        "Unrepresentable {found:?} in {field}: XML cannot carry it, and XML clients read this registry"
    )]
    Unrepresentable {
        /// The field (`metadata.key` for a metadata value).
        field: String,
        /// The character.
        found: char,
    },
    /// A metadata key that cannot be an XML element name (a letter or `_` first, then
    /// letters, digits, `_`, `-`, `.`, `$`; not starting with `xml`). XML clients (the Python
    /// one) could not be sent it while JSON clients were: the two would disagree.
    #[error(
        "Unrepresentable {map} key {key:?}: not an XML element name (a letter or _ first, then letters, digits, _ - . $), and XML clients read this registry"
    )]
    MetadataKey {
        /// `metadata` or `dataCenterInfo.metadata`.
        map: &'static str,
        /// The key.
        key: String,
    },
    /// The client's `lastDirtyTimestamp` is further ahead of this server's clock than
    /// [`Limits::max_clock_skew`](crate::server::Limits::max_clock_skew).
    #[error(
        "lastDirtyTimestamp {found} is more than {max_secs} s ahead of this server's clock ({now} ms since the epoch): check the client's clock"
    )]
    AheadOfClock {
        /// The timestamp, epoch ms.
        found: u64,
        /// The server's clock, epoch ms.
        now: u64,
        /// How far ahead is allowed, in seconds.
        max_secs: u64,
    },
    /// The registry holds as many as a limit allows; the instance is new (re-registering one
    /// that is there always works).
    #[error("registry full: {limit} {what} already ({flag}); cancel some or raise the limit")]
    Full {
        /// What is full.
        what: &'static str,
        /// The limit.
        limit: usize,
        /// The `cluster-discovery serve` flag that sets it.
        flag: &'static str,
    },
    /// The instance holds more than a limit allows.
    #[error("instance too large: {found} {what}, at most {limit} ({flag})")]
    TooLarge {
        /// What is counted.
        what: &'static str,
        /// How many the instance has.
        found: usize,
        /// The limit.
        limit: usize,
        /// The `cluster-discovery serve` flag that sets it.
        flag: &'static str,
    },
}

/// The two registry documents the response cache holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Document {
    /// `GET apps`.
    Apps,
    /// `GET apps/delta`.
    Delta,
}

/// What a heartbeat gets.
#[derive(Debug, Clone, PartialEq)]
pub enum Renewed {
    /// Renewed.
    Ok,
    /// Unknown, or the client holds newer information: it must register again.
    NotFound,
    /// A replicated heartbeat older than this server's copy, which the sender should adopt.
    Conflict(Box<Instance>),
}

/// The registry's state at a glance.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// Instances served.
    pub instances: usize,
    /// Of those, how many have not renewed within their lease.
    pub quiet: usize,
    /// Instances expired within their lease duration, which still count as quiet when deciding
    /// self-preservation.
    pub recently_expired: usize,
    /// Whether expiry is suspended because too many went quiet at once.
    pub self_preservation: bool,
    /// Heartbeats received since start (replicated ones included).
    pub renewals: u64,
}

/// The registry of one server.
#[derive(Debug)]
pub(crate) struct Store {
    state: Mutex<State>,
    clock: Clock,
    config: ServerConfig,
}

impl Store {
    pub(crate) fn new(config: ServerConfig, clock: Clock) -> Self {
        // A rolling deploy of the whole registry is one entry per instance gone and one per
        // instance back: twice the instances is room for it.
        let deltas = Deltas::bounded(config.limits.max_instances.saturating_mul(2));
        Self {
            state: Mutex::new(State {
                deltas,
                ..State::default()
            }),
            clock,
            config,
        }
    }

    pub(crate) fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Starts the warm-up of a server that came up with an empty registry: until `until_ms`,
    /// reads answer 503 rather than a registry that clients would take for the truth while it
    /// holds only the instances that registered again so far. Writes are not held back (they
    /// rebuild the registry), and none of them ends the warm-up early: the first registration
    /// would otherwise open the reads on a registry of one instance.
    pub(crate) fn begin_warm_up(&self, until_ms: u64) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .warm_until = until_ms;
    }

    /// How much longer the warm-up lasts, `None` once it is over.
    pub(crate) fn warming_up(&self) -> Option<std::time::Duration> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.clock.now_ms();
        if state.warm_until != 0 && now >= state.warm_until {
            tracing::info!(
                "warm-up over: serving the registry, {} instances registered again",
                state.deadlines.len()
            );
            state.warm_until = 0;
        }
        (state.warm_until != 0).then(|| std::time::Duration::from_millis(state.warm_until - now))
    }

    /// Settles the registry now: what the expiry timer calls, so that a lease expires (and
    /// its `DELETED` reaches the delta) without waiting for a request.
    pub(crate) fn tick(&self) {
        self.settled(|_, _| ());
    }

    /// How many leases are held, without settling first (for the timer's test).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .deadlines
            .len()
    }

    /// Locks and settles the registry at the current time.
    fn settled<T>(&self, f: impl FnOnce(&mut State, u64) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.clock.now_ms();
        self.settle(&mut state, now);
        f(&mut state, now)
    }
}
