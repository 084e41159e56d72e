use std::convert::Infallible;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::ClientCore;
use crate::context::{Context, Metadata, TraceParent};
use crate::error::{CallError, CallReport, Reason, RpcError, RpcErrorKind};
use crate::layer::{CallInfo, Outcome};
use crate::meters::Outcome as MeteredOutcome;
use crate::options::CallOptions;
use crate::server::catching;
use crate::service::{CodecError, Encoded};
use crate::transport::Request;

type Decode<T, E> = fn(&[u8]) -> Result<Result<T, E>, CodecError>;

/// A decoded reply: the value (with the call's report, if it was asked for), or the provider's
/// own error with the call's report; or the framework's error.
type Decoded<T, E> =
    Result<Result<(T, Option<Box<CallReport>>), (E, Box<CallReport>)>, CallError<Infallible>>;

/// One call, not yet started: set per-call overrides, then `.await` it.
///
/// ```no_run
/// # use std::time::Duration;
/// # async fn demo(call: cluster::Call<u64, std::convert::Infallible>) {
/// let n = call.timeout(Duration::from_secs(120)).retry_after(Duration::from_millis(100)).await;
/// # }
/// ```
#[must_use = "a call does nothing until it is awaited"]
pub struct Call<T, E> {
    client: Arc<ClientCore>,
    function: usize,
    request: Result<Arc<Request>, CodecError>,
    overrides: CallOptions,
    metadata: Metadata,
    detached: bool,
    // Boxed: set on few calls, and every call's future holds it.
    trace: Option<Box<TraceParent>>,
    decode: Decode<T, E>,
}

/// The future of an awaited [`Call`].
pub type CallFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, CallError<E>>> + Send>>;

impl<T, E> Call<T, E> {
    pub(crate) fn new(
        client: Arc<ClientCore>,
        function: usize,
        args: Result<Encoded, CodecError>,
        decode: Decode<T, E>,
    ) -> Self {
        Self {
            request: args.map(|args| super::attempt::request_of(&client, function, args)),
            client,
            function,
            overrides: CallOptions::new(),
            metadata: Metadata::new(),
            detached: false,
            trace: None,
            decode,
        }
    }

    /// The per-attempt timeout of this call. Zero allows no attempt: the call then fails at
    /// once with [`RpcErrorKind::InvalidOptions`], nothing sent.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.overrides.timeout = Some(timeout);
        self
    }

    /// The first pause between attempts; the rest of the retry policy stays as merged.
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.overrides.retry_after = Some(after);
        self
    }

    /// The budget of this call: all attempts and pauses, from its start. Zero fails the call
    /// at once, as a zero [`timeout`](Self::timeout) does.
    pub fn budget(mut self, budget: Duration) -> Self {
        self.overrides.retry_budget = Some(budget);
        self
    }

    /// One attempt, whatever happens. A caller can turn retries off; it cannot make a function
    /// the provider did not declare idempotent run again after it may have run.
    pub fn no_retry(mut self) -> Self {
        self.overrides.retry_enabled = Some(false);
        self
    }

    /// Hedges this call: after `after` without an answer, a copy to another provider, at most
    /// `max` copies besides the first (idempotent functions only; `docs/calls.md`). An `after`
    /// below 1 ms is taken as 1 ms ([`MIN_HEDGE_AFTER`](crate::options::MIN_HEDGE_AFTER)).
    pub fn hedge(mut self, after: Duration, max: u32) -> Self {
        self.overrides.hedge_after = Some(after);
        self.overrides.hedge_max = Some(max);
        self
    }

    /// No hedging for this call, whatever the provider declares.
    pub fn no_hedge(mut self) -> Self {
        self.overrides.hedge_max = Some(0);
        self
    }

    /// Waits up to `wait`, from the call's start and within its budget, for a provider able
    /// to serve it to register, instead of failing at once when none is (`NoService`,
    /// `NoVersion`, `NoFunction`): for a call made while its provider is still starting.
    pub fn wait_for_provider(mut self, wait: Duration) -> Self {
        self.overrides.wait_for_provider = Some(wait);
        self
    }

    /// Any fields of `options` override the merged ones for this call.
    pub fn options(mut self, options: CallOptions) -> Self {
        self.overrides = self.overrides.overlay(&options);
        self
    }

    /// Sets a metadata entry the provider's handler reads through
    /// [`context()`](crate::context()): at most
    /// [`MAX_METADATA_ENTRIES`](crate::context::MAX_METADATA_ENTRIES) entries in
    /// [`MAX_METADATA_BYTES`](crate::context::MAX_METADATA_BYTES), or the call fails with
    /// `TooLarge` before it is sent.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key, value);
        self
    }

    /// Makes this call part of the trace `parent` names (W3C trace context: read one from an
    /// incoming HTTP request's `traceparent` header with [`TraceParent::parse`]), instead of
    /// the calling handler's or a new one. `docs/operations.md`, "Traces that cross nodes".
    pub fn trace(mut self, parent: TraceParent) -> Self {
        self.trace = Some(Box::new(parent));
        self
    }

    /// Made inside a handler, this call does not inherit that handler's deadline, request id
    /// or cancellation: it runs on its own budget, as a call from outside would (for work that
    /// must outlive the call that started it).
    pub fn detached(mut self) -> Self {
        self.detached = true;
        self
    }
}

