use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::admission::{Admission, CallerCount, Permit};
use super::describe;
use super::record::{self, Begin, Record};
use super::{DispatchError, DispatchFuture, Provide};

use crate::catch_unwind::CatchUnwind;
use crate::context::{Context, Received};
use crate::error::Reason;
use crate::fast_map::FastMap;
use crate::layer::{ProviderLayer, Served};
use crate::meters::{Meters, Served as MeteredServed, ServiceMeters};
use crate::options::{ResolvedOptions, Source};
use crate::service::signature_hash;
use crate::transport::{Reply, Request};

/// Routes requests to the services a node hosts.
pub(crate) struct Dispatcher {
    services: RwLock<Names<Arc<Hosted>>>,
    max_reply: usize,
    pub(crate) admission: Arc<Admission>,
    layers: Arc<[Arc<dyn ProviderLayer>]>,
    /// What the describe request answers; set once the node knows its own address.
    pub(crate) describe: OnceLock<describe::Source>,
    /// The node's generation, once it has started: an attempt pinned to another is refused.
    pub(crate) generation: OnceLock<u64>,
    /// The calls of `at_most_once` functions (`record.rs`).
    record: Arc<Record>,
    /// Cancelled when the node stops: see [`Dispatcher::stop_detached`].
    stop: CancellationToken,
    /// The node's metrics, if on: set before any service is hosted.
    pub(crate) meters: OnceLock<Arc<Meters>>,
}

struct Hosted {
    provider: Arc<dyn Provide>,
    // name -> (index, shape hash, signature text hash): a request names the function and the
    // hash of the shape it checked; a build from before shapes sends the text's hash.
    functions: Names<(usize, u64, u64)>,
    // By index: the function's name in the record and its declared budget, if it is
    // `at_most_once`.
    at_most_once: Vec<Option<AtMostOnce>>,
    // Its functions' metrics, by index, if the node records them.
    meters: Option<ServiceMeters>,
}

/// What the record needs of an `at_most_once` function.
#[derive(Debug)]
struct AtMostOnce {
    /// `service.function`: part of the record's key.
    function: Arc<str>,
    /// The budget the provider declares for it: its handler runs no longer than this, whatever
    /// budget a caller asks for (a caller that asks for hours and goes away does not hold a
    /// place in admission for hours).
    budget: Duration,
}

/// A map from names, read on every request; filled only by the node itself.
type Names<V> = FastMap<String, V>;

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.read().keys().cloned().collect();
        f.debug_struct("Dispatcher")
            .field("services", &names)
            .finish()
    }
}

impl Dispatcher {
    /// A dispatcher whose encoded replies may be at most `max_reply` bytes: a larger one is
    /// answered with an error instead, rather than breaking the connection for every call on it.
    /// At most `max_concurrent` calls run at once; more are refused before they run.
    /// Provider `layers` see every admitted request before its handler runs.
    pub(crate) fn new(
        max_reply: usize,
        max_concurrent: usize,
        layers: Arc<[Arc<dyn ProviderLayer>]>,
    ) -> Self {
        Self {
            services: RwLock::default(),
            max_reply,
            admission: Arc::new(Admission::new(max_concurrent)),
            layers,
            describe: OnceLock::new(),
            generation: OnceLock::new(),
            record: Arc::default(),
            stop: CancellationToken::new(),
            meters: OnceLock::new(),
        }
    }

    /// Stops the handlers of at-most-once calls that run on after their attempts: a killed
    /// node's at once, a shut-down node's at its drain timeout (`node/shutdown.rs`), as the
    /// other handlers are cut off with their connections.
    pub(crate) fn stop_detached(&self) {
        self.stop.cancel();
    }

