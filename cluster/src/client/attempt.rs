//! Steps 2 to 6 of the call path: options, the budget clock, the attempts.

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use tokio::time::{Instant, sleep};
use tracing::Instrument;

use super::Client;
use super::failure::{Failure, Verdict};
use super::peers::InFlight;
use super::select::{Chosen, Miss, choose};
use crate::error::report::Human;
use crate::error::{
    AttemptRecord, CallError, CallReport, ProviderRef, RpcError, RpcErrorKind, ServiceError,
};
use crate::options::{ResolvedOptions, RetryPolicy, Source};
use crate::registry::ServiceEntry;
use crate::service::WIRE_VERSION;
use crate::transport::{ENVELOPE_OVERHEAD, Request};

/// Runs a call to completion: the encoded return value, or why there is none.
pub(crate) async fn run(
    client: &Client,
    function: usize,
    args: Vec<u8>,
    overrides: &crate::options::CallOptions,
) -> Result<Vec<u8>, CallError<Infallible>> {
    let wanted = &client.description.functions[function];
    let span =
        tracing::debug_span!("call", service = %client.description.name, function = %wanted.name);
    async move {
        if client
            .node
            .stopped
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            let detail = format!("node {} has shut down", client.node.info);
            return Err(early_error(
                client,
                function,
                RpcErrorKind::NoConnection,
                detail,
            ));
        }
        if args.len() + ENVELOPE_OVERHEAD > client.node.max_frame {
            let detail = format!(
                "the arguments are {} bytes; frames are limited to {} bytes",
                args.len(),
                client.node.max_frame
            );
            return Err(early_error(
                client,
                function,
                RpcErrorKind::TooLarge,
                detail,
            ));
        }
        let mut call = Attempts::start(client, function, overrides);
        let request = Arc::new(Request {
            wire: WIRE_VERSION,
            // Borrowed from the static description: no allocation per call.
            service: Cow::Borrowed(client.description.name.as_str()),
            function: Cow::Borrowed(wanted.name.as_str()),
            signature: client.signatures[function],
            args,
        });
        call.run(request).await
    }
    .instrument(span)
    .await
}

/// The state of one call across its attempts.
struct Attempts<'a> {
    client: &'a Client,
    function: usize,
    overrides: &'a crate::options::CallOptions,
    start: Instant,
    // One clock for the whole call: no attempt starts at or after it.
    deadline: Instant,
    retry: RetryPolicy,
    budget_source: Source,
    pauses: backon::ExponentialBackoff,
    // Providers that failed in this call: the next attempt prefers others.
    failed: Vec<Arc<ServiceEntry>>,
    attempts: Vec<AttemptRecord>,
    changes: tokio::sync::watch::Receiver<u64>,
    first: Option<Result<Chosen, Miss>>,
    // The options merged for that first provider, reused by its attempt.
    first_options: Option<ResolvedOptions>,
}

impl<'a> Attempts<'a> {
    fn start(
        client: &'a Client,
        function: usize,
        overrides: &'a crate::options::CallOptions,
    ) -> Self {
        let start = Instant::now();
        let mut changes = client.node.registry.changes();
        changes.borrow_and_update();
        let first = choose(client, function, &[], overrides);
        // The retry policy and budget are fixed once, from the first provider found (or, with
        // none yet, from the client's layers), so the budget cannot move under a running call.
        let options = merged(client, first.as_ref().ok(), overrides);
        let retry = options.retry;
        let deadline = later(
            start,
            if retry.enabled {
                retry.budget
            } else {
                options.timeout
            },
        );
        let mut pauses = ExponentialBuilder::default()
            .with_min_delay(retry.after)
            .with_max_delay(retry.max_after)
            .with_factor(retry.factor as f32)
            .without_max_times();
        if retry.jitter {
            pauses = pauses.with_jitter();
        }
        Self {
            client,
            function,
            overrides,
            start,
            deadline,
            retry,
            budget_source: options.budget_source(),
            pauses: pauses.build(),
            failed: Vec::new(),
            attempts: Vec::new(),
            changes,
            first_options: first.is_ok().then_some(options),
            first: Some(first),
        }
    }

