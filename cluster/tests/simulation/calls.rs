//! The callers' side: steady calls, each recorded from its start to its end, and the providers'
//! runs of writes and deposits; invariants 3 (at most once) and 5 (within the budget) read from
//! them.
//!
//! A call's start and end are read on its caller's clock, `tokio::time::Instant`, which turmoil
//! moves in sim time: the figures are the same on any machine.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use cluster::{AttemptKind, Call, CallError, CallReport, Node};
use tokio::time::Instant;

use crate::host::{KvClient, RanOn};
use crate::world::{Provider, State, World};

/// The budget of a whole call that `kv` declares (`retry(budget = "4s")` in `host.rs`).
pub const SERVICE_BUDGET: Duration = Duration::from_secs(4);
/// The budget every other read sets on itself (`Call::budget`): shorter than two attempts of
/// the service's 1 s timeout, so a read's last attempt is cut to what is left of it.
pub const CALL_BUDGET: Duration = Duration::from_millis(1500);
/// How far past its budget a call may end. The call path's deadline is a tokio timer, and
/// tokio's timers have a resolution of one millisecond: a deadline fires at the first whole
/// millisecond at or after it. Nothing else lies between the deadline and the caller's
/// `await` in sim time (a host's clock moves only while all its tasks wait).
pub const ALLOWANCE: Duration = Duration::from_millis(1);
/// A call that ended this close to its budget ran to the end of it: counted, to show that the
/// runs put invariant 5 to the test.
pub const NEAR: Duration = Duration::from_millis(100);

/// What a call calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
    Deposit,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Deposit => "deposit",
        })
    }
}

/// A call that has started and not ended.
struct Pending {
    host: String,
    kind: Kind,
    budget: Duration,
    /// Sim time at its start.
    at: Duration,
}

impl Pending {
    /// The sim time by which it must have ended.
    fn due(&self) -> Duration {
        self.at + self.budget + ALLOWANCE
    }
}

/// One run of a write or a deposit, as its provider saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub on: Provider,
    /// The call id the provider read from its context (`Context::call_id`).
    pub call_id: Option<u128>,
}

/// Every call's record and every run, by the call's number (unique in the run).
#[derive(Default)]
pub struct Ledger {
    pending: BTreeMap<u64, Pending>,
    /// Each write's and deposit's runs, by its number.
    runs: HashMap<u64, Vec<Run>>,
    /// Each deposit's runs, by the call id its provider read.
    by_call_id: HashMap<u128, Vec<(u64, Provider)>>,
    /// Calls that ended within `NEAR` of their budget, or past it.
    pub near_budget: u64,
    /// The most any call ended past its budget.
    pub most_over: Duration,
    /// Deposits with a retry to the process they may have run on.
    pub same_process: u64,
}

impl Ledger {
    /// A run of a write or a deposit, recorded when it starts: one cut off half way may have
    /// had its effect.
    pub fn ran(&mut self, kind: Kind, id: u64, run: Run) {
        if kind == Kind::Deposit
            && let Some(call_id) = run.call_id
        {
            self.by_call_id
                .entry(call_id)
                .or_default()
                .push((id, run.on.clone()));
        }
        self.runs.entry(id).or_default().push(run);
    }

    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// The calls of `host`'s process, dropped with it: those already past their budget had
    /// not ended in time (invariant 5).
    pub fn abandon(&mut self, host: &str, now: Duration) -> Vec<String> {
        let gone: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.host == host)
            .map(|(id, _)| *id)
            .collect();
        let mut found = Vec::new();
        for id in gone {
            let Some(p) = self.pending.remove(&id) else {
                continue;
            };
            if p.due() < now {
                found.push(never_ended(id, &p, now));
            }
        }
        found
    }

    /// When the last call still pending is due; `None` when none is.
    pub fn last_due(&self) -> Option<Duration> {
        self.pending.values().map(Pending::due).max()
    }

    /// Invariant 5 at the end of a run: every call still pending and due by `now`.
    pub fn unended(&self, now: Duration) -> Vec<String> {
        self.pending
            .iter()
            .filter(|(_, p)| p.due() < now)
            .map(|(id, p)| never_ended(*id, p, now))
            .collect()
    }

    /// Invariant 3 over every run: no write or deposit ran twice, no deposit's call id ran
    /// twice, and every deposit ran with a call id.
    pub fn check_runs(&self) -> Vec<String> {
        let mut found = Vec::new();
        for (id, runs) in &self.runs {
            if runs.len() > 1 {
                found.push(format!(
                    "invariant 3: write or deposit {id} ran {} times: {runs:?}",
                    runs.len()
                ));
            }
        }
        for (call_id, runs) in &self.by_call_id {
            if runs.len() > 1 {
                found.push(format!(
                    "invariant 3: call id {call_id:032x} ran {} times: {runs:?}",
                    runs.len()
                ));
            }
        }
        found.sort();
        found
    }
}

