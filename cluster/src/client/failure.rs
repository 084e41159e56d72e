//! Step 5 of the call path: what one failed attempt means, and whether another may follow.

use super::peers::Seen;
use crate::error::{Reason, RpcErrorKind};
use crate::service::Encoded;
use crate::transport::{Reply, TransportError};

/// How one attempt failed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Failure {
    /// Provably never reached the provider's code: no connection, send failed.
    NotSent(String),
    /// Never sent: the provider did not finish opening a connection in time. It may be
    /// stalled rather than gone, so a pinned at-most-once retry asks it again.
    NoAnswer(String),
    /// Never sent: the peer said it is busy (its connection limit, or an earlier release's
    /// throttle).
    Busy(String),
    /// Never sent: this node's own in-flight limit to the peer stayed full.
    Queued(String),
    /// The provider refused it before running it.
    Refused(Reason, String),
    /// The deadline passed after it was sent: it may have run.
    Timeout,
    /// The connection broke after it was sent: it may have run.
    Lost(String),
    /// The provider's function panicked.
    Panicked(String),
    /// The function ran; its reply is larger than this caller reads.
    ReplyTooLarge(String),
    /// The reply could not be understood.
    Protocol(String),
    /// The peer could not be trusted (`Untrusted`) or is another node than the entry
    /// (`WrongPeer`): never sent, and that node is not tried again in this call.
    Untrusted(RpcErrorKind, String),
    /// An `at_most_once` call's earlier attempt was stopped mid-run, says the provider's
    /// record: it may have run, and is not run again.
    Interrupted(String),
}

impl Failure {
    /// The failure of a reply that is not `Done`, or of a transport error.
    pub(crate) fn of(result: Result<Reply, TransportError>) -> Result<Encoded, Failure> {
        match result {
            Ok(Reply::Done(bytes)) => Ok(bytes),
            Ok(Reply::Refused(code, detail)) => Err(match Reason::from_code(code) {
                Some(reason) => Failure::Refused(reason, detail),
                None => Failure::Protocol(format!(
                    "the provider refused with unknown code {code}: {detail}"
                )),
            }),
            Ok(Reply::Panicked(message)) => Err(Failure::Panicked(message)),
            Ok(Reply::TooLarge(detail)) => Err(Failure::ReplyTooLarge(detail)),
            Ok(Reply::Undeliverable(detail)) => Err(Failure::Protocol(detail)),
            Ok(Reply::Expired) => Err(Failure::Timeout),
            Ok(Reply::Interrupted(detail)) => Err(Failure::Interrupted(detail)),
            // Taken apart by the call path first (`attempt.rs`), which reports it.
            Ok(Reply::Recalled(reply)) => Failure::of(Ok(std::sync::Arc::unwrap_or_clone(reply))),
            Err(TransportError::NotSent(detail)) => Err(Failure::NotSent(detail)),
            Err(TransportError::NoAnswer(detail)) => Err(Failure::NoAnswer(detail)),
            Err(TransportError::Busy(detail)) => Err(Failure::Busy(detail)),
            Err(TransportError::Queued(detail)) => Err(Failure::Queued(detail)),
            Err(TransportError::Lost(detail)) => Err(Failure::Lost(detail)),
            Err(TransportError::Timeout) => Err(Failure::Timeout),
            Err(TransportError::WireVersion(detail)) => {
                Err(Failure::Refused(Reason::WireVersion, detail))
            }
            Err(TransportError::Untrusted(detail)) => {
                Err(Failure::Untrusted(RpcErrorKind::Untrusted, detail))
            }
            Err(TransportError::WrongPeer(detail)) => {
                Err(Failure::Untrusted(RpcErrorKind::WrongPeer, detail))
            }
        }
    }

    /// Whether another attempt is safe: anything that never ran may be retried for any function;
    /// what may have run, only for an idempotent one; the provider's own verdicts never.
    pub(crate) fn retryable(&self, idempotent: bool) -> bool {
        match self {
            Failure::NotSent(_)
            | Failure::NoAnswer(_)
            | Failure::Busy(_)
            | Failure::Queued(_)
            | Failure::Untrusted(..) => true,
            Failure::Refused(reason, _) => {
                reason.never_ran()
                    && !matches!(
                        reason,
                        Reason::BadArguments | Reason::Rejected | Reason::Unauthorized
                    )
            }
            Failure::Timeout | Failure::Lost(_) => idempotent,
            Failure::Panicked(_)
            | Failure::ReplyTooLarge(_)
            | Failure::Protocol(_)
            | Failure::Interrupted(_) => false,
        }
    }

