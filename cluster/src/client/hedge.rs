//! Step 6 for an idempotent function with hedging on: copies of the call to other providers,
//! the first answer wins (gRPC's hedging policy, Finagle's backup requests).
//!
//! 1. The first attempt goes as any first attempt does (`attempt.rs` chose its provider).
//! 2. Each `hedge.after` without an answer, another copy goes to a provider the call has not
//!    tried yet, up to `hedge.max` copies; each one must pass retry throttling (`throttle.rs`),
//!    which counts it only once a provider that can take it is found: one whose frame the
//!    request fits, and whose entry lets the function run twice (`may_run_twice`). With no
//!    untried provider left, or throttled, no more copies are sent.
//! 3. An attempt that fails while others are still out brings the next copy forward at once
//!    (it is not waited for); one whose failure ends the call (a bad request, a panic) ends it.
//! 4. The first answer wins: the other attempts are dropped, which cancels them at their
//!    providers as a timeout does, and the report says so.
//! 5. When every attempt out has failed, the call goes on as any call does (`Attempts::plan`):
//!    at once to a replica not yet tried if the last never ran, else after a pause; an
//!    `Overloaded` refusal only `overloaded_retries` times; within the one budget clock.

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use tokio::time::{Instant, sleep_until};
use tracing::Instrument;

use super::ClientCore;
use super::attempt::{Answer, Attempts, Plan, may_run_twice};
use super::failure::Failure;
use super::peers::{InFlight, Seen};
use super::select::{Chosen, choose};
use crate::deadline::later;
use crate::error::{AttemptKind, CallError, CallReport, Reason, RpcError, RpcErrorKind};
use crate::options::HedgePolicy;
use crate::registry::ServiceEntry;
use crate::service::Encoded;
use crate::transport::{Reply, Request};

/// An attempt sent: its provider, when it started, why it was sent, and whether that provider
/// lets the function run twice (`may_run_twice`); `None` once it has ended.
type Slot = Option<(Arc<ServiceEntry>, Instant, AttemptKind, bool)>;

/// One attempt out, as it ended.
struct Ended {
    slot: usize,
    entry: Arc<ServiceEntry>,
    result: Result<Encoded, Failure>,
    recalled: bool,
}

type Out<'a> = Pin<Box<dyn Future<Output = Ended> + Send + 'a>>;

/// The attempts out, raced: a few at most (`hedge.max` copies and the first), so each wake-up
/// of the call polls them all. Dropping it drops every attempt still out, which cancels it.
#[derive(Default)]
struct Racing<'a>(Vec<Out<'a>>);

impl<'a> Racing<'a> {
    fn push(&mut self, attempt: Out<'a>) {
        self.0.push(attempt);
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The next attempt to end, taken out of the race; `None` at once if none is out.
    fn next(&mut self) -> impl Future<Output = Option<Ended>> + '_ {
        poll_fn(|cx| {
            if self.0.is_empty() {
                return Poll::Ready(None);
            }
            for i in 0..self.0.len() {
                if let Poll::Ready(ended) = self.0[i].as_mut().poll(cx) {
                    // The order of those left does not matter: each says its slot.
                    drop(self.0.swap_remove(i));
                    return Poll::Ready(Some(ended));
                }
            }
            Poll::Pending
        })
    }
}