fn never_ended(id: u64, p: &Pending, now: Duration) -> String {
    format!(
        "invariant 5: {} {id} from {} started at {:?} with a budget of {:?} and had not ended at {now:?}",
        p.kind, p.host, p.at, p.budget
    )
}

/// Every 100 ms a read, a write and a deposit, each in its own task so that a slow one holds
/// no other; every other read with a budget of its own. Stops when the driver stops calling.
pub async fn calls(node: Node, host: String, world: Arc<World>) {
    let client = KvClient::new(&node);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    for round in 0u64.. {
        tick.tick().await;
        if world.stopped() {
            return;
        }
        for kind in [Kind::Read, Kind::Write, Kind::Deposit] {
            let id = world.next_id();
            let (call, budget) = match kind {
                Kind::Read if round % 2 == 1 => (client.read(id).budget(CALL_BUDGET), CALL_BUDGET),
                Kind::Read => (client.read(id), SERVICE_BUDGET),
                Kind::Write => (client.write(id), SERVICE_BUDGET),
                Kind::Deposit => (client.deposit(id), SERVICE_BUDGET),
            };
            let pending = Pending {
                host: host.clone(),
                kind,
                budget,
                at: Duration::ZERO,
            };
            tokio::spawn(timed(world.clone(), id, pending, call));
        }
    }
}

/// One call, from its start to its end.
async fn timed(world: Arc<World>, id: u64, mut pending: Pending, call: Call<RanOn, Infallible>) {
    // Both clocks read at once: the sim's for the driver, the host's for the call's length.
    pending.at = turmoil::sim_elapsed().unwrap_or_default();
    let start = Instant::now();
    world.lock().calls.pending.insert(id, pending);
    let outcome = call.reported().await;
    let took = start.elapsed();
    world.lock().ended(id, took, outcome);
}

impl State {
    /// A call's end: counted, and read against invariants 3 and 5.
    fn ended(
        &mut self,
        id: u64,
        took: Duration,
        outcome: Result<(RanOn, CallReport), CallError<Infallible>>,
    ) {
        let Some(p) = self.calls.pending.remove(&id) else {
            return;
        };
        let report = match &outcome {
            Ok((_, report)) => report,
            Err(e) => e.report(),
        };
        let mut found = Vec::new();
        // Invariant 5: within the budget it was given, which is also the one it ran under.
        if took + NEAR >= p.budget {
            self.calls.near_budget += 1;
        }
        self.calls.most_over = self.calls.most_over.max(took.saturating_sub(p.budget));
        let told = match &outcome {
            Ok((ran, report)) => format!(
                "answered by {} generation {}: {report}",
                ran.node, ran.generation
            ),
            Err(e) => format!("failed: {e}"),
        };
        if took > p.budget + ALLOWANCE {
            found.push(format!(
                "invariant 5: {} {id} from {} started at {:?} with a budget of {:?} ended after {took:?}, {ALLOWANCE:?} allowed past it; {told}",
                p.kind, p.host, p.at, p.budget
            ));
        }
        if let Some((budget, source)) = report.budget
            && budget != p.budget
        {
            found.push(format!(
                "invariant 5: {} {id} from {} was given a budget of {:?} and ran under {budget:?} (set by {source}); {told}",
                p.kind, p.host, p.budget
            ));
        }
        if p.kind == Kind::Deposit
            && report
                .attempts
                .iter()
                .any(|a| a.kind == AttemptKind::SameProcess)
        {
            self.calls.same_process += 1;
        }
        match (&outcome, p.kind) {
            (Ok(_), Kind::Read) => self.counts.reads_ok += 1,
            (Ok((ran, report)), kind) => {
                self.counts.writes_ok += 1;
                self.counts.recalled += u64::from(report.attempts.iter().any(|a| a.recalled));
                // Invariant 3: a write or deposit that returned ran exactly once, where it said
                // (a deposit answered from a record: where it first ran), under the call id its
                // report gives.
                let runs = self.calls.runs.get(&id).map_or(&[][..], Vec::as_slice);
                let want = Run {
                    on: (ran.node.clone(), ran.generation),
                    call_id: report.call_id,
                };
                if runs != [want] || (kind == Kind::Deposit) != report.call_id.is_some() {
                    found.push(format!(
                        "invariant 3: {kind} {id} answered from {ran:?} (call id {:?}) but its runs were {runs:?}",
                        report.call_id
                    ));
                }
            }
            (Err(_), _) => self.counts.failed += 1,
        }
        for what in found {
            self.flag(what);
        }
    }
}