    /// What the failure says of the provider's health, for failure accrual: a dead socket or a
    /// draining node ejects it at once; timeouts, panics and overload refusals (its own, a
    /// connection it refused as busy) count towards ejection; the rest (a stale registry entry,
    /// a wire or trust mismatch, a bad request, this node's own full in-flight limit) say
    /// nothing of whether it serves others well.
    pub(crate) fn seen(&self) -> Seen {
        match self {
            Failure::NotSent(_)
            | Failure::NoAnswer(_)
            | Failure::Lost(_)
            | Failure::Refused(Reason::Draining, _) => Seen::Unreachable,
            Failure::Timeout
            | Failure::Panicked(_)
            | Failure::Busy(_)
            | Failure::Refused(Reason::Overloaded, _) => Seen::Failed,
            Failure::Queued(_) => Seen::Neutral,
            Failure::ReplyTooLarge(_) | Failure::Interrupted(_) => Seen::Answered,
            Failure::Refused(..) | Failure::Protocol(_) | Failure::Untrusted(..) => Seen::Neutral,
        }
    }

    /// Whether it provably never ran: another replica may take it at once, without a pause.
    pub(crate) fn never_ran(&self) -> bool {
        match self {
            Failure::NotSent(_) | Failure::NoAnswer(_) | Failure::Busy(_) | Failure::Queued(_) => {
                true
            }
            Failure::Refused(reason, _) => reason.never_ran(),
            _ => false,
        }
    }

    /// Whether the node should not be tried again in this call: it speaks no wire version this
    /// node does, whatever its registry entry said.
    pub(crate) fn excludes_node(&self) -> bool {
        matches!(
            self,
            Failure::Refused(Reason::WireVersion, _) | Failure::Untrusted(..)
        )
    }

    /// The attempt's outcome in a few words, for the report.
    pub(crate) fn outcome(&self) -> String {
        match self {
            Failure::NotSent(d) | Failure::NoAnswer(d) | Failure::Busy(d) | Failure::Queued(d) => {
                format!("not sent: {d}")
            }
            Failure::Refused(r, _) => format!("refused: {r}"),
            Failure::Timeout => "timeout".to_owned(),
            Failure::Lost(_) => "connection lost".to_owned(),
            Failure::Panicked(_) => "panicked".to_owned(),
            Failure::ReplyTooLarge(_) => "reply too large".to_owned(),
            Failure::Protocol(_) => "protocol error".to_owned(),
            Failure::Untrusted(kind, d) => format!("{kind}: {d}"),
            Failure::Interrupted(_) => "stopped mid-run earlier, says the record".to_owned(),
        }
    }

    /// What the call's error says, if this was its last attempt.
    pub(crate) fn verdict(self) -> Verdict {
        match self {
            Failure::NotSent(d) | Failure::NoAnswer(d) | Failure::Queued(d) => {
                Verdict::Rpc(RpcErrorKind::NoConnection, d)
            }
            Failure::Busy(d) => Verdict::Service(Reason::Overloaded, d),
            Failure::Refused(reason, d) => Verdict::Service(reason, d),
            Failure::Timeout => Verdict::Rpc(RpcErrorKind::Timeout, String::new()),
            Failure::Lost(d) => Verdict::Rpc(RpcErrorKind::ConnectionLost, d),
            Failure::Panicked(message) => {
                Verdict::Service(Reason::Panicked, format!("panic message: {message}"))
            }
            Failure::ReplyTooLarge(d) => Verdict::Rpc(RpcErrorKind::ReplyTooLarge, d),
            Failure::Protocol(d) => Verdict::Rpc(RpcErrorKind::Protocol, d),
            Failure::Untrusted(kind, d) => Verdict::Rpc(kind, d),
            Failure::Interrupted(d) => Verdict::Rpc(RpcErrorKind::Timeout, d),
        }
    }
}

/// The kind of error a failure ends a call with.
pub(crate) enum Verdict {
    Service(Reason, String),
    Rpc(RpcErrorKind, String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_table() {
        let cases = [
            (Failure::NotSent("refused".into()), true, true),
            (Failure::NoAnswer("stalled".into()), true, true),
            (Failure::Busy("busy".into()), true, true),
            (Failure::Queued("full".into()), true, true),
            (
                Failure::Refused(Reason::Draining, String::new()),
                true,
                true,
            ),
            (
                Failure::Refused(Reason::Overloaded, String::new()),
                true,
                true,
            ),
            (
                Failure::Refused(Reason::NoFunction, String::new()),
                true,
                true,
            ),
            (
                Failure::Refused(Reason::BadArguments, String::new()),
                false,
                false,
            ),
            (
                Failure::Refused(Reason::Rejected, String::new()),
                false,
                false,
            ),
            (
                Failure::Refused(Reason::Unauthorized, String::new()),
                false,
                false,
            ),
            (
                Failure::Refused(Reason::WireVersion, String::new()),
                true,
                true,
            ),
            (Failure::Timeout, true, false),
            (Failure::Lost("reset".into()), true, false),
            (Failure::Panicked("boom".into()), false, false),
            (Failure::ReplyTooLarge(String::new()), false, false),
            (Failure::Protocol(String::new()), false, false),
        ];
        for (failure, idempotent, other) in cases {
            assert_eq!(
                failure.retryable(true),
                idempotent,
                "{failure:?} idempotent"
            );
            assert_eq!(
                failure.retryable(false),
                other,
                "{failure:?} not idempotent"
            );
        }
    }
}