    async fn run(&mut self, request: Arc<Request>) -> Result<Vec<u8>, CallError<Infallible>> {
        loop {
            // Step 4: re-resolve before every attempt (the first reuses the lookup made at start).
            let chosen =
                match self.first.take().unwrap_or_else(|| {
                    choose(self.client, self.function, &self.failed, self.overrides)
                }) {
                    Ok(chosen) => chosen,
                    Err(miss) => {
                        self.wait_for_provider(miss).await?;
                        continue;
                    }
                };
            let now = Instant::now();
            if now >= self.deadline {
                return Err(self.timeout_before_attempt(&chosen.entry));
            }
            // The per-attempt timeout follows the provider actually chosen, cut to what is left.
            let options = match self.first_options.take() {
                Some(options) => options,
                None => merged(self.client, Some(&chosen), self.overrides),
            };
            let attempt_deadline = later(now, options.timeout).min(self.deadline);
            if let Some(limit) = chosen.entry.node.max_frame
                && request.args.len() + ENVELOPE_OVERHEAD > limit
            {
                // Sent anyway, the frame would break the provider's connection for every call
                // on it. It would not fit any attempt later either.
                let detail = format!(
                    "the arguments are {} bytes; {} accepts frames of at most {limit} bytes",
                    request.args.len(),
                    chosen.entry.node
                );
                return Err(CallError::Rpc(RpcError::new(
                    RpcErrorKind::TooLarge,
                    detail,
                    self.report(Some(&chosen.entry)),
                )));
            }
            let number = self.attempts.len() + 1;
            tracing::debug!(attempt = number, node = %chosen.entry.node, "attempt");
            let addr = chosen.entry.node.addr;
            let peers = &self.client.node.peers;
            let in_flight = InFlight::start(peers.get(addr));
            let reply = self
                .client
                .node
                .connector
                .send(addr, request.clone(), attempt_deadline)
                .await;
            let failure = match Failure::of(reply) {
                Ok(bytes) => {
                    peers.restore(in_flight.peer());
                    return Ok(bytes);
                }
                Err(failure) => failure,
            };
            drop(in_flight);
            if failure.is_connection_failure() {
                peers.eject(addr);
            }
            tracing::debug!(attempt = number, node = %chosen.entry.node, "attempt failed: {}", failure.outcome());
            self.attempts.push(AttemptRecord {
                provider: provider_ref(&chosen.entry),
                started: now - self.start,
                elapsed: now.elapsed(),
                outcome: failure.outcome(),
            });
            let idempotent = chosen.entry.description.functions[chosen.function].idempotent;
            if !self.retry.enabled || !failure.retryable(idempotent) {
                return Err(self.fail(failure, &chosen.entry));
            }
            // Step 3: a pause that would reach the deadline ends the call; no "one last try".
            let pause = self.pauses.next().unwrap_or(self.retry.max_after);
            if later(Instant::now(), pause) >= self.deadline {
                return Err(self.fail(failure, &chosen.entry));
            }
            self.failed.push(chosen.entry);
            sleep(pause).await;
        }
    }

    /// No provider fits: wait for the registry to change (a replacement registering during a
    /// deploy), within the budget; with retries off, fail at once.
    async fn wait_for_provider(&mut self, miss: Miss) -> Result<(), CallError<Infallible>> {
        if self.retry.enabled {
            let changed = tokio::time::timeout_at(self.deadline, self.changes.changed()).await;
            if let Ok(Ok(())) = changed {
                self.changes.borrow_and_update();
                return Ok(());
            }
        }
        let mut detail = miss.detail;
        if self.retry.enabled {
            let waited = format!("waited {} for one to register", Human(self.start.elapsed()));
            detail = if detail.is_empty() {
                waited
            } else {
                format!("{detail}; {waited}")
            };
        }
        let report = self.report(None);
        Err(CallError::Service(ServiceError::new(
            miss.reason,
            detail,
            miss.available,
            report,
        )))
    }

    fn timeout_before_attempt(&self, entry: &ServiceEntry) -> CallError<Infallible> {
        let detail = "the budget ran out before an attempt could start".to_owned();
        CallError::Rpc(RpcError::new(
            RpcErrorKind::Timeout,
            detail,
            self.report(Some(entry)),
        ))
    }

    fn fail(&self, failure: Failure, entry: &ServiceEntry) -> CallError<Infallible> {
        let report = self.report(Some(entry));
        match failure.verdict() {
            Verdict::Service(reason, detail) => {
                CallError::Service(ServiceError::new(reason, detail, vec![], report))
            }
            Verdict::Rpc(kind, detail) => CallError::Rpc(RpcError::new(kind, detail, report)),
        }
    }

    fn report(&self, entry: Option<&ServiceEntry>) -> CallReport {
        CallReport {
            call: call_name(self.client, self.function),
            requirement: self.client.requirement.to_string(),
            provider: entry
                .map(provider_ref)
                .or_else(|| self.attempts.last().map(|a| a.provider.clone())),
            attempts: self.attempts.clone(),
            elapsed: self.start.elapsed(),
            budget: self
                .retry
                .enabled
                .then_some((self.retry.budget, self.budget_source)),
        }
    }
}

/// `from + by`, saturating far in the future instead of overflowing: a duration such as
/// `Duration::MAX`, from a caller or from another node's registry entry, means "no limit".
fn later(from: Instant, by: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    from.checked_add(by.min(FAR)).unwrap_or(from)
}

/// Step 2: library default < provider service < provider function < client < this call.
fn merged(
    client: &Client,
    chosen: Option<&Chosen>,
    overrides: &crate::options::CallOptions,
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
            (Source::Client, &client.defaults),
            (Source::Call, overrides),
        ]),
    }
}

fn provider_ref(entry: &ServiceEntry) -> ProviderRef {
    ProviderRef {
        node: entry.node.name.clone(),
        addr: entry.node.addr,
        version: entry.description.version.clone(),
    }
}

fn call_name(client: &Client, function: usize) -> String {
    let f = &client.description.functions[function];
    format!("{}.{}/{}", client.description.name, f.name, f.arity())
}

/// An error raised outside the attempt loop: arguments that cannot be sent, a reply that cannot
/// be read.
pub(crate) fn early_error<E>(
    client: &Client,
    function: usize,
    kind: RpcErrorKind,
    detail: String,
) -> CallError<E> {
    let report = CallReport {
        call: call_name(client, function),
        requirement: client.requirement.to_string(),
        provider: None,
        attempts: Vec::new(),
        elapsed: std::time::Duration::ZERO,
        budget: None,
    };
    CallError::Rpc(RpcError::new(kind, detail, report))
}
