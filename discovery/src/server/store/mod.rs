//! The registry itself: leases keyed by application and instance id, status overrides, the
//! delta window, and expiry decided when the registry is read.
//!
//! Nothing is evicted on a timer. Every operation first *settles* the registry at the current
//! time: an instance whose last heartbeat is older than its lease duration is quiet; if more
//! quiet instances than the threshold allows went quiet together (and there are at least the
//! minimum number of instances), the registry is in self-preservation and keeps serving them;
//! otherwise the quiet ones are expired (a `DELETED` entry in the delta) and forgotten.

mod expiry;
mod lease;
mod reads;
mod writes;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use super::{Clock, ServerConfig};
use crate::model::{Instance, Status};
use lease::Lease;

#[derive(Debug, Default)]
struct State {
    apps: BTreeMap<String, BTreeMap<String, Lease>>,
    overrides: HashMap<String, Status>,
    deltas: VecDeque<(u64, Instance)>,
    version: u64,
    preserving: bool,
    renewals: u64,
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
        Self {
            state: Mutex::new(State::default()),
            clock,
            config,
        }
    }

    pub(crate) fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Locks and settles the registry at the current time.
    fn settled<T>(&self, f: impl FnOnce(&mut State, u64) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.clock.now_ms();
        self.settle(&mut state, now);
        f(&mut state, now)
    }
}
