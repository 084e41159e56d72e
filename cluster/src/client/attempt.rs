//! Steps 2 to 6 of the call path: options, the budget clock, the attempts.

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, sleep};
use tracing::Instrument;

use super::ClientCore;
use super::failure::{Failure, Verdict};
use super::pauses::Pauses;
use super::peers::{InFlight, Seen};
use super::report::{call_name, early_error, provider_ref};
use super::select::{Chosen, Miss, choose};
use super::throttle::Counted;
use crate::context::{Context, Metadata, RequestId, TraceParent};
use crate::deadline::later;
use crate::error::report::Human;
use crate::error::{
    AttemptKind, AttemptRecord, CallError, CallReport, Reason, RpcError, RpcErrorKind, ServiceError,
};
use crate::meters::Tally;
use crate::options::{CallOptions, ResolvedOptions, RetryPolicy, Source, refused};
use crate::registry::ServiceEntry;
use crate::server::record::KEEP;
use crate::service::{CodecError, Encoded};
use crate::transport::wire::Traced;
use crate::transport::{ENVELOPE_OVERHEAD, Head, Reply, Request};

/// How much of a calling handler's time a call made inside it leaves unused: a tenth of what is
/// left, at most this much. Then the call's own failure (a timeout, no provider) reaches the
/// handler, and the handler's answer its caller, before that caller gives up and sees only a
/// timeout of its own.
const RESERVE_FOR_REPLY: Duration = Duration::from_millis(100);

/// What the caller hands the call path, besides the client and the function.
pub(crate) struct Sent<'a> {
    /// The request, made with the call (`request_of`), or why its arguments do not encode.
    pub(crate) request: Result<Arc<Request>, CodecError>,
    pub(crate) overrides: &'a CallOptions,
    pub(crate) metadata: Metadata,
    pub(crate) request_id: RequestId,
    /// The context of the handler the call is made in, unless it is detached.
    pub(crate) parent: Option<Context>,
    /// The trace the call was given ([`Call::trace`](crate::Call::trace)), or a detached
    /// call's handler's (a call made in a handler otherwise finds it in `parent`). Boxed: this
    /// travels through every call's futures, and nearly always is `None`.
    pub(crate) trace: Option<Box<TraceParent>>,
    /// When the call started: its budget's clock and its meter's start.
    pub(crate) started: Instant,
    /// When its attempts may begin: `started`, or later when client layers ran first (their
    /// time is the budget's, not the first attempt's).
    pub(crate) attempts_from: Instant,
}

/// A call's reply, with what its report needs if the reply is the provider's own error.
pub(crate) struct Answer {
    /// The encoded return value.
    pub(crate) bytes: Encoded,
    provider: Arc<ServiceEntry>,
    /// The attempt that answered: when it started, why it was sent, whether it was answered
    /// from the provider's record.
    answered: (Instant, AttemptKind, bool),
    /// The attempts that failed.
    attempts: Vec<AttemptRecord>,
    attempts_left_out: usize,
    start: Instant,
    budget: Option<(Duration, Source)>,
    retries_off: bool,
    call_id: Option<u128>,
}

impl Answer {
    /// The call's report, every attempt in the order they started.
    pub(crate) fn report(mut self, client: &ClientCore, function: usize) -> CallReport {
        let (started, kind, recalled) = self.answered;
        let outcome = if recalled {
            "answered from the provider's record (it did not run again)"
        } else {
            "answered"
        };
        let answered = AttemptRecord {
            provider: provider_ref(&self.provider),
            started: started - self.start,
            elapsed: started.elapsed(),
            outcome: outcome.to_owned(),
            kind,
            answered: true,
            recalled,
        };
        CallReport::record(&mut self.attempts, &mut self.attempts_left_out, answered);
        CallReport {
            call: call_name(client, function),
            requirement: client.requirement.to_string(),
            provider: Some(provider_ref(&self.provider)),
            attempts: self.attempts,
            attempts_left_out: self.attempts_left_out,
            elapsed: self.start.elapsed(),
            budget: self.budget,
            retries_off: self.retries_off,
            call_id: self.call_id,
            budget_exhausted: false,
        }
    }

    /// The call's attempts, by why they were sent, the answered one included.
    pub(crate) fn tally(&self) -> Tally {
        let mut tally = Tally::default();
        for attempt in &self.attempts {
            tally.add(attempt.kind);
        }
        // Left out of a long call's report: retries.
        let left_out = self.attempts_left_out as u64;
        tally.attempts += left_out;
        tally.retries += left_out;
        tally.add(self.answered.1);
        tally
    }
}

/// Runs a call to completion: the reply, or why there is none.
pub(crate) async fn run(
    client: &ClientCore,
    function: usize,
    sent: Sent<'_>,
) -> Result<Answer, CallError<Infallible>> {
    // A span only when a subscriber wants it: built for nothing, it cost about 0.8 k
    // instructions per call (`docs/benchmarks.md`).
    if crate::context::traced() {
        let wanted = &client.description.functions[function];
        let span = tracing::debug_span!(target: "cluster::trace", "call", service = %client.description.name, function = %wanted.name);
        // A trace given or inherited is this span's parent, for OpenTelemetry as for us.
        let trace = sent.trace.as_deref().copied();
        if let Some(trace) = trace.or_else(|| sent.parent.as_ref().and_then(Context::trace)) {
            crate::context::set_span_parent(&span, trace);
        }
        // Boxed: only a call traced at DEBUG carries the span's wrapper.
        return Box::pin(attempts(client, function, sent).instrument(span)).await;
    }
    attempts(client, function, sent).await
}