    /// Hosts a provider, replacing one of the same service name.
    pub(crate) fn host(&self, provider: Arc<dyn Provide>) {
        let description = provider.description();
        // Requests naming them then borrow these names instead of allocating them.
        crate::transport::wire::names::learn(&description.name);
        for function in &description.functions {
            crate::transport::wire::names::learn(&function.name);
        }
        let functions = description
            .functions
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.clone(), (i, f.hash(), signature_hash(&f.signature))))
            .collect();
        let at_most_once = description
            .functions
            .iter()
            .map(|f| {
                f.at_most_once.then(|| AtMostOnce {
                    function: Arc::from(format!("{}.{}", description.name, f.name)),
                    budget: ResolvedOptions::merge(&[
                        (Source::ProviderService, &description.options),
                        (Source::ProviderFunction, &f.options),
                    ])
                    .retry
                    .budget,
                })
            })
            .collect();
        let meters = self.meters.get().map(|m| m.service(description));
        let hosted = Arc::new(Hosted {
            provider,
            functions,
            at_most_once,
            meters,
        });
        self.write().insert(description.name.clone(), hosted);
    }

    /// Stops hosting a service; calls already running finish.
    pub(crate) fn unhost(&self, service: &str) {
        self.write().remove(service);
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Names<Arc<Hosted>>> {
        self.services.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Names<Arc<Hosted>>> {
        self.services.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs one attempt, which the transport stops at `deadline`. Never panics, whatever the request or the provider do.
    ///
    /// The checks run, the call is admitted and the handler's future is built when this is
    /// called; the future it returns holds only what running the handler needs. It lives in
    /// every request's task, and a task past about 1 KiB no longer fits the allocator's
    /// per-thread cache.
    ///
    /// `caller` is the count of calls its caller has running, which its connection holds
    /// ([`Admission::caller`]).
    pub(crate) fn handle<'a>(
        &'a self,
        request: Arc<Request>,
        deadline: Instant,
        caller: &'a CallerCount,
    ) -> impl Future<Output = Reply> + Send + 'a {
        let reply_limit = request.head.reply_limit.map_or(self.max_reply, |theirs| {
            usize::try_from(theirs)
                .unwrap_or(usize::MAX)
                .min(self.max_reply)
        });
        let started = self.start(request, deadline, caller);
        async move {
            let Started {
                run,
                context,
                _permit,
                recording,
            } = match started {
                Ok(started) => started,
                Err(Early::Reply(refused)) => return fit(refused, reply_limit),
                // A retry of an at-most-once call: answered from the record, never run again.
                Err(Early::Recall(recall)) => {
                    return fit(self.record.recall(recall, deadline).await, reply_limit);
                }
            };
            let max_reply = self.max_reply;
            let Some(recording) = recording else {
                return served(run, context, reply_limit, max_reply, &self.layers).await;
            };
            // An at-most-once call runs on in a task of its own when its attempt is given up
            // (a timeout, a lost connection), holding its place in admission, until it ends,
            // its deadline passes or its node stops (`Dispatcher::stop_detached`): its retry
            // then gets its reply instead of "it may have run". Its first attempt gets the
            // reply itself, whether or not the record had room to keep it.
            let permit = _permit.detach(self.admission.clone());
            let layers = self.layers.clone();
            let until = recording.expires().min(context.deadline());
            let stop = self.stop.clone();
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                let _permit = permit;
                let serving = served(run, context, reply_limit, max_reply, &layers);
                tokio::select! {
                    biased;
                    () = stop.cancelled() => {}
                    reply = tokio::time::timeout_at(until, serving) => {
                        if let Ok(reply) = reply {
                            // Kept before it is sent: a retry that races the reply finds it.
                            recording.finish(&reply);
                            let _ = tx.send(reply);
                        }
                    }
                }
            });
            match tokio::time::timeout_at(deadline, rx).await {
                Ok(Ok(reply)) => reply,
                Ok(Err(_)) => record::interrupted(),
                Err(_) => Reply::Expired,
            }
        }
    }

    /// Checks a request, admits it and builds its handler's future; or refuses it, or finds it
    /// in the record of at-most-once calls.
    fn start<'a>(
        &'a self,
        request: Arc<Request>,
        deadline: Instant,
        caller: &'a CallerCount,
    ) -> Result<Started<'a>, Early> {
        let request = Arc::unwrap_or_clone(request);
        // Its caller has given up already (this attempt's time, or the whole call's budget, is
        // over): running it would be work nobody reads.
        let now = Instant::now();
        if deadline <= now || request.head.budget_deadline.is_some_and(|end| end <= now) {
            return Err(Early::Reply(Reply::Expired));
        }
        // A retry of an at-most-once call that may have run on an earlier process at this
        // address: only that process's record can answer it.
        if let Some(pinned) = request.head.pinned
            && self.generation.get().is_some_and(|own| *own != pinned)
        {
            let detail = format!(
                "the attempt was for generation {pinned} of this node, which is gone: this is generation {}",
                self.generation.get().copied().unwrap_or_default()
            );
            return Err(Early::Reply(refuse(Reason::NoService, detail)));
        }
        if let Some(problem) = &request.head.invalid {
            return Err(Early::Reply(refuse(
                Reason::BadArguments,
                format!("a header of the request cannot be read: {problem}"),
            )));
        }
        if request.service == describe::SERVICE
            && let Some(source) = self.describe.get()
        {
            let limit = request.head.reply_limit.map_or(self.max_reply, |theirs| {
                usize::try_from(theirs).map_or(self.max_reply, |t| t.min(self.max_reply))
            });
            return Err(Early::Reply(
                source.answer(self.admission.is_draining(), limit),
            ));
        }
        let Some(hosted) = self.read().get(request.service.as_ref()).cloned() else {
            return Err(Early::Reply(refuse(
                Reason::NoService,
                format!("this node does not provide `{}`", request.service),
            )));
        };
        let Some(&(index, shape, text)) = hosted.functions.get(request.function.as_ref()) else {
            let detail = format!(
                "`{}` has no function `{}`",
                request.service, request.function
            );
            return Err(Early::Reply(refuse(Reason::NoFunction, detail)));
        };
        if request.signature != shape && request.signature != text {
            let detail = format!(
                "`{}.{}` has another signature here",
                request.service, request.function
            );
            return Err(Early::Reply(refuse(Reason::NoFunction, detail)));
        }
        // Counted from here on: the function is one this node hosts, so its labels are ours,
        // never a peer's words.
        let meter = hosted.meters.as_ref().map(|m| &m.functions[index]);
        if let Some(callers) = hosted.provider.callers() {
            let caller = request.head.caller.as_deref();
            if !caller.is_some_and(|c| callers.admits(c)) {
                let detail = format!(
                    "`{}` admits callers {}; the caller is {}",
                    request.service,
                    callers.patterns().join(", "),
                    caller.map_or_else(|| "unnamed".to_owned(), |c| format!("`{c}`"))
                );
                if let Some(meter) = meter {
                    meter.count(MeteredServed::Unauthorized);
                }
                return Err(Early::Reply(refuse(Reason::Unauthorized, detail)));
            }
        }
        // A retry of an at-most-once call it has seen is answered from the record, before
        // admission: a draining node still answers for what it ran.
        let key = record_key(
            &hosted,
            index,
            request.head.caller.as_ref(),
            request.head.call_id,
        );
        if let Some(recall) = key.as_ref().and_then(|(key, _)| self.record.seen(key)) {
            if let Some(meter) = meter {
                meter.count(MeteredServed::Recalled);
            }
            return Err(Early::Recall(recall));
        }
        // An at-most-once call's handler runs on past its attempt, to the end of the call's
        // budget, but never longer than the budget its provider declares (nor shorter than its
        // attempt). Its record keeps it to the end of the caller's budget all the same: the
        // caller retries until then, and a retry that found no record would run it again.
        let (handler_end, kept_until) = match &key {
            Some((_, declared)) => {
                let longest = now + *declared;
                let budget_end = request.head.budget_deadline;
                let end = budget_end
                    .map_or(longest, |end| end.min(longest))
                    .max(deadline);
                (end, Some(budget_end.unwrap_or(longest).max(end)))
            }
            None => (deadline, None),
        };
        let permit = match self.admission.admit(caller) {
            Ok(permit) => permit,
            Err((reason, detail)) => {
                if let Some(meter) = meter {
                    meter.refused(reason);
                }
                return Err(Early::Reply(refuse(reason, detail)));
            }
        };
        let attempt = request.attempt();
        let request_trace = request.trace();
        let Request {
            service,
            function,
            args,
            head,
            ..
        } = request;
        // The request's trace, continued by the handler's span and the calls it makes.
        let incoming = request_trace;
        let (span, trace) =
            crate::context::handler_span(incoming, &service, &function, head.caller.as_deref());
        let context = Context::new(Received {
            service,
            function,
            caller: head.caller,
            request_id: head.request_id,
            attempt,
            deadline: handler_end,
            budget_deadline: head.budget_deadline,
            metadata: head.metadata,
            call_id: head.call_id,
            trace,
            meter: meter.cloned(),
        });
        for (passed, layer) in self.layers.iter().enumerate() {
            let refused = match catching(|| layer.on_request(&context)) {
                Ok(Ok(())) => continue,
                Ok(Err(refusal)) => {
                    let (reason, detail) = refusal.into_parts();
                    refuse(reason, detail)
                }
                Err(message) => {
                    tracing::error!(
                        service = %context.service(),
                        function = %context.function(),
                        "a provider layer panicked: {message}"
                    );
                    Reply::Panicked(format!(
                        "a provider layer panicked before the handler ran: {message}"
                    ))
                }
            };
            if let Some(meter) = meter {
                meter.count(MeteredServed::Rejected);
            }
            // The layers before this one let the request through: they hear how it ended.
            drop(Told {
                layers: &self.layers[..passed],
                context,
                admitted: Instant::now(),
                served: Served::Refused,
                // Counted as refused already.
                metered: None,
            });
            return Err(Early::Reply(refused));
        }
        // An at-most-once call is entered in the record before it runs, once nothing can refuse
        // it any more: a call refused never ran, and is not recorded.
        let recording = match key {
            Some((key, _)) => {
                let early = match self.record.begin(key, kept_until) {
                    Begin::Run(recording) => Ok(recording),
                    Begin::Seen(recall) => {
                        if let Some(meter) = meter {
                            meter.count(MeteredServed::Recalled);
                        }
                        Err(Early::Recall(recall))
                    }
                    Begin::Full(detail) => {
                        if let Some(meter) = meter {
                            meter.refused(Reason::Overloaded);
                        }
                        Err(Early::Reply(refuse(Reason::Overloaded, detail)))
                    }
                };
                match early {
                    Ok(recording) => Some(recording),
                    Err(early) => {
                        // Every layer let it through: they hear that it did not run.
                        drop(Told {
                            layers: &self.layers,
                            context,
                            admitted: Instant::now(),
                            served: Served::Refused,
                            // Counted as refused already.
                            metered: None,
                        });
                        return Err(early);
                    }
                }
            }
            None => None,
        };
        // Building the future runs no user code, but a generated adapter is still code: a panic
        // while building it is caught like one while running it.
        let run =
            std::panic::catch_unwind(AssertUnwindSafe(|| hosted.provider.dispatch(index, &args)));
        // Boxed once more only when traced: the handler runs inside its span.
        let run = match span {
            Some(span) => run.map(|future| -> DispatchFuture { Box::pin(future.instrument(span)) }),
            None => run,
        };
        Ok(Started {
            run,
            context,
            _permit: permit,
            recording,
        })
    }
}

