use std::fmt;

use super::CallReport;

/// How a call failed to get through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RpcErrorKind {
    /// Attempts ran out of time. The function may or may not have run.
    Timeout,
    /// No connection to a provider could be made. The function did not run.
    NoConnection,
    /// The connection broke after the request was sent. The function may or may not have run.
    ConnectionLost,
    /// The request is larger than a frame may be, or its metadata over its bounds. The
    /// function did not run.
    TooLarge,
    /// The function ran, but its reply is larger than this caller reads.
    ReplyTooLarge,
    /// The reply could not be read: the two sides disagree on types or protocol.
    Protocol,
    /// The call was made inside a handler whose own call has ended (finished, timed out or
    /// given up by its caller), so its result has nobody to go to. It may have run.
    Cancelled,
    /// No provider tried could be trusted: the TLS handshake failed (a certificate of another
    /// CA or cluster, or a plaintext peer). The function did not run.
    Untrusted,
    /// A provider's certificate named another node than its registry entry, and no other
    /// provider answered. The function did not run.
    WrongPeer,
    /// An attempt failed in a way that is retried, and its retry would have taken this node's
    /// retries of the service past their share of its calls (retry throttling,
    /// `CallOptions::retry_ratio`): the call failed at once instead. Whether it may have run
    /// is the failed attempt's ([`RpcError::may_have_run`]); the detail says how it failed.
    RetryThrottled,
    /// The caller's own options allow no attempt: a timeout or a budget of zero, given to the
    /// call or to the client's defaults. Refused at once; the function did not run.
    InvalidOptions,
}

impl RpcErrorKind {
    /// The kind in a few words.
    pub fn as_str(self) -> &'static str {
        match self {
            RpcErrorKind::Timeout => "timeout",
            RpcErrorKind::NoConnection => "no connection",
            RpcErrorKind::ConnectionLost => "connection lost",
            RpcErrorKind::TooLarge => "too large",
            RpcErrorKind::ReplyTooLarge => "reply too large",
            RpcErrorKind::Protocol => "protocol error",
            RpcErrorKind::Cancelled => "cancelled",
            RpcErrorKind::Untrusted => "untrusted peer",
            RpcErrorKind::WrongPeer => "wrong peer",
            RpcErrorKind::RetryThrottled => "retry throttled",
            RpcErrorKind::InvalidOptions => "invalid call options",
        }
    }

    fn explanation(self) -> &'static str {
        match self {
            RpcErrorKind::Timeout => {
                "every attempt ran out of time; the function may or may not have run"
            }
            RpcErrorKind::NoConnection => {
                "no connection to a provider could be made; the function did not run"
            }
            RpcErrorKind::ConnectionLost => {
                "the connection broke after the request was sent; the function may or may not have run"
            }
            RpcErrorKind::TooLarge => "the request is larger than a frame may be; it was not sent",
            RpcErrorKind::ReplyTooLarge => {
                "the function ran, but its reply is larger than this caller reads; it was not retried"
            }
            RpcErrorKind::Cancelled => {
                "the handler this call was made in has ended, so the call was given up; it may have run"
            }
            RpcErrorKind::Untrusted => {
                "no provider tried could be trusted: the TLS handshake failed (another CA or cluster, or a node started insecure()); the function did not run"
            }
            RpcErrorKind::WrongPeer => {
                "the node at the registry entry's address presented another node's certificate; the function did not run"
            }
            RpcErrorKind::Protocol => {
                "the reply could not be read: client and provider disagree on the types or the wire protocol"
            }
            RpcErrorKind::RetryThrottled => {
                "an attempt failed, and retrying it would have taken this node's retries of the service past their share of its calls (retry throttling): a provider that fails every call is not sent a storm of retries"
            }
            RpcErrorKind::InvalidOptions => {
                "the call's options allow no attempt, so it was refused at once; nothing was sent"
            }
        }
    }
}

impl fmt::Display for RpcErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The call did not get through, or its result did not come back.
#[derive(Debug, Clone)]
pub struct RpcError {
    kind: RpcErrorKind,
    detail: String,
    report: Box<CallReport>,
    /// For `RetryThrottled`: whether the attempt that was not retried may have run.
    ran: bool,
    hint: Option<String>,
}

impl RpcError {
    pub(crate) fn new(kind: RpcErrorKind, detail: String, report: CallReport) -> Self {
        Self {
            kind,
            detail,
            report: Box::new(report),
            ran: false,
            hint: None,
        }
    }

    /// The error with `hint`, its own line after the detail.
    pub(crate) fn with_hint(mut self, hint: Option<String>) -> Self {
        self.hint = hint;
        self
    }

    /// A call whose retry was throttled, after an attempt that `ran` (may have run) or not.
    pub(crate) fn throttled(detail: String, report: CallReport, ran: bool) -> Self {
        Self {
            ran,
            ..Self::new(RpcErrorKind::RetryThrottled, detail, report)
        }
    }

    /// How.
    pub fn kind(&self) -> RpcErrorKind {
        self.kind
    }

    /// The transport's or codec's own words, if any.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// What the message suggests, if anything: for a `Timeout` or `ConnectionLost` that was
    /// not retried only because the function is not declared idempotent, that declaration.
    pub fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    /// The call's report: attempts, providers, timings.
    pub fn report(&self) -> &CallReport {
        &self.report
    }

    /// Whether the function may have run on a provider.
    pub fn may_have_run(&self) -> bool {
        // A budget that ran out before any attempt started: nothing was sent.
        if self.kind == RpcErrorKind::Timeout
            && self.report.attempts.is_empty()
            && self.report.attempts_left_out == 0
        {
            return false;
        }
        if self.kind == RpcErrorKind::RetryThrottled {
            return self.ran;
        }
        matches!(
            self.kind,
            RpcErrorKind::Timeout
                | RpcErrorKind::ConnectionLost
                | RpcErrorKind::Protocol
                | RpcErrorKind::ReplyTooLarge
                | RpcErrorKind::Cancelled
        )
    }

    /// Whether calling again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.kind,
            RpcErrorKind::Timeout
                | RpcErrorKind::NoConnection
                | RpcErrorKind::ConnectionLost
                | RpcErrorKind::RetryThrottled
        )
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "The call {} failed: {}", self.report.call, self.kind)?;
        writeln!(f)?;
        writeln!(f, "The reason was:")?;
        write!(f, "  {}", self.kind.explanation())?;
        if !self.detail.is_empty() {
            write!(f, "\n  {}", self.detail)?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "\n  {hint}")?;
        }
        writeln!(f)?;
        self.report.write_body(f)
    }
}

impl std::error::Error for RpcError {}