/// A call's request, made when the call is made: its arguments are inline in it (`Encoded`), so
/// the call's future holds one pointer, not the arguments (a future is moved whole between the
/// levels of `async fn`s, and every byte in it is copied each time). Its head is written when
/// the call starts.
pub(crate) fn request_of(client: &ClientCore, function: usize, args: Encoded) -> Arc<Request> {
    Arc::new(Request {
        // Borrowed from the static description: no allocation per call.
        service: Cow::Borrowed(client.description.name.as_str()),
        function: Cow::Borrowed(client.description.functions[function].name.as_str()),
        signature: client.signatures[function],
        args,
        head: Head::default(),
        attempt: Default::default(),
    })
}

async fn attempts(
    client: &ClientCore,
    function: usize,
    sent: Sent<'_>,
) -> Result<Answer, CallError<Infallible>> {
    let wanted = &client.description.functions[function];
    {
        let Sent {
            request,
            overrides,
            metadata,
            request_id,
            parent,
            trace,
            started,
            attempts_from,
        } = sent;
        let early = |kind, detail| Err(early_error(client, function, kind, detail));
        if client
            .node
            .stopped
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            let detail = format!("node {} has shut down", client.node.info);
            return early(RpcErrorKind::NoConnection, detail);
        }
        // A zero timeout or budget of the caller's own allows no attempt: refused before any
        // lookup, rather than a call of zero-length attempts for the whole budget.
        if let Some(detail) = refused(&[
            (Source::Client, &client.defaults),
            (Source::Call, overrides),
        ]) {
            return early(RpcErrorKind::InvalidOptions, detail);
        }
        let mut request = match request {
            Ok(request) => request,
            Err(e) => {
                return early(
                    RpcErrorKind::Protocol,
                    format!("cannot encode the arguments: {e}"),
                );
            }
        };
        if let Err(e) = metadata.check() {
            return early(RpcErrorKind::TooLarge, e.to_string());
        }
        let size = request_size(request.args.len(), &metadata);
        if size > client.node.max_frame {
            let detail = format!(
                "the request is {size} bytes with its metadata; frames are limited to {} bytes",
                client.node.max_frame
            );
            return early(RpcErrorKind::TooLarge, detail);
        }
        let trace = crate::context::of_call(trace.map(|t| *t), parent.as_ref());
        let mut call = Attempts::start(
            client,
            function,
            overrides,
            parent.as_ref(),
            (started, attempts_from),
        );
        let budget_deadline = call.deadline;
        // Nothing else holds the request yet: its head is written in place.
        Arc::make_mut(&mut request).head = Head {
            caller: Some(client.node.name.clone()),
            request_id,
            reply_limit: Some(client.node.max_frame.saturating_sub(ENVELOPE_OVERHEAD) as u64),
            budget_deadline: Some(budget_deadline),
            encoded_metadata: crate::transport::wire::encode_metadata(&metadata),
            metadata,
            invalid: None,
            frame_id: None,
            // An at-most-once call's own id, under which its provider records it.
            call_id: wanted.at_most_once.then(|| fastrand::u128(..)),
            pinned: None,
            trace: trace.map(Traced::new),
        };
        call.call_id = request.head.call_id;
        let Some(parent) = parent else {
            return call.run(request, size).await;
        };
        // Made inside a handler: it ends when the handler's call does, even from a task the
        // handler spawned (where dropping the handler would not reach it).
        if parent.is_cancelled() {
            return Err(call.cancelled());
        }
        // Boxed: inline, this branch would make every call's future larger, nested or not.
        let run = Box::pin(call.run(request, size));
        let finished = tokio::select! {
            biased;
            result = run => Some(result),
            () = parent.cancelled() => None,
        };
        finished.unwrap_or_else(|| Err(call.cancelled()))
    }
}

/// The bytes a request takes in a frame: its arguments, its metadata, and the envelope.
fn request_size(args: usize, metadata: &Metadata) -> usize {
    // Each metadata entry also costs a few bytes of lengths.
    args + ENVELOPE_OVERHEAD + metadata.bytes() + 8 * metadata.len()
}

