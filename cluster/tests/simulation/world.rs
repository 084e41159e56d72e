//! What every host shares with the driver: the live hosts' registries, what each observer has
//! seen, every call's record (`calls.rs`), and the invariants checked against them.
//!
//! The hosts run on one thread (turmoil's), so one mutex is never contended; the driver reads
//! the registries between steps, the tracing layer while a host runs.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The service every host provides.
pub const SERVICE: &str = "kv";

/// A provider, as lookups name it: node name and generation.
pub type Provider = (String, u64);

/// One host's current process.
pub struct Live {
    pub generation: u64,
    pub registry: Arc<dyn cluster::Registry>,
    /// The registry's change counter when the driver last read its lookups.
    seen_change: Option<u64>,
    /// Every provider this process's lookups have listed.
    pub seen: HashSet<Provider>,
    /// The newest generation seen of each name.
    newest: HashMap<String, u64>,
}

#[derive(Default)]
pub struct Counts {
    pub attempts: u64,
    /// Attempts to a node that some live peer, not every one, had declared dead: what shows
    /// that invariant 1 was put to the test.
    pub attempts_contested: u64,
    pub reads_ok: u64,
    /// Writes and deposits that returned.
    pub writes_ok: u64,
    /// Deposits answered from a provider's record of at-most-once calls.
    pub recalled: u64,
    pub failed: u64,
}

#[derive(Default)]
pub struct State {
    /// Hosts whose node is up and serving, by host name.
    pub live: HashMap<String, Live>,
    /// Hosts whose software runs (the driver's view): each must end up live.
    pub running: BTreeSet<String>,
    /// Every call's start and end, and every run of a write or a deposit.
    pub calls: crate::calls::Ledger,
    pub violations: Vec<String>,
    pub counts: Counts,
}

#[derive(Default)]
pub struct World {
    pub state: Mutex<State>,
    next_id: AtomicU64,
    /// Set when the callers are to make no more calls.
    stopped: AtomicBool,
}

impl World {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A call number no other call of the run has.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Tells the callers to make no more calls.
    pub fn stop_calling(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }

    pub fn violation(&self, what: String) {
        self.lock().flag(what);
    }
}

/// The providers a registry's lookups list now.
pub fn listed(registry: &dyn cluster::Registry) -> BTreeSet<Provider> {
    registry
        .lookup(SERVICE)
        .iter()
        .map(|e| (e.node.name.clone(), e.node.generation))
        .collect()
}

impl State {
    pub fn up(&mut self, host: &str, generation: u64, registry: Arc<dyn cluster::Registry>) {
        self.live.insert(
            host.to_owned(),
            Live {
                generation,
                registry,
                seen_change: None,
                seen: HashSet::new(),
                newest: HashMap::new(),
            },
        );
    }

    /// Invariant 2, read after every step: an observer that has seen a generation of a name
    /// never lists an older one again.
    pub fn observe(&mut self, now: Duration) {
        let mut found = Vec::new();
        for (host, live) in &mut self.live {
            let change = *live.registry.changes().borrow();
            if live.seen_change == Some(change) {
                continue;
            }
            live.seen_change = Some(change);
            for (name, generation) in listed(&*live.registry) {
                let newest = live.newest.entry(name.clone()).or_insert(generation);
                if generation < *newest {
                    found.push(format!(
                        "invariant 2 at {now:?}: {host} (generation {}) lists {name} generation {generation} after seeing generation {newest}",
                        live.generation
                    ));
                }
                *newest = (*newest).max(generation);
                live.seen.insert((name, generation));
            }
        }
        for what in found {
            self.flag(what);
        }
    }

    /// A violation, kept among the first 50.
    pub fn flag(&mut self, what: String) {
        if self.violations.len() < 50 {
            self.violations.push(what);
        }
    }

    /// Invariant 1, at each attempt to `target`: how many live peers that have listed it no
    /// longer do (declared it dead), and how many still list it. Peers that never listed it
    /// have declared nothing. The attempt breaks the invariant when the first is above zero
    /// and the second zero.
    pub fn declarations(&self, target: &Provider) -> (usize, usize) {
        let (mut declared, mut listing) = (0, 0);
        for (host, live) in &self.live {
            if *host == target.0 || !live.seen.contains(target) {
                continue;
            }
            if listed(&*live.registry).contains(target) {
                listing += 1;
            } else {
                declared += 1;
            }
        }
        (declared, listing)
    }

    /// The providers every live host should converge to: each live host's current process.
    pub fn expected(&self) -> BTreeSet<Provider> {
        self.live
            .iter()
            .map(|(host, live)| (host.clone(), live.generation))
            .collect()
    }

    /// Invariant 4's test: every live host lists exactly the live providers. `Err` says who
    /// differs, and how.
    pub fn converged(&self) -> Result<(), String> {
        let starting: Vec<_> = self
            .running
            .iter()
            .filter(|h| !self.live.contains_key(*h))
            .collect();
        if !starting.is_empty() {
            return Err(format!(
                "{} host(s) not serving yet: {starting:?}",
                starting.len()
            ));
        }
        let expected = self.expected();
        let mut differ = Vec::new();
        for (host, live) in &self.live {
            let has = listed(&*live.registry);
            if has != expected {
                let missing: Vec<_> = expected.difference(&has).collect();
                let extra: Vec<_> = has.difference(&expected).collect();
                differ.push(format!("{host}: missing {missing:?}, extra {extra:?}"));
            }
        }
        if differ.is_empty() {
            Ok(())
        } else {
            differ.sort();
            let total = differ.len();
            differ.truncate(5);
            Err(format!(
                "{total} host(s) differ, e.g. {}",
                differ.join("; ")
            ))
        }
    }
}
