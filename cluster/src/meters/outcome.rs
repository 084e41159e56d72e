//! How a call or a request ended, as the `outcome` label says it: snake_case, one word per kind.

use crate::error::{CallError, Reason, RpcErrorKind};

/// How a call ended, on the caller's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The provider's `Ok` (or a plain return value).
    Ok,
    /// The provider's own `Err`.
    App,
    /// The caller dropped the call before it ended.
    Dropped,
    /// The framework's error of this kind.
    Rpc(RpcErrorKind),
    /// The framework's error for this reason.
    Service(Reason),
}

const RPC: [RpcErrorKind; 11] = [
    RpcErrorKind::Timeout,
    RpcErrorKind::NoConnection,
    RpcErrorKind::ConnectionLost,
    RpcErrorKind::TooLarge,
    RpcErrorKind::ReplyTooLarge,
    RpcErrorKind::Protocol,
    RpcErrorKind::Cancelled,
    RpcErrorKind::Untrusted,
    RpcErrorKind::WrongPeer,
    RpcErrorKind::RetryThrottled,
    RpcErrorKind::InvalidOptions,
];

const REASONS: [Reason; 10] = [
    Reason::NoService,
    Reason::NoVersion,
    Reason::NoFunction,
    Reason::Panicked,
    Reason::BadArguments,
    Reason::Draining,
    Reason::Overloaded,
    Reason::WireVersion,
    Reason::Rejected,
    Reason::Unauthorized,
];

impl Outcome {
    /// How many outcomes there are: one counter slot each.
    pub(crate) const COUNT: usize = 3 + RPC.len() + REASONS.len();

    /// The outcome of a call that ended with `error`.
    pub(crate) fn of<E>(error: &CallError<E>) -> Self {
        match error {
            CallError::App { .. } => Outcome::App,
            CallError::Service(e) => Outcome::Service(e.reason()),
            CallError::Rpc(e) => Outcome::Rpc(e.kind()),
        }
    }

    /// Its slot, below [`Self::COUNT`].
    pub(crate) fn index(self) -> usize {
        match self {
            Outcome::Ok => 0,
            Outcome::App => 1,
            Outcome::Dropped => 2,
            Outcome::Rpc(kind) => 3 + RPC.iter().position(|k| *k == kind).unwrap_or(0),
            Outcome::Service(reason) => {
                3 + RPC.len() + REASONS.iter().position(|r| *r == reason).unwrap_or(0)
            }
        }
    }

    /// The `outcome` label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::App => "app_error",
            Outcome::Dropped => "dropped",
            Outcome::Rpc(kind) => match kind {
                RpcErrorKind::Timeout => "timeout",
                RpcErrorKind::NoConnection => "no_connection",
                RpcErrorKind::ConnectionLost => "connection_lost",
                RpcErrorKind::TooLarge => "too_large",
                RpcErrorKind::ReplyTooLarge => "reply_too_large",
                RpcErrorKind::Protocol => "protocol",
                RpcErrorKind::Cancelled => "cancelled",
                RpcErrorKind::Untrusted => "untrusted",
                RpcErrorKind::WrongPeer => "wrong_peer",
                RpcErrorKind::RetryThrottled => "retry_throttled",
                RpcErrorKind::InvalidOptions => "invalid_options",
            },
            Outcome::Service(reason) => match reason {
                Reason::NoService => "no_service",
                Reason::NoVersion => "no_version",
                Reason::NoFunction => "no_function",
                Reason::Panicked => "panicked",
                Reason::BadArguments => "bad_arguments",
                Reason::Draining => "draining",
                Reason::Overloaded => "overloaded",
                Reason::WireVersion => "wire_version",
                Reason::Rejected => "rejected",
                Reason::Unauthorized => "unauthorized",
            },
        }
    }
}

/// How a request ended, on the provider's side (after its function was found).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Served {
    /// The handler returned: its value or its own error went back.
    Answered,
    /// The arguments could not be decoded.
    BadArguments,
    /// The reply was larger than the caller reads (or than a frame).
    ReplyTooLarge,
    /// The reply could not be encoded.
    Undeliverable,
    /// The handler panicked.
    Panicked,
    /// The handler was dropped before it ended: its caller gave up or its connection closed.
    Cancelled,
    /// The handler was stopped at its deadline.
    Expired,
    /// A provider layer refused it; the handler did not run.
    Rejected,
    /// The caller is not on the service's allow-list.
    Unauthorized,
    /// Answered from the record of at-most-once calls: it did not run again.
    Recalled,
}

impl Served {
    /// How many outcomes there are: one counter slot each.
    pub(crate) const COUNT: usize = 10;

    /// Its slot, below [`Self::COUNT`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The `outcome` label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Served::Answered => "answered",
            Served::BadArguments => "bad_arguments",
            Served::ReplyTooLarge => "reply_too_large",
            Served::Undeliverable => "undeliverable",
            Served::Panicked => "panicked",
            Served::Cancelled => "cancelled",
            Served::Expired => "expired",
            Served::Rejected => "rejected",
            Served::Unauthorized => "unauthorized",
            Served::Recalled => "recalled",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_has_a_slot_and_a_label_of_its_own() {
        let mut all = vec![Outcome::Ok, Outcome::App, Outcome::Dropped];
        all.extend(RPC.map(Outcome::Rpc));
        all.extend(REASONS.map(Outcome::Service));
        assert_eq!(all.len(), Outcome::COUNT);
        let slots: std::collections::BTreeSet<_> = all.iter().map(|o| o.index()).collect();
        let labels: std::collections::BTreeSet<_> = all.iter().map(|o| o.label()).collect();
        assert_eq!(slots.len(), Outcome::COUNT);
        assert_eq!(labels.len(), Outcome::COUNT);
        assert!(slots.iter().all(|s| *s < Outcome::COUNT));
        assert_eq!(Served::Recalled.index(), Served::COUNT - 1);
    }
}