/// The state of one call across its attempts.
pub(super) struct Attempts<'a> {
    pub(super) client: &'a ClientCore,
    pub(super) function: usize,
    pub(super) overrides: &'a CallOptions,
    pub(super) start: Instant,
    // When the first attempt may start: the call's start, or later if client layers ran first.
    first_at: Instant,
    // One clock for the whole call: no attempt starts at or after it.
    pub(super) deadline: Instant,
    pub(super) retry: RetryPolicy,
    // The budget as the report states it: its length and the layer it came from.
    pub(super) budget: Option<(Duration, Source)>,
    pub(super) pauses: Pauses,
    // Until when a miss waits for a provider to register: the call's start plus
    // `wait_for_provider`, within the budget.
    pub(super) wait_until: Instant,
    // Whether a miss waited because the node's registry copy was still filling: said in the
    // `NoService` the call may end with, whichever pass through the loop ends it.
    pub(super) waited_for_filling: bool,
    // `Overloaded` refusals so far.
    pub(super) overloaded: u32,
    // Providers that failed in this call: the next attempt prefers others.
    pub(super) failed: Vec<Arc<ServiceEntry>>,
    // Nodes that refused for a wire reason: not tried again in this call.
    pub(super) excluded: Vec<String>,
    /// The last provider passed over as untrusted, and why: the call's error if no other is left.
    pub(super) untrusted: Option<(Failure, Arc<ServiceEntry>)>,
    pub(super) attempts: Vec<AttemptRecord>,
    pub(super) attempts_left_out: usize,
    // The registry copy's generation when the call last looked: a wait for a provider ends at
    // once if it has moved since.
    pub(super) seen: u64,
    // The calling handler's deadline, less the reserve for its answer.
    pub(super) caller_cut: Option<Instant>,
    // Whether the retry policy and budget are a provider's: false while none has been found.
    pub(super) settled: bool,
    pub(super) first: Option<Result<Chosen, Miss>>,
    // The options merged for that first provider, reused by its attempt.
    pub(super) first_options: Option<ResolvedOptions>,
    // Why the next attempt is sent.
    pub(super) kind: AttemptKind,
    // An at-most-once call that may have run: the provider process it may have run on, which
    // every later attempt goes to.
    pinned: Option<Pinned>,
    /// The call's own id, for an at-most-once function.
    pub(super) call_id: Option<u128>,
    /// The next retry or hedge, counted by retry throttling and not yet sent: dropped unsent
    /// (the call ends first), it is uncounted.
    pub(super) counted: Option<Counted<'a>>,
    /// The last attempt that may have run, and on which provider: a later attempt goes only to
    /// a provider that lets the function run twice (`may_run_twice`).
    pub(super) ran_on: Option<(Failure, Arc<ServiceEntry>)>,
}

/// When and where the next attempt of a call goes.
pub(super) enum Plan {
    /// At once: to this provider, or to a fresh choice.
    Now(Option<Chosen>),
    /// After this pause, to a fresh choice.
    After(Duration),
}

/// The provider an at-most-once call may have run on, and how its attempt ended there.
struct Pinned {
    entry: Arc<ServiceEntry>,
    failure: Failure,
    // When that attempt started: its record is kept for `KEEP` at most.
    since: Instant,
}

impl<'a> Attempts<'a> {
    /// The span of attempt `number` of a traced call, its id set in `request` for the provider
    /// (the attempts of one call are sequential; a hedge has its own copy of the request).
    #[inline]
    pub(super) fn attempt_span(
        &self,
        request: &Request,
        number: usize,
        entry: &ServiceEntry,
    ) -> Option<tracing::Span> {
        let traced = request.head.trace.as_deref()?;
        let (span, id) = crate::context::attempt_span(
            traced.call,
            &request.service,
            &request.function,
            number,
            &entry.node.name,
        );
        traced.span.store(id, std::sync::atomic::Ordering::Relaxed);
        Some(span)
    }

