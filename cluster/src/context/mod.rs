//! The call context: what a handler knows about the call it serves (who called, the request id,
//! how long it has, the caller's metadata), and what a call made inside that handler inherits
//! from it (the deadline, the request id, cancellation). `docs/calls.md` ("A call inside a
//! call") walks through it.
//!
//! The context is a task-local, set by the provider's dispatcher around the handler's future and
//! read with [`context()`]. A task-local rather than an argument: the trait a user writes stays
//! the trait a client calls, and code deep inside a handler (a repository, a helper) reaches it
//! without threading a parameter through. A task the handler spawns does not inherit task-locals;
//! [`Context::scope`] carries the context into it.

mod metadata;
mod otel;
mod trace;

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

pub use metadata::{MAX_METADATA_BYTES, MAX_METADATA_ENTRIES, Metadata, MetadataTooLarge};
pub(crate) use otel::set_parent as set_span_parent;
pub use trace::TraceParent;
pub(crate) use trace::{attempt_ended, attempt_span, handler_span, of_call, traced};

tokio::task_local! {
    static CURRENT: Context;
}

/// The context of the call the current task is serving, if it is serving one.
///
/// ```
/// # #[cluster::service(name = "orders", version = "1.0.0")]
/// # pub trait Orders { async fn place(&self, item: String) -> String; }
/// struct Shop;
/// impl Orders for Shop {
///     async fn place(&self, item: String) -> String {
///         let ctx = cluster::context().expect("called by the framework");
///         format!(
///             "{item} for {} (request {}, {:?} left, tenant {:?})",
///             ctx.caller().unwrap_or("?"),
///             ctx.request_id(),
///             ctx.remaining(),
///             ctx.metadata().get("tenant"),
///         )
///     }
/// }
/// ```
pub fn context() -> Option<Context> {
    Context::current()
}

/// What a handler knows about the call it serves. Cheap to clone.
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

struct Inner {
    call: Received,
    cancelled: AtomicBool,
    // Whether anything waits in `cancelled()`: most handlers spawn nothing, and then ending a
    // call wakes nobody (`notify_waiters` takes a lock).
    watched: AtomicBool,
    wake: Notify,
}

/// What the dispatcher knows of a request when it builds its context.
pub(crate) struct Received {
    pub(crate) service: Cow<'static, str>,
    pub(crate) function: Cow<'static, str>,
    pub(crate) caller: Option<Arc<str>>,
    pub(crate) request_id: RequestId,
    pub(crate) attempt: u32,
    pub(crate) deadline: Instant,
    pub(crate) budget_deadline: Option<Instant>,
    pub(crate) metadata: Metadata,
    pub(crate) call_id: Option<u128>,
    /// The call's trace, under the handler's own span: what calls made in the handler continue.
    pub(crate) trace: Option<TraceParent>,
    /// The served function's metrics, if the node records them: the dispatcher counts how the
    /// request ended. Here rather than in the handler's future, which every request's task
    /// holds.
    pub(crate) meter: Option<Arc<crate::meters::ServedMeters>>,
}

impl Context {
    pub(crate) fn new(mut call: Received) -> Self {
        // The caller's budget can never end before the attempt it is paying for.
        call.budget_deadline = call.budget_deadline.map(|end| end.max(call.deadline));
        Self {
            inner: Arc::new(Inner {
                call,
                cancelled: AtomicBool::new(false),
                watched: AtomicBool::new(false),
                wake: Notify::new(),
            }),
        }
    }

    /// The context of the call the current task serves.
    pub fn current() -> Option<Context> {
        CURRENT.try_with(Context::clone).ok()
    }

    /// Runs `future` with this context as the current one: for a task the handler spawns, so
    /// that the calls it makes inherit this call's deadline, request id and cancellation.
    ///
    /// ```no_run
    /// # async fn handler() {
    /// let ctx = cluster::context().expect("inside a handler");
    /// tokio::spawn(ctx.scope(async {
    ///     // calls made here end when the handler's call does
    /// }));
    /// # }
    /// ```
    pub fn scope<F: Future>(&self, future: F) -> impl Future<Output = F::Output> + use<F> {
        CURRENT.scope(self.clone(), future)
    }

    /// The service called.
    pub fn service(&self) -> &str {
        &self.inner.call.service
    }

    /// The function called.
    pub fn function(&self) -> &str {
        &self.inner.call.function
    }

    /// The name of the calling node, as it introduced itself when it opened the connection;
    /// `None` from a peer on wire version 1, which does not say.
    pub fn caller(&self) -> Option<&str> {
        self.inner.call.caller.as_deref()
    }

    /// The request id: the same on every attempt of a call, and on every call made inside its
    /// handler (unless one asked for its own).
    pub fn request_id(&self) -> RequestId {
        self.inner.call.request_id
    }

    /// Which attempt of its call this is, from 1; 0 from a peer on wire version 1.
    pub fn attempt(&self) -> u32 {
        self.inner.call.attempt
    }

