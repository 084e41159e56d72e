//! The caller's handles, per service and function: resolved when a client is made, so that a
//! call touches only atomics (`docs/operations.md`, "Metrics", says what each counts).

use std::sync::{Arc, OnceLock};

use metrics::{Counter, Gauge, Histogram};
use tokio::time::Instant;

use super::{Outcome, Sink, names};
use crate::error::{AttemptKind, CallReport};
use crate::service::ServiceDescription;

/// The handles of one client's functions, by the function's index in its description.
pub(crate) struct ClientMeters {
    functions: Box<[FunctionMeters]>,
}

/// The handles of one function, as its callers count it.
pub(crate) struct FunctionMeters {
    sink: Arc<Sink>,
    service: &'static str,
    function: &'static str,
    calls: Counter,
    attempts: Counter,
    retries: Counter,
    hedges: Counter,
    exhausted: Counter,
    in_flight: Gauge,
    duration: Histogram,
    /// Registered on first use: a scrape lists the outcomes that happened.
    outcomes: [OnceLock<Counter>; Outcome::COUNT],
}

/// The attempts of one call, by why they were sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) attempts: u64,
    pub(crate) retries: u64,
    pub(crate) hedges: u64,
}

impl Tally {
    /// Counts one attempt sent as `kind`.
    pub(crate) fn add(&mut self, kind: AttemptKind) {
        self.attempts += 1;
        match kind {
            AttemptKind::Retry | AttemptKind::SameProcess => self.retries += 1,
            AttemptKind::Hedge => self.hedges += 1,
            AttemptKind::First => {}
        }
    }

    /// The attempts a report lists; those it left out of a long call (the middle ones) count
    /// as retries.
    pub(crate) fn of(report: &CallReport) -> Self {
        let mut tally = Self::default();
        for attempt in &report.attempts {
            tally.add(attempt.kind);
        }
        let left_out = report.attempts_left_out as u64;
        tally.attempts += left_out;
        tally.retries += left_out;
        tally
    }
}

impl ClientMeters {
    pub(crate) fn new(sink: &Arc<Sink>, description: &'static ServiceDescription) -> Self {
        let functions = description
            .functions
            .iter()
            .map(|f| FunctionMeters::new(sink, &description.name, &f.name))
            .collect();
        Self { functions }
    }

    /// Counts a call of function number `function` started; the meter it returns counts how it
    /// ends.
    pub(crate) fn start(&self, function: usize) -> Option<CallMeter<'_>> {
        let meters = self.functions.get(function)?;
        meters.calls.increment(1);
        meters.in_flight.increment(1.0);
        Some(CallMeter { meters })
    }
}

impl FunctionMeters {
    fn new(sink: &Arc<Sink>, service: &'static str, function: &'static str) -> Self {
        let labels = [("service", service), ("function", function)];
        Self {
            sink: sink.clone(),
            service,
            function,
            calls: sink.counter(&names::CALLS, &labels),
            attempts: sink.counter(&names::ATTEMPTS, &labels),
            retries: sink.counter(&names::RETRIES, &labels),
            hedges: sink.counter(&names::HEDGES, &labels),
            exhausted: sink.counter(&names::BUDGET_EXHAUSTED, &labels),
            in_flight: sink.gauge(&names::CALLS_IN_FLIGHT, &labels),
            duration: sink.histogram(&names::CALL_DURATION, &labels),
            outcomes: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    fn outcome(&self, outcome: Outcome) -> &Counter {
        self.outcomes[outcome.index()].get_or_init(|| {
            let labels = [
                ("service", self.service),
                ("function", self.function),
                ("outcome", outcome.label()),
            ];
            self.sink.counter(&names::CALL_OUTCOMES, &labels)
        })
    }
}

/// One call being counted: it leaves the in-flight gauge when dropped, as `dropped` if it had not
/// ended. One pointer: every call's future holds it, also when metrics are off (`None`); its
/// start is the instant the call keeps anyway.
pub(crate) struct CallMeter<'a> {
    meters: &'a FunctionMeters,
}

impl CallMeter<'_> {
    /// The call that started at `start` ended as `outcome` after the attempts of `tally`;
    /// `exhausted` if it failed for want of budget.
    pub(crate) fn end(self, outcome: Outcome, tally: Tally, exhausted: bool, start: Instant) {
        let m = self.meters;
        // Ended: not `dropped`.
        std::mem::forget(self);
        m.in_flight.decrement(1.0);
        m.outcome(outcome).increment(1);
        m.duration.record(start.elapsed().as_secs_f64());
        if tally.attempts > 0 {
            m.attempts.increment(tally.attempts);
        }
        if tally.retries > 0 {
            m.retries.increment(tally.retries);
        }
        if tally.hedges > 0 {
            m.hedges.increment(tally.hedges);
        }
        if exhausted {
            m.exhausted.increment(1);
        }
    }

    /// The call that started at `start` failed with the framework's error of `report`, or the
    /// provider's own.
    pub(crate) fn failed(self, outcome: Outcome, report: &CallReport, start: Instant) {
        self.end(outcome, Tally::of(report), report.budget_exhausted, start);
    }
}

impl Drop for CallMeter<'_> {
    fn drop(&mut self) {
        self.meters.in_flight.decrement(1.0);
        self.meters.outcome(Outcome::Dropped).increment(1);
    }
}
