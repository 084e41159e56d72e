//! What travels on a connection: the handshake ([`handshake`]), and the envelope of every call in
//! each wire version this build speaks ([`v1`], [`v2`]). `docs/wire.md` says what may change
//! without a new version and what needs one.
//!
//! The call path works on the transport-neutral [`Envelope`] and [`Reply`] below; each wire
//! version only says how they are written and read.

pub(crate) mod envelope;
pub(crate) mod handshake;
mod headers;
pub(crate) mod names;
pub(crate) mod reader;
pub(crate) mod v1;
pub(crate) mod v2;

use std::borrow::Cow;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use tokio::time::Instant;

use crate::context::{Metadata, RequestId, TraceParent};
use crate::service::Encoded;

/// The wire versions this build speaks: 1, the envelope of the first release (no handshake, no
/// headers), and 2, a handshake and an envelope with a header map.
pub const WIRE_VERSIONS: RangeInclusive<u32> = 1..=2;

/// The highest version both ranges hold.
pub(crate) fn common(a: &RangeInclusive<u32>, b: &RangeInclusive<u32>) -> Option<u32> {
    let (low, high) = ((*a.start()).max(*b.start()), (*a.end()).min(*b.end()));
    (low <= high).then_some(high)
}

/// One call, shared by its attempts in an `Arc`: a retry copies nothing, and what the transport
/// moves through its queues for every request is one pointer.
#[derive(Debug)]
pub(crate) struct Request {
    /// The service's name.
    pub(crate) service: Cow<'static, str>,
    /// The function's name.
    pub(crate) function: Cow<'static, str>,
    /// [`signature_hash`](crate::service::signature_hash) of the function the client means.
    pub(crate) signature: u64,
    /// The arguments, encoded by [`encode_value`](crate::service::encode_value): inline in this
    /// request when they are short.
    pub(crate) args: Encoded,
    /// The call's headers (wire 2 and later; wire 1 carries none of them).
    pub(crate) head: Head,
    /// Which attempt this is, from 1: set before each is sent (0 from a wire 1 peer).
    pub(crate) attempt: AtomicU32,
}

impl Clone for Request {
    fn clone(&self) -> Self {
        Self {
            service: self.service.clone(),
            function: self.function.clone(),
            signature: self.signature,
            args: self.args.clone(),
            head: self.head.clone(),
            attempt: AtomicU32::new(self.attempt.load(Ordering::Relaxed)),
        }
    }
}

impl Request {
    /// Which attempt this is.
    pub(crate) fn attempt(&self) -> u32 {
        self.attempt.load(Ordering::Relaxed)
    }

    /// The trace context this attempt carries: the call's trace, under the attempt's span.
    pub(crate) fn trace(&self) -> Option<TraceParent> {
        self.head.trace.as_deref().map(Traced::parent)
    }
}

/// A traced call's place in its trace, as its request carries it. Boxed in [`Head`], so that
/// a call nothing traces carries one empty pointer: inline, these 40 bytes grew every request
/// and the futures that build one (`docs/benchmarks.md`, "Metrics").
#[derive(Debug)]
pub(crate) struct Traced {
    /// The call's trace; its parent is the call's span, unless the attempt has one (`span`).
    /// Read by a provider: the caller's attempt.
    pub(crate) call: TraceParent,
    /// The attempt's span id, the parent of the provider's handler span: set before each is
    /// sent (0: `call`'s parent stands).
    pub(crate) span: AtomicU64,
}

impl Traced {
    /// A call in `trace`, no attempt's span set yet.
    pub(crate) fn new(trace: TraceParent) -> Box<Self> {
        Box::new(Self {
            call: trace,
            span: AtomicU64::new(0),
        })
    }

    /// The trace context this attempt carries: the call's trace, under the attempt's span.
    pub(crate) fn parent(&self) -> TraceParent {
        match self.span.load(Ordering::Relaxed) {
            0 => self.call,
            span => self.call.child(span),
        }
    }
}