    /// Sends attempt `number` of a traced call inside its span, and says on the span how it
    /// ended. Boxed, and out of [`run`](Self::run): the span, held across the send, would grow
    /// every call's future.
    fn traced_send<'s>(
        &'s self,
        request: &Arc<Request>,
        number: usize,
        entry: &'s ServiceEntry,
        deadline: Instant,
    ) -> futures_core::future::BoxFuture<'s, Result<Reply, crate::transport::TransportError>> {
        let send = self
            .client
            .node
            .connector
            .send(&entry.node, request.clone(), deadline);
        match self.attempt_span(request, number, entry) {
            Some(span) => Box::pin(async move {
                let reply = send.instrument(span.clone()).await;
                ended(&span, &reply);
                reply
            }),
            None => Box::pin(send),
        }
    }

    fn start(
        client: &'a ClientCore,
        function: usize,
        overrides: &'a CallOptions,
        parent: Option<&Context>,
        (start, first_at): (Instant, Instant),
    ) -> Self {
        // Retry throttling counts every call (`throttle.rs`).
        client.throttle.called(start);
        let seen = client.node.registry.local_copy().generation();
        let first = choose(client, function, &[], &[], overrides);
        // The retry policy and budget are fixed once, from the first provider found, so the
        // budget cannot move under a running call. With none yet, the client's layers stand in
        // until one registers (`settle`).
        let options = match first.as_ref().ok().and_then(|c| c.options) {
            Some(routed) if overrides.is_empty() => routed,
            _ => merged(client, function, first.as_ref().ok(), overrides),
        };
        // A call inside a handler: the handler's own deadline bounds it, less a reserve for
        // the answer to travel back.
        let caller_cut = parent.map(|parent| {
            let reserve = (parent.remaining() / 10).min(RESERVE_FOR_REPLY);
            parent
                .deadline()
                .checked_sub(reserve)
                .unwrap_or(start)
                .max(start)
        });
        let (retry, deadline, budget) = policy(start, &options, caller_cut);
        let wait_until = later(start, options.wait_for_provider).min(deadline);
        Self {
            client,
            function,
            overrides,
            start,
            first_at,
            deadline,
            retry,
            budget,
            pauses: Pauses::new(&retry),
            wait_until,
            waited_for_filling: false,
            overloaded: 0,
            failed: Vec::new(),
            excluded: Vec::new(),
            untrusted: None,
            attempts: Vec::new(),
            attempts_left_out: 0,
            seen,
            caller_cut,
            settled: first.is_ok(),
            first_options: first.is_ok().then_some(options),
            first: Some(first),
            kind: AttemptKind::First,
            pinned: None,
            call_id: None,
            counted: None,
            ran_on: None,
        }
    }

    /// Runs the attempts of `request`, which takes `size` bytes in a frame.
    async fn run(
        &mut self,
        mut request: Arc<Request>,
        size: usize,
    ) -> Result<Answer, CallError<Infallible>> {
        loop {
            // Step 4: re-resolve before every attempt (the first reuses the lookup made at start).
            // An at-most-once call that may have run goes back to that process, if it is there.
            let mut chosen = if let Some(pinned) = &self.pinned {
                match pinned_choice(self.client, self.function, &pinned.entry) {
                    Some(chosen) if pinned.since.elapsed() < KEEP => chosen,
                    Some(_) => {
                        return Err(self.gone("its record is kept no longer"));
                    }
                    None => {
                        return Err(self.gone("its node has restarted as a new process"));
                    }
                }
            } else {
                match self.first.take().unwrap_or_else(|| {
                    choose(
                        self.client,
                        self.function,
                        &self.failed,
                        &self.excluded,
                        self.overrides,
                    )
                }) {
                    Ok(chosen) => chosen,
                    Err(miss) => {
                        // Every provider left was passed over as untrusted: that is the error,
                        // at once (they will not change their certificates within the call).
                        if miss.reason == Reason::WireVersion
                            && let Some((failure, entry)) = self.untrusted.take()
                        {
                            return Err(self.fail(failure, &entry));
                        }
                        self.wait_for_provider(miss).await?;
                        continue;
                    }
                }
            };
            // The first attempt of a call that found its provider at once starts when the call
            // did (after its client layers): one clock read less per call.
            let now = if self.first_options.is_some() {
                self.first_at
            } else {
                Instant::now()
            };
            if now >= self.deadline {
                return Err(self.timeout_before_attempt(Some(&chosen.entry)));
            }
            // The per-attempt timeout follows the provider actually chosen, cut to what is left.
            let options = match (self.first_options.take(), chosen.options) {
                (Some(options), _) => options,
                (None, Some(routed)) if self.overrides.is_empty() => routed,
                _ => merged(self.client, self.function, Some(&chosen), self.overrides),
            };
            // The first provider of a call that waited for one (a deploy): its own pauses and
            // budget from now on, the budget counted from the call's start.
            if !self.settled {
                self.settled = true;
                let stand_in = self.deadline;
                (self.retry, self.deadline, self.budget) =
                    policy(self.start, &options, self.caller_cut);
                self.pauses = Pauses::new(&self.retry);
                // Found after its own budget had gone by in the wait, it still gets one attempt
                // within the time the call was waiting under: the caller asked to wait so long.
                if now >= self.deadline && now < stand_in {
                    self.deadline = later(now, options.timeout).min(stand_in);
                    self.budget = self
                        .budget
                        .map(|(_, source)| (self.deadline - self.start, source));
                }
                if now >= self.deadline {
                    return Err(self.timeout_before_attempt(Some(&chosen.entry)));
                }
                // The provider is told the budget it now runs under.
                let mut settled = Request::clone(&request);
                settled.head.budget_deadline = Some(self.deadline);
                request = Arc::new(settled);
            }
            let attempt_deadline = later(now, options.timeout).min(self.deadline);
            if let Some(limit) = chosen.entry.node.max_frame
                && size > limit
            {
                // Sent anyway, the frame would break the provider's connection for every call
                // on it. It would not fit any attempt later either.
                let detail = format!(
                    "the request is {size} bytes; {} accepts frames of at most {limit} bytes",
                    chosen.entry.node
                );
                return Err(CallError::Rpc(RpcError::new(
                    RpcErrorKind::TooLarge,
                    detail,
                    self.report(Some(&chosen.entry)),
                )));
            }
            // A retry after an attempt that may have run goes only where the function may run
            // twice: a provider of another release may declare it `at_most_once`.
            if let Some(refused) = self.runs_again_on(&chosen) {
                return Err(refused);
            }
            // An idempotent function with hedging on: copies to other providers (`hedge.rs`).
            // Boxed: the common call's future does not carry a hedged call's state.
            if self.kind == AttemptKind::First
                && options.hedge.max > 0
                && self.retry.enabled
                && may_run_twice(self.client, self.function, &chosen)
            {
                let hedge = options.hedge;
                return Box::pin(self.run_hedged(chosen, request, attempt_deadline, size, hedge))
                    .await;
            }
            let number = self.attempts.len() + self.attempts_left_out + 1;
            // The generation tells a restarted node from its predecessor at the same address
            // (the simulation's invariants read it: `tests/simulation/`).
            tracing::debug!(attempt = number, node = %chosen.entry.node, generation = chosen.entry.node.generation, kind = %self.kind, "attempt");
            let addr = chosen.entry.node.addr;
            let peers = &self.client.node.peers;
            let generation = chosen.entry.node.generation;
            let peer = match chosen.peer.take() {
                Some(peer) => peer,
                None => peers.get(addr, generation),
            };
            let in_flight = InFlight::start(peer);
            // The attempts of one call are sequential: nothing else writes this meanwhile.
            let attempt = u32::try_from(number).unwrap_or(u32::MAX);
            // The provider checks the hash of its own function, which `choose` found this client
            // can call: a provider of another, compatible shape is sent its own (a copy, then).
            let expected = chosen.entry.description.functions[chosen.function].hash();
            if request.signature != expected {
                request = Arc::new(Request {
                    signature: expected,
                    ..Request::clone(&request)
                });
            }
            request
                .attempt
                .store(attempt, std::sync::atomic::Ordering::Relaxed);
            // Sent: the retry stays counted by retry throttling.
            if let Some(counted) = self.counted.take() {
                counted.sent();
            }
            let reply = if request.head.trace.is_none() {
                self.client
                    .node
                    .connector
                    .send(&chosen.entry.node, request.clone(), attempt_deadline)
                    .await
            } else {
                self.traced_send(&request, number, &chosen.entry, attempt_deadline)
                    .await
            };
            // A retry of an at-most-once call answered from the provider's record.
            let (reply, recalled) = match reply {
                Ok(Reply::Recalled(reply)) => (Ok(std::sync::Arc::unwrap_or_clone(reply)), true),
                reply => (reply, false),
            };
            let failure = match Failure::of(reply) {
                Ok(bytes) => {
                    peers.saw(in_flight.peer(), generation, Seen::Answered);
                    return Ok(self.answer(bytes, chosen.entry, (now, self.kind, recalled)));
                }
                Err(failure) => failure,
            };
            // Failure accrual: what the attempt says of the provider's health.
            peers.saw(in_flight.peer(), generation, failure.seen());
            drop(in_flight);
            tracing::debug!(attempt = number, node = %chosen.entry.node, "attempt failed: {}", failure.outcome());
            let record = self.record_of(&chosen.entry, now, failure.outcome());
            CallReport::record(&mut self.attempts, &mut self.attempts_left_out, record);
            let function = &chosen.entry.description.functions[chosen.function];
            if self.pinned.is_some() {
                // The process it may have run on, asked again: it refused (it is not that
                // process any more, it drains, nothing listens there) or says the call was
                // stopped part-way. Either way nothing else may run it. A timeout or a lost
                // connection again, or an attempt that says nothing of the process (it did
                // not answer the connect in time, its connection limit was full, or this
                // node's own writer or in-flight limit held the request): again.
                let says_nothing = matches!(
                    failure,
                    Failure::NoAnswer(_) | Failure::Busy(_) | Failure::Queued(_)
                );
                if says_nothing {
                    // Asked again, as after a timeout.
                } else if failure.never_ran() || matches!(failure, Failure::Interrupted(_)) {
                    return Err(
                        self.gone(&format!("asked again, it answered: {}", failure.outcome()))
                    );
                } else if !matches!(failure, Failure::Timeout | Failure::Lost(_)) {
                    // Any other answer is its record's final word (the handler panicked, its
                    // reply is too large for this caller or was too large to keep): asked
                    // again, it would say the same until the budget ends.
                    return Err(self.fail(failure, &chosen.entry));
                }
            } else if self.retry.enabled
                && function.at_most_once
                && request.head.call_id.is_some()
                && matches!(failure, Failure::Timeout | Failure::Lost(_))
            {
                // It may have run: every later attempt goes to this process, which keeps a
                // record of the call and answers from it (`server/record.rs`).
                let mut pinned = Request::clone(&request);
                pinned.head.pinned = Some(generation);
                request = Arc::new(pinned);
                self.pinned = Some(Pinned {
                    entry: chosen.entry.clone(),
                    failure: failure.clone(),
                    since: now,
                });
            } else if !self.retry.enabled {
                return Err(self.fail(failure, &chosen.entry));
            } else if !failure.retryable(may_run_twice(self.client, self.function, &chosen)) {
                let hint = self.not_retried(&failure, &chosen);
                return Err(match self.fail(failure, &chosen.entry) {
                    CallError::Rpc(e) => CallError::Rpc(e.with_hint(hint)),
                    other => other,
                });
            }
            match self.plan(failure, chosen.entry)? {
                Plan::Now(next) => {
                    self.first = next.map(Ok);
                    self.kind = AttemptKind::Retry;
                }
                Plan::After(pause) => {
                    sleep(pause).await;
                    self.kind = if self.pinned.is_some() {
                        AttemptKind::SameProcess
                    } else {
                        AttemptKind::Retry
                    };
                }
            }
        }
    }

    /// Steps 3 and 7 after a failed attempt that may be retried (`failure`, on `entry`): when
    /// and where the next attempt goes, or the call's error. The rules of every call, hedged or
    /// not (`hedge.rs` asks it too).
    pub(super) fn plan(
        &mut self,
        failure: Failure,
        entry: Arc<ServiceEntry>,
    ) -> Result<Plan, CallError<Infallible>> {
        if self.pinned.is_none() {
            // A provider that sheds load is sent the call again elsewhere, a bounded number of
            // times: every caller multiplying its load by its attempts is how a storm starts.
            if matches!(failure, Failure::Refused(Reason::Overloaded, _)) {
                self.overloaded += 1;
                if self.overloaded > self.retry.overloaded {
                    return Err(self.fail(failure, &entry));
                }
            }
            // A node passed over for the rest of the call is not a reason to wait: the next
            // attempt goes to another node at once.
            if failure.excludes_node() {
                if !self.excluded.contains(&entry.node.name) {
                    self.excluded.push(entry.node.name.clone());
                }
                if matches!(failure, Failure::Untrusted(..)) {
                    self.untrusted = Some((failure, entry));
                }
                return Ok(Plan::Now(None));
            }
        }
        if !self.failed.iter().any(|f| Arc::ptr_eq(f, &entry)) {
            self.failed.push(entry.clone());
        }
        if self.pinned.is_none() && !failure.never_ran() {
            self.ran_on = Some((failure.clone(), entry.clone()));
        }
        // One that never ran goes to a replica not yet tried in this call at once, if there
        // is one: nothing is gained by waiting (Finagle requeues these without backoff).
        if self.pinned.is_none()
            && failure.never_ran()
            && let Ok(next) = choose(
                self.client,
                self.function,
                &self.failed,
                &self.excluded,
                self.overrides,
            )
            && !self.failed.iter().any(|f| f.node == next.entry.node)
        {
            if let Some(throttled) = self.throttled(&failure, &entry) {
                return Err(throttled);
            }
            return Ok(Plan::Now(Some(next)));
        }
        // Step 3: a pause that does not fit before the deadline ends the call (`pauses.rs`).
        let left = self.deadline.saturating_duration_since(Instant::now());
        let Some(pause) = self.pauses.next_within(left) else {
            let mut report = self.report(Some(&entry));
            report.budget_exhausted = true;
            return Err(failed(failure, report));
        };
        // A retry to the process an at-most-once call may have run on runs nothing: it asks
        // for a reply. It is not throttled, or a storm of slow deposits would fail as "may
        // have run" calls that ran.
        if self.pinned.is_none()
            && let Some(throttled) = self.throttled(&failure, &entry)
        {
            return Err(throttled);
        }
        Ok(Plan::After(pause))
    }

    /// The call's answer, from `provider` in the attempt `answered` (its start, why it was
    /// sent, whether it came from the provider's record): its line in the report is written
    /// only if a report is asked for.
    pub(super) fn answer(
        &mut self,
        bytes: Encoded,
        provider: Arc<ServiceEntry>,
        answered: (Instant, AttemptKind, bool),
    ) -> Answer {
        Answer {
            bytes,
            provider,
            answered,
            attempts: std::mem::take(&mut self.attempts),
            attempts_left_out: self.attempts_left_out,
            start: self.start,
            budget: self.budget,
            retries_off: !self.retry.enabled,
            call_id: self.call_id,
        }
    }

    /// The report's line for an attempt that started at `now` and ended as `outcome`.
    pub(super) fn record_of(
        &self,
        entry: &ServiceEntry,
        now: Instant,
        outcome: String,
    ) -> AttemptRecord {
        AttemptRecord {
            provider: provider_ref(entry),
            started: now - self.start,
            elapsed: now.elapsed(),
            outcome,
            kind: self.kind,
            answered: false,
            recalled: false,
        }
    }

    /// The call's error when retry throttling refuses the retry after `failure`, if it does;
    /// if it lets the retry through, the retry is counted until it is sent (`counted`).
    pub(super) fn throttled(
        &mut self,
        failure: &Failure,
        entry: &ServiceEntry,
    ) -> Option<CallError<Infallible>> {
        let client: &'a ClientCore = self.client;
        if let Some(counted) = client.throttle.may_retry(Instant::now(), &self.retry) {
            self.counted = Some(counted);
            return None;
        }
        let detail = format!(
            "the attempt on {} ended as {}; a retry would take this node's retries of `{}` past {}% of its calls over {}, and {} a second (retry throttling)",
            entry.node,
            failure.outcome(),
            self.client.description.name,
            self.retry.ratio * 100.0,
            Human(self.retry.window),
            self.retry.floor,
        );
        let ran = !failure.never_ran();
        Some(CallError::Rpc(RpcError::throttled(
            detail,
            self.report(Some(entry)),
            ran,
        )))
    }

    /// The error of an at-most-once call that may have run on its pinned provider, which can
    /// no longer answer for it (`why`): it fails as that attempt did, and runs nowhere else.
    fn gone(&mut self, why: &str) -> CallError<Infallible> {
        let Some(pinned) = self.pinned.take() else {
            return self.timeout_before_attempt(None);
        };
        let said = format!(
            "it may have run on {} (generation {}) and is run nowhere else; {why}",
            pinned.entry.node, pinned.entry.node.generation
        );
        self.failed_saying(pinned.failure, &pinned.entry, said)
    }

    /// The error of a call whose last attempt that may have run (`ran_on`) would be followed
    /// by one on `chosen`, whose entry or the client's own description declares the function
    /// `at_most_once` or not `idempotent`: it fails as that attempt did, if so.
    pub(super) fn runs_again_on(&self, chosen: &Chosen) -> Option<CallError<Infallible>> {
        if self.pinned.is_some() {
            return None;
        }
        let (failure, entry) = self.ran_on.as_ref()?;
        if may_run_twice(self.client, self.function, chosen) {
            return None;
        }
        let said = format!(
            "it may have run on {}, and {} (version {}) does not declare it idempotent: it is not run again",
            entry.node, chosen.entry.node, chosen.entry.description.version
        );
        Some(self.failed_saying(failure.clone(), entry, said))
    }

    /// Why an attempt that ended as `failure` on `chosen` was not retried, when the function's
    /// declaration is all that stood in the way: it may have run (a timeout, a lost
    /// connection), it is declared neither `idempotent` by both sides nor `at_most_once` by
    /// either, and the budget had room for a pause and another attempt. `None` otherwise: a
    /// failure never retried, an at-most-once function, a budget spent.
    fn not_retried(&self, failure: &Failure, chosen: &Chosen) -> Option<String> {
        if !failure.retryable(true) {
            return None;
        }
        let own = &self.client.description.functions[self.function];
        let provider = &chosen.entry.description.functions[chosen.function];
        if own.at_most_once || provider.at_most_once {
            return None;
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        if !self.pauses.could_fit(left) {
            return None;
        }
        Some(if own.idempotent {
            format!(
                "not retried: it may have run, and the provider's entry ({} on {}) does not declare `{}` idempotent",
                chosen.entry.description.version, chosen.entry.node.name, own.name
            )
        } else {
            format!(
                "not retried: it may have run, and `{}` is declared neither #[call(idempotent)] nor #[call(at_most_once)] in its trait",
                own.name
            )
        })
    }

    /// The error of a call that ended as `failure` on `entry` did, with `said` after its detail.
    fn failed_saying(
        &self,
        failure: Failure,
        entry: &ServiceEntry,
        said: String,
    ) -> CallError<Infallible> {
        let report = self.report(Some(entry));
        match failure.verdict() {
            Verdict::Rpc(kind, detail) => {
                let detail = if detail.is_empty() {
                    said
                } else {
                    format!("{detail}; {said}")
                };
                CallError::Rpc(RpcError::new(kind, detail, report))
            }
            Verdict::Service(reason, detail) => CallError::Service(ServiceError::new(
                reason,
                format!("{detail}; {said}"),
                vec![],
                report,
            )),
        }
    }

    /// No provider fits: fail at once with the reason, unless the call waits for one
    /// (`wait_for_provider`): then wait for the registry to change (a replacement registering
    /// during a deploy) until the call's start plus that wait, within the budget.
    async fn wait_for_provider(&mut self, miss: Miss) -> Result<(), CallError<Infallible>> {
        // Providers that speak no common wire version do not change their minds: no wait.
        let worth_waiting = miss.reason != Reason::WireVersion;
        // A new node's copy may not hold the service yet: wait while it fills, as if asked.
        let filling = (miss.reason == Reason::NoService)
            .then(|| self.client.node.registry.filling_until())
            .flatten()
            .map(|until| until.min(self.deadline))
            .filter(|until| *until > self.wait_until);
        let wait_until = filling.unwrap_or(self.wait_until);
        let waits = worth_waiting && wait_until > self.start;
        if waits && Instant::now() < wait_until {
            self.waited_for_filling |= filling.is_some();
            let registry = &self.client.node.registry;
            // Subscribed before the generation is read: no change falls between the two.
            let mut changes = registry.changes();
            let now_seen = registry.local_copy().generation();
            if now_seen != self.seen {
                self.seen = now_seen;
                return Ok(());
            }
            let changed = tokio::time::timeout_at(wait_until, changes.changed()).await;
            if let Ok(Ok(())) = changed {
                self.seen = registry.local_copy().generation();
                return Ok(());
            }
        }
        let mut detail = miss.detail;
        let said = if self.waited_for_filling {
            format!(
                "waited {} while this node's registry copy filled from its seeds",
                Human(self.start.elapsed())
            )
        } else if waits {
            format!("waited {} for one to register", Human(self.start.elapsed()))
        } else if worth_waiting {
            "not waited for: the call's wait_for_provider is 0".to_owned()
        } else {
            String::new()
        };
        if !said.is_empty() {
            detail = if detail.is_empty() {
                said
            } else {
                format!("{detail}; {said}")
            };
        }
        // A name no entry has may be a slip of the keyboard: the nearest one held, if any.
        let hint = (miss.reason == Reason::NoService)
            .then(|| {
                let copy = self.client.node.registry.local_copy();
                copy.nearest_service(&self.client.description.name)
            })
            .flatten()
            .map(|near| format!("did you mean \"{near}\"?"));
        let report = self.report(None);
        Err(CallError::Service(
            ServiceError::new(miss.reason, detail, miss.available, report).with_hint(hint),
        ))
    }

    pub(super) fn timeout_before_attempt(
        &self,
        entry: Option<&ServiceEntry>,
    ) -> CallError<Infallible> {
        let detail = "the budget ran out before an attempt could start".to_owned();
        let mut report = self.report(entry);
        report.budget_exhausted = true;
        CallError::Rpc(RpcError::new(RpcErrorKind::Timeout, detail, report))
    }

    pub(super) fn fail(&self, failure: Failure, entry: &ServiceEntry) -> CallError<Infallible> {
        failed(failure, self.report(Some(entry)))
    }

    pub(super) fn report(&self, entry: Option<&ServiceEntry>) -> CallReport {
        CallReport {
            call: call_name(self.client, self.function),
            requirement: self.client.requirement.to_string(),
            provider: entry
                .map(provider_ref)
                .or_else(|| self.attempts.last().map(|a| a.provider.clone())),
            attempts: self.attempts.clone(),
            attempts_left_out: self.attempts_left_out,
            elapsed: self.start.elapsed(),
            budget: self.budget,
            retries_off: !self.retry.enabled,
            call_id: self.call_id,
            budget_exhausted: false,
        }
    }

    /// The error of a call whose calling handler ended while it ran.
    fn cancelled(&self) -> CallError<Infallible> {
        let detail =
            "the handler that made this call has ended (it finished, or its own call was given up)";
        CallError::Rpc(RpcError::new(
            RpcErrorKind::Cancelled,
            detail.to_owned(),
            self.report(None),
        ))
    }
}