impl<T, E> IntoFuture for Call<T, E>
where
    T: Send + 'static,
    E: Send + 'static,
{
    type Output = Result<T, CallError<E>>;
    type IntoFuture = CallFuture<T, E>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { finish(self.execute(false).await).map(|(value, _)| value) })
    }
}

/// The future of [`Call::reported`].
pub type ReportedFuture<T, E> =
    Pin<Box<dyn Future<Output = Result<(T, CallReport), CallError<E>>> + Send>>;

impl<T, E> Call<T, E>
where
    T: Send + 'static,
    E: Send + 'static,
{
    /// The call, with its report also when it succeeds: every attempt, why each was sent (a
    /// retry, a hedge, a retry on the process an at-most-once call may have run on), and
    /// whether the answer came from a provider's record.
    ///
    /// ```no_run
    /// # async fn demo(call: cluster::Call<u64, std::convert::Infallible>) -> Result<(), Box<dyn std::error::Error>> {
    /// let (value, report) = call.reported().await?;
    /// println!("{value} after {} attempt(s)", report.attempts.len());
    /// # Ok(()) }
    /// ```
    pub fn reported(self) -> ReportedFuture<T, E> {
        Box::pin(async move {
            finish(self.execute(true).await).map(|(value, report)| {
                let report = report.map_or_else(CallReport::default, |report| *report);
                (value, report)
            })
        })
    }

    /// Runs the call; its report too when it succeeds, if `report`.
    async fn execute(self, report: bool) -> Decoded<T, E> {
        {
            let Call {
                client,
                function,
                request,
                overrides,
                metadata,
                detached,
                mut trace,
                decode,
            } = self;
            let current = Context::current();
            let parent = if detached {
                // A detached call still belongs to the handler's trace: it was caused by it.
                trace = trace.or_else(|| current.as_ref().and_then(Context::trace).map(Box::new));
                None
            } else {
                current
            };
            let started = tokio::time::Instant::now();
            let request_id = parent
                .as_ref()
                .map_or_else(|| client.node.next_request_id(), Context::request_id);
            let sent = super::attempt::Sent {
                request,
                overrides: &overrides,
                metadata,
                request_id,
                parent,
                trace,
                started,
                attempts_from: started,
            };
            if client.node.client_layers.is_empty() {
                return run(&client, function, sent, decode, report).await;
            }
            // Boxed, so that the layers' state does not grow the future of every call.
            Box::pin(with_layers(&client, function, sent, decode, report)).await
        }
    }
}