impl<'a> Attempts<'a> {
    /// Runs a hedged call from its first attempt, to `first` until `first_deadline`.
    pub(super) async fn run_hedged(
        &mut self,
        first: Chosen,
        request: Arc<Request>,
        first_deadline: Instant,
        size: usize,
        hedge: HedgePolicy,
    ) -> Result<Answer, CallError<Infallible>> {
        let mut out = Racing::default();
        // Each attempt sent, numbered after the attempts made before this one.
        let mut slots: Vec<Slot> = Vec::new();
        let numbered = self.attempts.len() + self.attempts_left_out;
        // Every provider tried in this call: a copy goes to another.
        let mut tried: Vec<Arc<ServiceEntry>> = Vec::new();
        let mut hedges_left = hedge.max;
        let now = Instant::now();
        tried.push(first.entry.clone());
        out.push(self.send(
            &mut slots,
            numbered,
            first,
            request.clone(),
            now,
            first_deadline,
            AttemptKind::First,
        ));
        let mut next_hedge = later(now, hedge.after);
        loop {
            // A copy runs beside the attempts out: only while each of their providers lets the
            // function run twice (a retry may have gone to one of another release).
            let hedging = hedges_left > 0
                && !out.is_empty()
                && slots.iter().flatten().all(|(.., twice)| *twice);
            tokio::select! {
                Some(ended) = out.next() => {
                    let Some((entry, started, kind, twice)) = slots[ended.slot].take() else {
                        continue;
                    };
                    let failure = match ended.result {
                        Ok(bytes) => {
                            self.record_cancelled(&slots, "cancelled: another attempt answered first");
                            return Ok(self.answer(bytes, entry, (started, kind, ended.recalled)));
                        }
                        Err(failure) => failure,
                    };
                    self.kind = kind;
                    let record = self.record_of(&ended.entry, started, failure.outcome());
                    CallReport::record(&mut self.attempts, &mut self.attempts_left_out, record);
                    if !failure.retryable(twice) {
                        self.record_cancelled(&slots, "cancelled: the call ended first");
                        return Err(self.fail(failure, &entry));
                    }
                    if !out.is_empty() {
                        if !failure.never_ran() {
                            self.ran_on = Some((failure.clone(), entry.clone()));
                        }
                        // Others are still out: the next copy now, not after its delay; but a
                        // provider that sheds load stops the copies past `overloaded_retries`.
                        if matches!(failure, Failure::Refused(Reason::Overloaded, _)) {
                            self.overloaded += 1;
                            if self.overloaded > self.retry.overloaded {
                                hedges_left = 0;
                            }
                        }
                        if failure.excludes_node() && !self.excluded.contains(&entry.node.name) {
                            self.excluded.push(entry.node.name.clone());
                        }
                        if !self.failed.iter().any(|f| Arc::ptr_eq(f, &entry)) {
                            self.failed.push(entry.clone());
                        }
                        next_hedge = Instant::now();
                        continue;
                    }
                    // None left out: what any call does next (`Attempts::plan`): another
                    // replica at once if this one never ran it, else a pause first.
                    let next = match self.plan(failure.clone(), entry.clone())? {
                        Plan::Now(next) => next,
                        Plan::After(pause) => {
                            tokio::time::sleep(pause).await;
                            None
                        }
                    };
                    let chosen = match next {
                        Some(chosen) => chosen,
                        None => match choose(self.client, self.function, &self.failed, &self.excluded, self.overrides) {
                            Ok(chosen) => chosen,
                            Err(_) => return Err(self.fail(failure, &entry)),
                        },
                    };
                    if let Some(refused) = self.runs_again_on(&chosen) {
                        return Err(refused);
                    }
                    let now = Instant::now();
                    match self.prepared(&chosen, &request, size, now) {
                        Some((copy, deadline)) => {
                            // Sent: the retry stays counted by retry throttling.
                            if let Some(counted) = self.counted.take() {
                                counted.sent();
                            }
                            tried.push(chosen.entry.clone());
                            out.push(self.send(&mut slots, numbered, chosen, copy, now, deadline, AttemptKind::Retry));
                            next_hedge = later(now, hedge.after);
                        }
                        None => return Err(self.fail(failure, &entry)),
                    }
                }
                () = sleep_until(next_hedge), if hedging => {
                    let now = Instant::now();
                    next_hedge = later(now, hedge.after);
                    // The next provider not yet tried that can take a copy. One that cannot (its
                    // frame is too small for the request, or its entry does not let the function
                    // run twice) is passed over for the rest of the call; nothing is counted for it.
                    let next = loop {
                        let Some(chosen) = choose(self.client, self.function, &tried, &self.excluded, self.overrides)
                            .ok()
                            .filter(|c| !tried.iter().any(|t| t.node == c.entry.node))
                        else {
                            break None;
                        };
                        tried.push(chosen.entry.clone());
                        if may_run_twice(self.client, self.function, &chosen)
                            && let Some(prepared) = self.prepared(&chosen, &request, size, now)
                        {
                            break Some((chosen, prepared));
                        }
                    };
                    // No provider left to hedge to, or throttled: the attempts out are all.
                    let Some((chosen, (copy, deadline))) = next else {
                        hedges_left = 0;
                        continue;
                    };
                    // Counted only now that it is sure to be sent.
                    let client: &'a ClientCore = self.client;
                    let Some(counted) = client.throttle.may_retry(now, &self.retry) else {
                        hedges_left = 0;
                        continue;
                    };
                    counted.sent();
                    hedges_left -= 1;
                    out.push(self.send(&mut slots, numbered, chosen, copy, now, deadline, AttemptKind::Hedge));
                }
                () = sleep_until(self.deadline) => {
                    self.record_cancelled(&slots, "timeout: the budget ran out");
                    let entry = tried.last().cloned();
                    let detail = "the budget ran out with every attempt still out".to_owned();
                    return Err(CallError::Rpc(RpcError::new(
                        RpcErrorKind::Timeout,
                        detail,
                        self.report(entry.as_deref()),
                    )));
                }
            }
        }
    }