/// Why a request does not run: a reply at once, or an answer from the record of at-most-once
/// calls (which may wait for the call's first attempt to end).
enum Early {
    Reply(Reply),
    Recall(record::Recall),
}

/// The record's key of a request, if it is an attempt of an at-most-once call, and the
/// function's declared budget.
fn record_key(
    hosted: &Hosted,
    index: usize,
    caller: Option<&Arc<str>>,
    call_id: Option<u128>,
) -> Option<(record::Key, Duration)> {
    let call = call_id?;
    let function = hosted.at_most_once.get(index)?.as_ref()?;
    let caller = caller.cloned().unwrap_or_else(|| Arc::from(""));
    let key = record::Key {
        caller,
        function: function.function.clone(),
        call,
    };
    Some((key, function.budget))
}

/// An admitted request, its handler's future built.
struct Started<'a> {
    /// The handler's future, or the panic that building it raised.
    run: std::thread::Result<DispatchFuture>,
    /// What the handler reads through `cluster::context()`.
    context: Context,
    /// Held until the call ends; lets the next call in when dropped.
    _permit: Permit<'a>,
    /// An at-most-once call's entry in the record, told how it ended.
    recording: Option<record::Running>,
}

/// Reports to the provider layers and counts in the function's metrics, when dropped, how a
/// request ended. One guard for both, made only if either wants it: the handler's future, which
/// every request's task holds, grows by nothing when neither does.
struct Told<'a> {
    layers: &'a [Arc<dyn ProviderLayer>],
    context: Context,
    admitted: Instant,
    served: Served,
    /// How it ended, as the metrics count it; `None` if they counted it already.
    metered: Option<MeteredServed>,
}