/// [`run`], with the node's client layers told before and after.
async fn with_layers<T, E>(
    client: &ClientCore,
    function: usize,
    mut sent: super::attempt::Sent<'_>,
    decode: Decode<T, E>,
    report: bool,
) -> Decoded<T, E> {
    let layers = &client.node.client_layers;
    let options = client.defaults.overlay(sent.overrides);
    let parent = sent.parent.clone();
    let info = CallInfo {
        service: &client.description.name,
        function: &client.description.functions[function].name,
        request_id: sent.request_id,
        options: &options,
        parent: parent.as_ref(),
    };
    let started = sent.started;
    let mut refused = None;
    for layer in layers.iter() {
        let why = match catching(|| layer.on_call(&info, &mut sent.metadata)) {
            Ok(Ok(())) => continue,
            Ok(Err(why)) => format!("a client layer refused the call: {why}"),
            Err(panic) => format!("a client layer panicked: {panic}"),
        };
        refused = Some(super::report::early_service_error(
            client,
            function,
            Reason::Rejected,
            why,
        ));
        break;
    }
    let result = match refused {
        Some(e) => {
            if let Some(meter) = client.meters.as_deref().and_then(|m| m.start(function)) {
                meter.failed(MeteredOutcome::of(&e), e.report(), started);
            }
            Err(e)
        }
        None => {
            // The layers' time is the budget's; the first attempt's timeout starts now.
            sent.attempts_from = tokio::time::Instant::now();
            run(client, function, sent, decode, report).await
        }
    };
    let outcome = match &result {
        Ok(Ok(_)) => Outcome::Ok,
        Ok(Err(_)) => Outcome::App,
        Err(e) => Outcome::Failed(e),
    };
    let elapsed = started.elapsed();
    for layer in layers.iter() {
        if let Err(panic) = catching(|| layer.on_outcome(&info, outcome, elapsed)) {
            tracing::error!("a client layer panicked in on_outcome: {panic}");
        }
    }
    result
}

/// Runs the call and decodes its reply: the provider's `Ok` or `Err`, or the framework's error.
async fn run<T, E>(
    client: &ClientCore,
    function: usize,
    sent: super::attempt::Sent<'_>,
    decode: Decode<T, E>,
    report: bool,
) -> Decoded<T, E> {
    let started = sent.started;
    // Counted from here, also if the call is dropped before it ends; the meter keeps no clock
    // of its own (`started` is the call's), so that it adds one pointer to the call's future.
    let meter = client.meters.as_deref().and_then(|m| m.start(function));
    let answer = match super::attempt::run(client, function, sent).await {
        Ok(answer) => answer,
        Err(e) => {
            if let Some(meter) = meter {
                meter.failed(MeteredOutcome::of(&e), e.report(), started);
            }
            return Err(e);
        }
    };
    let decoded = decode(&answer.bytes);
    if let Some(meter) = meter {
        let outcome = match &decoded {
            Ok(Ok(_)) => MeteredOutcome::Ok,
            Ok(Err(_)) => MeteredOutcome::App,
            Err(_) => MeteredOutcome::Rpc(RpcErrorKind::Protocol),
        };
        meter.end(outcome, answer.tally(), false, started);
    }
    match decoded {
        Ok(Ok(value)) if report => Ok(Ok((value, Some(Box::new(answer.report(client, function)))))),
        Ok(Ok(value)) => Ok(Ok((value, None))),
        Ok(Err(error)) => Ok(Err((error, Box::new(answer.report(client, function))))),
        Err(e) => {
            // The function ran and answered: the report names the provider and its attempts,
            // for the reader to find the build that wrote what this one cannot read.
            let detail = format!("cannot decode the reply after {:?}: {e}", started.elapsed());
            let report = answer.report(client, function);
            Err(CallError::Rpc(RpcError::new(
                RpcErrorKind::Protocol,
                detail,
                report,
            )))
        }
    }
}

fn finish<T, E>(result: Decoded<T, E>) -> Result<(T, Option<Box<CallReport>>), CallError<E>> {
    match result {
        Ok(Ok(value)) => Ok(value),
        Ok(Err((error, report))) => Err(CallError::App { error, report }),
        Err(e) => Err(never_app(e)),
    }
}

fn never_app<E>(e: CallError<Infallible>) -> CallError<E> {
    e.map_app(|never| match never {})
}