impl Clone for Traced {
    fn clone(&self) -> Self {
        Self {
            call: self.call,
            span: AtomicU64::new(self.span.load(Ordering::Relaxed)),
        }
    }
}

/// The call's headers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Head {
    /// The calling node's name: set by the caller for the in-memory network, and by the
    /// provider's side of a TCP connection from the name the peer gave in its handshake.
    pub(crate) caller: Option<Arc<str>>,
    /// The call's id; inherited by calls made inside its handler.
    pub(crate) request_id: RequestId,
    /// The largest reply the caller can read, in bytes (its frame limit less the envelope).
    pub(crate) reply_limit: Option<u64>,
    /// When the caller's whole budget ends, on this node's clock. It travels as time left
    /// (written when the frame is), so the two nodes' clocks need not agree.
    pub(crate) budget_deadline: Option<Instant>,
    /// What the caller set on the call.
    pub(crate) metadata: Metadata,
    /// The metadata as wire 2 carries it, encoded once per call by the caller (empty when
    /// there is none), not once per attempt and frame.
    pub(crate) encoded_metadata: Vec<u8>,
    /// Why a header of the request could not be read, if one could not: the provider refuses
    /// the request (and only it).
    pub(crate) invalid: Option<String>,
    /// On the provider's side of TCP, the id of the frame it arrived in: the reply's bytes are
    /// counted against that connection until they are written (`transport/tcp/budget.rs`).
    pub(crate) frame_id: Option<u64>,
    /// The call's own id, on all its attempts and only its own (not inherited): a provider of
    /// an `at_most_once` function keeps its record under it (`server/record.rs`).
    pub(crate) call_id: Option<u128>,
    /// The provider generation this attempt must reach: a retry of an `at_most_once` call
    /// after it may have run is answered only by the process it may have run on.
    pub(crate) pinned: Option<u64>,
    /// The call's trace (W3C trace context), if it is traced, and its attempt's span.
    pub(crate) trace: Option<Box<Traced>>,
}

/// What a provider answers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    /// The function ran; its encoded return value.
    Done(Encoded),
    /// The provider did not run the function: [`Reason::code`](crate::error::Reason), detail.
    Refused(u16, String),
    /// The function panicked; the panic message.
    Panicked(String),
    /// The function ran; its return value is larger than the caller can read.
    TooLarge(String),
    /// The function ran, but its result cannot be delivered (not encodable, or a reply this
    /// node cannot read).
    Undeliverable(String),
    /// The deadline passed while the function ran, or before it could start; it was stopped.
    /// (Over TCP the client has given up by then and never reads this; in memory it is how a
    /// timeout surfaces.)
    Expired,
    /// An `at_most_once` call's earlier attempt started and was stopped before it finished
    /// (its deadline, its caller's connection): it may have run, and is not run again.
    Interrupted(String),
    /// The reply of an earlier attempt of the same `at_most_once` call, from the provider's
    /// record: the function did not run again.
    Recalled(std::sync::Arc<Reply>),
}

impl Reply {
    /// About how many bytes it holds: what a provider counts while the reply waits to be sent.
    pub(crate) fn size(&self) -> usize {
        match self {
            Reply::Done(bytes) => bytes.len(),
            Reply::Refused(_, text)
            | Reply::Panicked(text)
            | Reply::TooLarge(text)
            | Reply::Undeliverable(text)
            | Reply::Interrupted(text) => text.len(),
            Reply::Expired => 0,
            Reply::Recalled(reply) => reply.size(),
        }
    }
}

/// The metadata as wire 2 carries it: MessagePack of `[[key, value], …]`; nothing when empty.
pub(crate) fn encode_metadata(metadata: &Metadata) -> Vec<u8> {
    if metadata.is_empty() {
        return Vec::new();
    }
    // Strings and a list of pairs always encode.
    rmp_serde::to_vec(metadata.entries()).unwrap_or_default()
}