impl Drop for Told<'_> {
    fn drop(&mut self) {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.admitted);
        // Stopped at its deadline by the transport, not given up by its caller.
        let expired = self.context.deadline() <= now;
        if self.served == Served::Cancelled && expired {
            self.served = Served::Expired;
        }
        for layer in self.layers {
            if let Err(message) = catching(|| layer.on_served(&self.context, self.served, elapsed))
            {
                tracing::error!("a provider layer panicked in on_served: {message}");
            }
        }
        if let (Some(meter), Some(mut metered)) = (self.context.meter(), self.metered) {
            if metered == MeteredServed::Cancelled && expired {
                metered = MeteredServed::Expired;
            }
            meter.ended(metered, elapsed);
        }
    }
}

/// Runs an admitted request's handler and makes its reply, which is at most `reply_limit` bytes
/// (`max_reply` is this node's own limit, for the message). The provider `layers` are told how
/// it ended, also when it is dropped (its caller gave up, its connection closed): they see every
/// request they let through. So do the function's metrics, if the node records them.
async fn served(
    run: std::thread::Result<DispatchFuture>,
    context: Context,
    reply_limit: usize,
    max_reply: usize,
    layers: &[Arc<dyn ProviderLayer>],
) -> Reply {
    let mut told = (!layers.is_empty() || context.meter().is_some()).then(|| Told {
        layers,
        context: context.clone(),
        admitted: Instant::now(),
        served: Served::Cancelled,
        metered: Some(MeteredServed::Cancelled),
    });
    // No timer of its own: the transport stops the handler at the deadline (the serving loop
    // aborts its task, the in-memory network drops it), and a second timer per request cost 0.5 k
    // instructions and the room in the request's task that kept it within the allocator's
    // per-thread cache (`docs/benchmarks.md`).
    let outcome = match run {
        Ok(future) => CatchUnwind::new(AssertUnwindSafe(context.clone().run(future))).await,
        Err(panic) => Err(panic),
    };
    let (reply, served) = match outcome {
        Ok(Ok(bytes)) if bytes.len() > reply_limit => {
            let whose = if reply_limit < max_reply {
                "the caller reads"
            } else {
                "this node's frame limit allows"
            };
            let detail = format!(
                "the function ran; its reply is {} bytes, more than {whose} ({reply_limit})",
                bytes.len(),
            );
            (Reply::TooLarge(detail), Served::Undeliverable)
        }
        Ok(Ok(bytes)) => (Reply::Done(bytes), Served::Done),
        Ok(Err(DispatchError::BadArguments(e))) => (refuse(Reason::BadArguments, e), Served::Done),
        Ok(Err(DispatchError::UnknownFunction(i))) => (
            refuse(
                Reason::NoFunction,
                format!("the provider has no function number {i}"),
            ),
            Served::Done,
        ),
        Ok(Err(e)) => (Reply::Undeliverable(e.to_string()), Served::Undeliverable),
        Err(panic) => {
            let message = panic_message(&*panic);
            // A payload whose own drop panics ends no more than this request.
            let _ = std::panic::catch_unwind(AssertUnwindSafe(move || drop(panic)));
            tracing::error!(
                service = %context.service(),
                function = %context.function(),
                request = %context.request_id(),
                "provider panicked: {message}"
            );
            (Reply::Panicked(message), Served::Panicked)
        }
    };
    if let Some(told) = &mut told {
        told.served = served;
        told.metered = Some(match &reply {
            Reply::TooLarge(_) => MeteredServed::ReplyTooLarge,
            Reply::Refused(..) => MeteredServed::BadArguments,
            Reply::Undeliverable(_) => MeteredServed::Undeliverable,
            Reply::Panicked(_) => MeteredServed::Panicked,
            _ => MeteredServed::Answered,
        });
    }
    fit(reply, reply_limit)
}

