//! A downstream failure, carried back up a chain of calls as part of a provider's own error.
//!
//! A handler that calls another service and fails because of it answers its own caller with
//! its own error type; [`Downstream`] is the value to put in it, so that the caller learns which
//! hop failed and why, typed, across any number of hops:
//!
//! ```
//! use cluster::error::Downstream;
//!
//! #[derive(Debug, serde::Serialize, serde::Deserialize, thiserror::Error)]
//! pub enum OrderError {
//!     #[error("out of stock")]
//!     OutOfStock,
//!     #[error(transparent)]
//!     Downstream(#[from] Downstream),
//! }
//! ```
//!
//! With `From<CallError<E>>` in place, `inventory.reserve(item).await.map_err(Downstream::from)?`
//! inside the handler is all it takes.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::CallError;

/// A call a provider made to another service failed; what its caller needs to know of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Downstream {
    /// The call that failed, as `service.function/arity`.
    pub call: String,
    /// The node it was last sent to, if any.
    pub provider: Option<String>,
    /// How it failed, in a few words: the reason or kind (`no service`, `timeout`), or
    /// `application error` when its provider returned its own error.
    pub kind: String,
    /// Whether calling again later may succeed.
    pub transient: bool,
    /// Whether the function may have run although the call failed.
    pub may_have_run: bool,
    /// The failed call's whole message, with its attempts.
    pub message: String,
}

impl<E: fmt::Display> From<CallError<E>> for Downstream {
    fn from(error: CallError<E>) -> Self {
        let kind = match &error {
            CallError::App { .. } => "application error".to_owned(),
            CallError::Service(e) => e.reason().to_string(),
            CallError::Rpc(e) => e.kind().to_string(),
        };
        let report = error.report();
        let (call, provider) = (
            report.call.clone(),
            report.provider.as_ref().map(|p| p.node.clone()),
        );
        Self {
            call,
            provider,
            kind,
            transient: error.is_transient(),
            may_have_run: error.may_have_run(),
            message: error.to_string(),
        }
    }
}

impl fmt::Display for Downstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.call.is_empty() {
            // From a build whose application errors carried no report, hence no call name.
            write!(f, "a downstream call failed: {}", self.kind)?;
        } else {
            write!(f, "the downstream call {} failed: {}", self.call, self.kind)?;
        }
        if let Some(node) = &self.provider {
            write!(f, " (at {node})")?;
        }
        for line in self.message.lines() {
            write!(f, "\n  | {line}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Downstream {}
