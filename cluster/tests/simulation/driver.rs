//! The driver: builds a simulated cluster, steps it, injects faults between steps, and reads
//! every live host's registry after each step (invariant 2), and the calls' records at the end
//! (3 and 5; 4 in `converge`).

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use crate::calls::NEAR;
use crate::host::{self, Setup};
use crate::world::World;

/// Hosts whose software calls: a few per cluster, spread over it.
const CALLERS_EVERY: usize = 5;

/// The sim's step: `SIM_TICK_MS`, 5 ms by default.
fn tick() -> Duration {
    let ms = std::env::var("SIM_TICK_MS")
        .ok()
        .map_or(5, |t| t.parse().expect("SIM_TICK_MS: a number"));
    Duration::from_millis(ms)
}

pub struct Cluster {
    pub sim: turmoil::Sim<'static>,
    pub world: Arc<World>,
    /// Host names, in order of registration (turmoil gives IPs in that order).
    pub names: Vec<String>,
    pub seed: u64,
    ca: cluster::Authority,
    keyring: cluster::Keyring,
    seeds: Vec<String>,
    _trace: tracing::subscriber::DefaultGuard,
}

impl Cluster {
    /// `n` hosts `n0`..: every one serves `kv`, every fifth calls it. Gossip seeds are the
    /// first three hosts.
    pub fn new(seed: u64, n: usize) -> Self {
        let world = Arc::new(World::default());
        let sim = turmoil::Builder::new()
            .rng_seed(seed)
            .simulation_duration(Duration::from_secs(24 * 3600))
            // turmoil delivers each host's messages by walking every link, every tick: a
            // step costs hosts × links. A 5 ms tick (for 1–20 ms latencies and 200 ms gossip
            // rounds) is what keeps 50 hosts within CI's minutes.
            .tick_duration(tick())
            .min_message_latency(Duration::from_millis(1))
            .max_message_latency(Duration::from_millis(20))
            .build();
        let seeds = (0..3.min(n))
            .map(|i| format!("192.168.0.{}:{}", i + 1, host::GOSSIP))
            .collect();
        let mut cluster = Self {
            sim,
            _trace: crate::trace::install(world.clone()),
            world,
            names: Vec::new(),
            seed,
            ca: cluster::Authority::new("sim").expect("a CA"),
            keyring: cluster::Keyring::new(cluster::GossipKey::generate()),
            seeds,
        };
        for i in 0..n {
            cluster.add(&format!("n{i}"), i % CALLERS_EVERY == 0);
        }
        cluster
    }

    /// Registers a host that starts at once (a new name gets the next IP).
    pub fn add(&mut self, name: &str, caller: bool) {
        let ip = format!("192.168.0.{}", self.names.len() + 1);
        let setup = Setup {
            name: name.to_owned(),
            seeds: self
                .seeds
                .iter()
                .filter(|s| !s.starts_with(&format!("{ip}:")))
                .cloned()
                .collect(),
            caller,
            identity: self.ca.issue(name).expect("an identity"),
            keyring: self.keyring.clone(),
            world: self.world.clone(),
        };
        self.sim.host(name, move || host::run(setup.clone()));
        self.names.push(name.to_owned());
        self.world.lock().running.insert(name.to_owned());
    }

    pub fn now(&self) -> Duration {
        self.sim.elapsed()
    }

    /// Steps for `span` of sim time, reading every registry after each step.
    pub fn run_for(&mut self, span: Duration) {
        let until = self.now() + span;
        while self.now() < until {
            self.step();
        }
    }

    fn step(&mut self) {
        if let Err(e) = self.sim.step() {
            panic!(
                "seed {}: the simulation failed at {:?}: {e}",
                self.seed,
                self.now()
            );
        }
        let now = self.now();
        self.world.lock().observe(now);
    }

