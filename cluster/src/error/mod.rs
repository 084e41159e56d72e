//! The errors of a call: the provider's own error, a [`ServiceError`] (the service could not be
//! found or could not run the call) or an [`RpcError`] (the call did not get through, or its
//! result did not come back). See `docs/errors.md` for how to read each.

mod downstream;
pub(crate) mod report;
mod rpc;
mod service;
pub(crate) mod spelling;

use std::fmt;

pub use downstream::Downstream;
pub use report::{AttemptKind, AttemptRecord, CallReport, MAX_RECORDED_ATTEMPTS, ProviderRef};
pub use rpc::{RpcError, RpcErrorKind};
pub use service::{Reason, ServiceError};

/// Why a call failed.
///
/// `E` is the provider's own error type: the `E` of a function declared `-> Result<T, E>`, or
/// [`Infallible`](std::convert::Infallible) for a function with a plain return type.
#[derive(Debug)]
#[non_exhaustive]
pub enum CallError<E> {
    /// The provider's function ran and returned `Err(E)`. Never retried.
    App {
        /// What the function returned.
        error: E,
        /// The call: its function, the provider that answered, the attempts before that one.
        report: Box<CallReport>,
    },
    /// The service could not be found or could not run the call: no provider, no compatible
    /// version, no such function, a panic in the provider, a provider that refused it.
    Service(ServiceError),
    /// The call did not get through, or its result did not come back: timeout, no connection,
    /// connection lost, a value too large for a frame, a reply that could not be read.
    Rpc(RpcError),
}

impl<E> CallError<E> {
    /// The report of the call: its function, its attempts, the provider of the last one, timings.
    pub fn report(&self) -> &CallReport {
        match self {
            CallError::App { report, .. } => report,
            CallError::Service(e) => e.report(),
            CallError::Rpc(e) => e.report(),
        }
    }

    /// The provider's own error, if that is what this is.
    pub fn app(&self) -> Option<&E> {
        match self {
            CallError::App { error, .. } => Some(error),
            _ => None,
        }
    }

    /// The provider's own error, if that is what this is, without the report.
    pub fn into_app(self) -> Option<E> {
        match self {
            CallError::App { error, .. } => Some(error),
            _ => None,
        }
    }

    /// Whether the function may have run on a provider although the call failed (a timeout or a
    /// connection lost after sending; a panic; an application error).
    pub fn may_have_run(&self) -> bool {
        match self {
            CallError::App { .. } => true,
            CallError::Service(e) => e.reason() == Reason::Panicked,
            CallError::Rpc(e) => e.may_have_run(),
        }
    }

    /// Whether calling again later may succeed: the failure was about providers or the network,
    /// not about this request or the provider's code.
    pub fn is_transient(&self) -> bool {
        match self {
            CallError::App { .. } => false,
            CallError::Service(e) => e.is_transient(),
            CallError::Rpc(e) => e.is_transient(),
        }
    }

    /// Maps the provider's error type.
    pub fn map_app<F>(self, f: impl FnOnce(E) -> F) -> CallError<F> {
        match self {
            CallError::App { error, report } => CallError::App {
                error: f(error),
                report,
            },
            CallError::Service(e) => CallError::Service(e),
            CallError::Rpc(e) => CallError::Rpc(e),
        }
    }
}

impl<E: fmt::Display> fmt::Display for CallError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::App { error, report } => {
                write!(f, "The call {} ", report.call)?;
                if let Some(provider) = &report.provider {
                    write!(f, "to {provider} ")?;
                }
                write!(f, "returned an error: {error}")
            }
            CallError::Service(e) => e.fmt(f),
            CallError::Rpc(e) => e.fmt(f),
        }
    }
}

// `E` needs only Display + Debug (a provider may use `String` as its error). Every variant is
// transparent (its Display is the inner error's), so none is repeated as a `source()`.
impl<E: fmt::Debug + fmt::Display> std::error::Error for CallError<E> {}

impl<E> From<ServiceError> for CallError<E> {
    fn from(e: ServiceError) -> Self {
        CallError::Service(e)
    }
}

impl<E> From<RpcError> for CallError<E> {
    fn from(e: RpcError) -> Self {
        CallError::Rpc(e)
    }
}