/// Says on a traced attempt's span how it ended: answered, or how it failed (a copy of the
/// failure is made for it: traced calls only).
pub(super) fn ended(span: &tracing::Span, reply: &Result<Reply, crate::transport::TransportError>) {
    let answered = matches!(reply, Ok(Reply::Done(_) | Reply::Recalled(_)));
    let outcome = match answered {
        true => "answered".to_owned(),
        false => Failure::of(reply.clone()).map_or_else(|f| f.outcome(), |_| "answered".into()),
    };
    crate::context::attempt_ended(span, &outcome, answered);
}

/// The error of a call whose last attempt ended as `failure`, with its `report`.
fn failed(failure: Failure, report: CallReport) -> CallError<Infallible> {
    match failure.verdict() {
        Verdict::Service(reason, detail) => {
            CallError::Service(ServiceError::new(reason, detail, vec![], report))
        }
        Verdict::Rpc(kind, detail) => CallError::Rpc(RpcError::new(kind, detail, report)),
    }
}

/// Whether the function of `chosen` may run more than once: be sent again after it may have run,
/// or be hedged. Only if the provider's entry and the client's own description both declare it
/// `idempotent`, and neither `at_most_once`: during a rolling deploy the two may disagree (an
/// old provider still says `idempotent` of a function the client's release found is not), and
/// the safe side wins. A remote entry may say anything, both flags included.
pub(super) fn may_run_twice(client: &ClientCore, function: usize, chosen: &Chosen) -> bool {
    let own = &client.description.functions[function];
    let provider = &chosen.entry.description.functions[chosen.function];
    own.idempotent && !own.at_most_once && provider.idempotent && !provider.at_most_once
}