    /// The request for another attempt to `chosen`, numbered and with its signature, and the
    /// attempt's deadline; `None` if the provider cannot take it (its frame limit) or the
    /// budget is over.
    fn prepared(
        &self,
        chosen: &Chosen,
        request: &Request,
        size: usize,
        now: Instant,
    ) -> Option<(Arc<Request>, Instant)> {
        if now >= self.deadline
            || chosen
                .entry
                .node
                .max_frame
                .is_some_and(|limit| size > limit)
        {
            return None;
        }
        let options =
            super::attempt::merged(self.client, self.function, Some(chosen), self.overrides);
        let deadline = later(now, options.timeout).min(self.deadline);
        // A copy per attempt: attempts out at once cannot share one attempt number.
        let copy = Request {
            signature: chosen.entry.description.functions[chosen.function].hash(),
            ..Request::clone(request)
        };
        Some((Arc::new(copy), deadline))
    }

    /// Sends one attempt, numbered after the `numbered` attempts made before the hedged one and
    /// those it sent; it reports how it ended in its slot.
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        slots: &mut Vec<Slot>,
        numbered: usize,
        chosen: Chosen,
        request: Arc<Request>,
        now: Instant,
        deadline: Instant,
        kind: AttemptKind,
    ) -> Out<'a> {
        let slot = slots.len();
        let twice = may_run_twice(self.client, self.function, &chosen);
        slots.push(Some((chosen.entry.clone(), now, kind, twice)));
        let number = numbered + slot + 1;
        request.attempt.store(
            u32::try_from(number).unwrap_or(u32::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
        let client: &'a ClientCore = self.client;
        let span = self.attempt_span(&request, number, &chosen.entry);
        Box::pin(async move {
            let entry = chosen.entry;
            tracing::debug!(attempt = number, node = %entry.node, generation = entry.node.generation, %kind, "attempt");
            let peers = &client.node.peers;
            let generation = entry.node.generation;
            let in_flight = InFlight::start(
                chosen
                    .peer
                    .unwrap_or_else(|| peers.get(entry.node.addr, generation)),
            );
            let send = client.node.connector.send(&entry.node, request, deadline);
            let reply = match &span {
                Some(span) => {
                    let reply = send.instrument(span.clone()).await;
                    super::attempt::ended(span, &reply);
                    reply
                }
                None => send.await,
            };
            let (reply, recalled) = match reply {
                Ok(Reply::Recalled(reply)) => (Ok(std::sync::Arc::unwrap_or_clone(reply)), true),
                reply => (reply, false),
            };
            let result = Failure::of(reply);
            let seen = match &result {
                Ok(_) => Seen::Answered,
                Err(failure) => failure.seen(),
            };
            peers.saw(in_flight.peer(), generation, seen);
            Ended {
                slot,
                entry,
                result,
                recalled,
            }
        })
    }

    /// Records the attempts still out as ended by `why`: another answered, or the call ended.
    fn record_cancelled(&mut self, slots: &[Slot], why: &str) {
        for (entry, started, kind, _) in slots.iter().flatten() {
            self.kind = *kind;
            let record = self.record_of(entry, *started, why.to_owned());
            CallReport::record(&mut self.attempts, &mut self.attempts_left_out, record);
        }
    }
}