    /// Invariant 4: steps until every live host lists exactly the live providers; `Err` after
    /// `bound` of sim time, with who differs.
    pub fn converge(&mut self, bound: Duration) -> Result<Duration, String> {
        let start = self.now();
        loop {
            let last = self.world.lock().converged();
            match last {
                Ok(()) => return Ok(self.now() - start),
                Err(why) if self.now() - start >= bound => {
                    return Err(format!("not converged {bound:?} after {start:?}: {why}"));
                }
                Err(_) => self.step(),
            }
        }
    }

    pub fn group(&self, range: Range<usize>) -> Vec<String> {
        self.names[range].to_vec()
    }

    /// Cuts every link between `side` and the other hosts, both ways.
    pub fn partition(&mut self, side: &[String]) {
        for a in side {
            for b in self.names.iter().filter(|b| !side.contains(b)) {
                self.sim.partition(a.as_str(), b.as_str());
            }
        }
    }

    pub fn repair(&mut self, side: &[String]) {
        for a in side {
            for b in self.names.iter().filter(|b| !side.contains(b)) {
                self.sim.repair(a.as_str(), b.as_str());
            }
        }
    }

    /// Crashes a host: its runtime and every task of its node are dropped (sockets closed).
    pub fn crash(&mut self, name: &str) {
        self.sim.crash(name);
        self.gone(name);
        self.world.lock().running.remove(name);
    }

    /// Restarts a host's software: the same name, a new process (a new generation).
    pub fn bounce(&mut self, name: &str) {
        self.sim.bounce(name);
        self.gone(name);
        self.world.lock().running.insert(name.to_owned());
    }

    /// The process is no more: it is no observer and no expected provider until it says up, and
    /// the calls it was making are dropped with it.
    fn gone(&mut self, name: &str) {
        let now = self.now();
        let mut state = self.world.lock();
        let live = state.live.remove(name);
        for what in state.calls.abandon(name, now) {
            state.flag(what);
        }
        drop(state);
        // Dropped outside the lock: a registry's drop may take locks of its own.
        drop(live);
    }

    /// Sets the latency of every link of `name`.
    pub fn slow(&mut self, name: &str, latency: Duration) {
        for b in self.names.iter().filter(|b| *b != name) {
            self.sim.set_link_latency(name, b.as_str(), latency);
        }
    }

    /// The end of a scenario: the callers stop, the calls made end (each within its budget, or
    /// invariant 5 is broken), invariant 3 is read over every run, and every violation found.
    pub fn finish(mut self, scenario: &str) -> Report {
        self.world.stop_calling();
        // Steps until no call is pending, or the last is past its budget: a few steps when
        // every call ends in milliseconds, up to a budget when one is on a connection that a
        // lost segment stalled (turmoil's TCP does not retransmit) and ends by its timeouts.
        let calling = self.now();
        loop {
            let due = self.world.lock().calls.last_due();
            match due {
                Some(due) if self.now() <= due => self.step(),
                _ => break,
            }
        }
        let now = self.now();
        let drained = now - calling;
        let mut state = self.world.lock();
        let found = state.calls.unended(now);
        let found = found.into_iter().chain(state.calls.check_runs());
        for what in found.collect::<Vec<_>>() {
            state.flag(what);
        }
        let (counts, calls) = (&state.counts, &state.calls);
        let report = Report {
            summary: format!(
                "{scenario} seed {}: {} hosts, {:?} sim; {} attempts ({} to a node some peers had declared dead), {} reads and {} writes and deposits answered ({} deposits from a record, {} retried on the process they may have run on), {} calls failed, {} writes and deposits run; {} calls ended within {NEAR:?} of their budget, the latest {:?} past it; the last calls ended in {drained:?}",
                self.seed,
                self.names.len(),
                self.sim.elapsed(),
                counts.attempts,
                counts.attempts_contested,
                counts.reads_ok,
                counts.writes_ok,
                counts.recalled,
                calls.same_process,
                counts.failed,
                calls.runs(),
                calls.near_budget,
                calls.most_over,
            ),
            violations: state.violations.clone(),
            answered: counts.reads_ok + counts.writes_ok,
        };
        drop(state);
        report
    }
}

pub struct Report {
    pub summary: String,
    pub violations: Vec<String>,
    pub answered: u64,
}