/// The provider a pinned attempt goes to: its entry as the registry holds it now; or, if the
/// registry no longer lists that process (it stalled past `dead_after`, or is leaving), the entry
/// the call had: the process may still be there, and only it can answer for the call. A newer
/// generation of the node in the registry means it restarted: `None`, and the call is over.
fn pinned_choice(
    client: &ClientCore,
    function: usize,
    pinned: &Arc<ServiceEntry>,
) -> Option<Chosen> {
    let wanted = &client.description.functions[function];
    let entries = client
        .node
        .registry
        .local_copy()
        .lookup(&client.description.name);
    let same_node = |e: &&Arc<ServiceEntry>| e.node.name == pinned.node.name;
    if entries
        .iter()
        .filter(same_node)
        .any(|e| e.node.generation > pinned.node.generation)
    {
        return None;
    }
    let entry = entries
        .iter()
        .filter(same_node)
        .find(|e| e.node.generation == pinned.node.generation)
        .unwrap_or(pinned);
    let (index, _) = entry.description.find_compatible(wanted)?;
    Some(Chosen {
        entry: entry.clone(),
        function: index,
        peer: None,
        options: None,
    })
}

/// The retry policy, the deadline and the budget (its length and source) of a call that started
/// at `start` under `options`, within the calling handler's `caller_cut` if there is one.
fn policy(
    start: Instant,
    options: &ResolvedOptions,
    caller_cut: Option<Instant>,
) -> (RetryPolicy, Instant, Option<(Duration, Source)>) {
    let retry = options.retry;
    let own = if retry.enabled {
        retry.budget
    } else {
        options.timeout
    };
    let deadline = later(start, own);
    let budget = retry
        .enabled
        .then_some((retry.budget, options.budget_source()));
    match caller_cut {
        Some(cut) if cut < deadline => (retry, cut, Some((cut - start, Source::Caller))),
        _ => (retry, deadline, budget),
    }
}

/// Step 2: library default < provider service < provider function < client < this call. With
/// no provider known, the service's and function's options as the client's own build declares
/// them stand in for the provider's.
pub(super) fn merged(
    client: &ClientCore,
    function: usize,
    chosen: Option<&Chosen>,
    overrides: &CallOptions,
) -> ResolvedOptions {
    match chosen {
        Some(c) => ResolvedOptions::merge(&[
            (Source::ProviderService, &c.entry.description.options),
            (
                Source::ProviderFunction,
                &c.entry.description.functions[c.function].options,
            ),
            (Source::Client, &client.defaults),
            (Source::Call, overrides),
        ]),
        None => ResolvedOptions::merge(&[
            (Source::DeclaredService, &client.description.options),
            (
                Source::DeclaredFunction,
                &client.description.functions[function].options,
            ),
            (Source::Client, &client.defaults),
            (Source::Call, overrides),
        ]),
    }
}