    /// The call's own id, for an `at_most_once` function: the same on every attempt of the
    /// call and on no other call (unlike [`request_id`](Self::request_id), which calls made on
    /// its behalf share). The provider's record keeps the call under it; a handler may keep it
    /// too, as an idempotency key of its own. The caller's report has it
    /// ([`CallReport::call_id`](crate::CallReport::call_id)).
    pub fn call_id(&self) -> Option<u128> {
        self.inner.call.call_id
    }

    /// The trace this call belongs to, with this handler's span as the parent: `None` when its
    /// caller sent none (`docs/operations.md`, "Traces that cross nodes"). Calls made inside
    /// the handler continue it by themselves; [`to_header`](TraceParent::to_header) gives the
    /// `traceparent` for other work the handler starts (an HTTP request, a message).
    pub fn trace(&self) -> Option<TraceParent> {
        self.inner.call.trace
    }

    /// The served function's metrics, if the node records them.
    pub(crate) fn meter(&self) -> Option<&Arc<crate::meters::ServedMeters>> {
        self.inner.call.meter.as_ref()
    }

    /// When this attempt's time is up: the provider stops the handler then.
    pub fn deadline(&self) -> Instant {
        self.inner.call.deadline
    }

    /// The time left until [`deadline`](Self::deadline).
    pub fn remaining(&self) -> Duration {
        self.inner
            .call
            .deadline
            .saturating_duration_since(Instant::now())
    }

    /// The time left in the caller's whole budget (this attempt and any it may still retry);
    /// `None` when the caller did not say (wire version 1).
    pub fn budget_remaining(&self) -> Option<Duration> {
        self.inner
            .call
            .budget_deadline
            .map(|end| end.saturating_duration_since(Instant::now()))
    }

    /// The metadata the caller set on this call.
    pub fn metadata(&self) -> &Metadata {
        &self.inner.call.metadata
    }

    /// Whether the call has ended for its handler: it finished, its deadline passed or its
    /// caller gave up. Calls made in its context fail with `Cancelled` from then on.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Waits until [`is_cancelled`](Self::is_cancelled).
    pub async fn cancelled(&self) {
        self.inner.watched.store(true, Ordering::SeqCst);
        loop {
            // Created before the check: `notify_waiters` wakes every `Notified` that exists
            // when it is called, polled or not.
            let woken = self.inner.wake.notified();
            if self.is_cancelled() {
                return;
            }
            woken.await;
        }
    }

    pub(crate) fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        // A waiter sets `watched` before it checks `cancelled`: either it sees the flag, or
        // this sees it watching.
        if self.inner.watched.load(Ordering::SeqCst) {
            self.inner.wake.notify_waiters();
        }
    }

    /// Runs a handler's future as the call this context describes, and marks the context
    /// cancelled when the future ends or is dropped (its caller gave up, its deadline passed).
    pub(crate) fn run<F: Future>(self, future: F) -> impl Future<Output = F::Output> {
        let guard = CancelOnDrop(self.clone());
        CURRENT.scope(self, async move {
            let _guard = guard;
            future.await
        })
    }
}

struct CancelOnDrop(Context);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("service", &self.service())
            .field("function", &self.function())
            .field("caller", &self.caller())
            .field("request_id", &self.request_id())
            .field("attempt", &self.attempt())
            .field("remaining", &self.remaining())
            .field("metadata", self.metadata())
            .finish()
    }
}

/// Identifies one call and the calls made on its behalf: 128 bits, shown as 32 hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct RequestId(pub u128);

impl RequestId {
    /// A new id from a node's generation (unique per process start) and a counter of its own.
    pub(crate) fn new(generation: u64, sequence: u64) -> Self {
        RequestId((u128::from(generation) << 64) | u128::from(sequence))
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn received() -> Received {
        Received {
            service: "s".into(),
            function: "f".into(),
            caller: Some("web-1".into()),
            request_id: RequestId::new(1, 2),
            attempt: 1,
            deadline: Instant::now() + Duration::from_secs(1),
            budget_deadline: Some(Instant::now() + Duration::from_millis(10)),
            metadata: Metadata::new(),
            call_id: None,
            trace: None,
            meter: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_handler_sees_its_context_and_it_is_cancelled_when_the_handler_ends() {
        assert!(context().is_none());
        let ctx = Context::new(received());
        assert_eq!(
            ctx.budget_remaining(),
            Some(Duration::from_secs(1)),
            "a budget never ends before its attempt"
        );
        let seen = ctx
            .clone()
            .run(async { context().map(|c| c.request_id()) })
            .await;
        assert_eq!(seen, Some(RequestId::new(1, 2)));
        assert!(ctx.is_cancelled());
        ctx.cancelled().await;
    }

    #[tokio::test]
    async fn a_dropped_handler_cancels_its_context() {
        let ctx = Context::new(received());
        let waiter = tokio::spawn({
            let ctx = ctx.clone();
            async move { ctx.cancelled().await }
        });
        drop(ctx.clone().run(std::future::pending::<()>()));
        waiter.await.unwrap();
        assert_eq!(RequestId::new(1, 2).to_string().len(), 32);
    }
}