/// The reply, its text cut to what the caller reads: a panic message or a refusal's detail is
/// the provider's words, as long as it likes, and a frame the caller cannot read would cost
/// its connection and every call on it.
fn fit(reply: Reply, limit: usize) -> Reply {
    // Room for the reply's own fields; a caller that reads almost nothing gets no text at all.
    let room = limit.saturating_sub(64);
    let cut = |text: String| {
        if text.len() <= room {
            return text;
        }
        let mut end = room;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if room < 64 {
            return text[..end].to_owned();
        }
        format!("{}… ({} bytes cut)", &text[..end], text.len() - end)
    };
    match reply {
        // Kept for an earlier attempt, which may have accepted more than this one does.
        Reply::Recalled(kept) if kept.size() > limit => Reply::TooLarge(cut(format!(
            "the function ran; its reply, kept from an earlier attempt, is {} bytes, more than \
             this attempt accepts ({limit})",
            kept.size()
        ))),
        Reply::Refused(code, detail) => Reply::Refused(code, cut(detail)),
        Reply::Panicked(message) => Reply::Panicked(cut(message)),
        Reply::TooLarge(detail) => Reply::TooLarge(cut(detail)),
        Reply::Undeliverable(detail) => Reply::Undeliverable(cut(detail)),
        other => other,
    }
}

fn refuse(reason: Reason, detail: String) -> Reply {
    Reply::Refused(reason.code(), detail)
}

/// Runs a layer's code (the user's, on the call path), its panic caught as its message: a layer
/// with a bug fails the call it was called for, never the node or the connection.
pub(crate) fn catching<T>(layer: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(AssertUnwindSafe(layer)).map_err(|panic| panic_message(&*panic))
}

/// A panic's message, as its payload carries it.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}
