//! Layers: behaviour a node adds around every call without touching the framework (request ids
//! in logs, metrics, an auth check, a tenant header).
//!
//! Interceptor traits of our own rather than tower's `Layer`/`Service`: a tower stack boxes the
//! call's future at every layer and makes every call pay for it, while a layer here is two plain
//! method calls, and nothing at all when a node has none. The price is that a layer observes and
//! refuses, but does not wrap the call's future (no retries or timeouts of its own: the call path
//! owns those).
//!
//! - A [`ClientLayer`] sees each call a node makes before its first attempt (it may add metadata
//!   or refuse the call) and its outcome.
//! - A [`ProviderLayer`] sees each request a node serves, its [`Context`] included, before the
//!   handler runs (it may refuse it) and its outcome.
//!
//! Both are set on the [`NodeBuilder`](crate::NodeBuilder) and run in the order they were added.

use std::convert::Infallible;
use std::time::Duration;

use crate::context::{Context, Metadata, RequestId};
use crate::error::{CallError, Reason};
use crate::options::CallOptions;

/// A call as a client layer sees it.
#[derive(Debug)]
#[non_exhaustive]
pub struct CallInfo<'a> {
    /// The service called.
    pub service: &'a str,
    /// The function called.
    pub function: &'a str,
    /// The call's request id (inherited from the handler it is made in, if any).
    pub request_id: RequestId,
    /// The options the caller set: the client's defaults with this call's overrides over them
    /// (the provider's own layers are merged in per attempt, once a provider is chosen).
    pub options: &'a CallOptions,
    /// The context of the handler this call is made in, if any.
    pub parent: Option<&'a Context>,
}

/// How a call ended, as a client layer sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Outcome<'a> {
    /// The function ran and returned a value.
    Ok,
    /// The function ran and returned its own error.
    App,
    /// The call failed in the framework: the error, with its report.
    Failed(&'a CallError<Infallible>),
}

/// Behaviour around every call a node makes. Both methods default to doing nothing.
///
/// ```
/// use cluster::layer::{CallInfo, ClientLayer};
/// use cluster::context::Metadata;
///
/// /// Puts the tenant on every call.
/// struct Tenant(&'static str);
/// impl ClientLayer for Tenant {
///     fn on_call(&self, _call: &CallInfo<'_>, metadata: &mut Metadata) -> Result<(), String> {
///         metadata.insert("tenant", self.0);
///         Ok(())
///     }
/// }
/// # async fn demo(identity: cluster::Identity) -> Result<(), cluster::StartError> {
/// let node = cluster::Node::builder().identity(identity).client_layer(Tenant("acme")).start().await?;
/// # Ok(()) }
/// ```
pub trait ClientLayer: Send + Sync + 'static {
    /// Before the call's first attempt: may add to its metadata, or refuse the call with a
    /// reason (it then fails with [`Reason::Rejected`] and is not sent). A panic here refuses
    /// the call the same way.
    fn on_call(&self, call: &CallInfo<'_>, metadata: &mut Metadata) -> Result<(), String> {
        let _ = (call, metadata);
        Ok(())
    }

    /// When the call has ended, however it ended, `elapsed` after it started. A panic here is
    /// caught and logged: the call's result is returned all the same.
    fn on_outcome(&self, call: &CallInfo<'_>, outcome: Outcome<'_>, elapsed: Duration) {
        let _ = (call, outcome, elapsed);
    }
}

/// Why a provider layer refused a request. The handler does not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    reason: Reason,
    detail: String,
}

impl Refusal {
    /// Refused for good: the caller gets [`Reason::Rejected`] and does not retry it anywhere.
    pub fn rejected(detail: impl Into<String>) -> Self {
        Self {
            reason: Reason::Rejected,
            detail: detail.into(),
        }
    }

    /// Refused for now, here: the caller gets [`Reason::Overloaded`] and may retry it on
    /// another provider (a rate limit, a queue full).
    pub fn overloaded(detail: impl Into<String>) -> Self {
        Self {
            reason: Reason::Overloaded,
            detail: detail.into(),
        }
    }

    pub(crate) fn into_parts(self) -> (Reason, String) {
        (self.reason, self.detail)
    }
}

/// How a request ended, as a provider layer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Served {
    /// The handler returned (a value or its own error).
    Done,
    /// The handler panicked.
    Panicked,
    /// The deadline passed and the handler was stopped.
    Expired,
    /// The handler ran, but its reply could not be delivered (too large for the caller, not
    /// encodable).
    Undeliverable,
    /// The handler was dropped before it ended: its caller gave up or its connection closed.
    Cancelled,
    /// A later layer refused the request (or panicked); the handler did not run.
    Refused,
}

/// Behaviour around every request a node serves. Both methods default to doing nothing.
///
/// ```
/// use cluster::context::Context;
/// use cluster::layer::{ProviderLayer, Refusal};
///
/// /// Serves only callers that say which tenant they act for.
/// struct RequireTenant;
/// impl ProviderLayer for RequireTenant {
///     fn on_request(&self, ctx: &Context) -> Result<(), Refusal> {
///         match ctx.metadata().get("tenant") {
///             Some(_) => Ok(()),
///             None => Err(Refusal::rejected("no tenant given")),
///         }
///     }
/// }
/// # async fn demo(identity: cluster::Identity) -> Result<(), cluster::StartError> {
/// let node = cluster::Node::builder().identity(identity).provider_layer(RequireTenant).start().await?;
/// # Ok(()) }
/// ```
pub trait ProviderLayer: Send + Sync + 'static {
    /// Before the handler runs (the request was admitted): may refuse it.
    fn on_request(&self, ctx: &Context) -> Result<(), Refusal> {
        let _ = ctx;
        Ok(())
    }

    /// When a request this layer let through has ended, however it ended (`Served::Cancelled`
    /// when its caller gave up), `elapsed` after it was admitted. A panic here is caught and
    /// logged; a panic in `on_request` refuses the request as `Panicked`.
    fn on_served(&self, ctx: &Context, served: Served, elapsed: Duration) {
        let _ = (ctx, served, elapsed);
    }
}
