//! What travels on a connection: the handshake ([`handshake`]), and the envelope of every call in
//! each wire version this build speaks ([`v1`], [`v2`]). `docs/wire.md` says what may change
//! without a new version and what needs one.
//!
//! The call path works on the transport-neutral [`Envelope`] and [`Reply`] below; each wire
//! version only says how they are written and read.

pub(crate) mod handshake;
mod headers;
pub(crate) mod v1;
pub(crate) mod v2;

use std::borrow::Cow;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use crate::context::{Metadata, RequestId};

/// The wire versions this build speaks: 1, the envelope of the first release (no handshake, no
/// headers), and 2, a handshake and an envelope with a header map.
pub const WIRE_VERSIONS: RangeInclusive<u32> = 1..=2;

/// The highest version both ranges hold.
pub(crate) fn common(a: &RangeInclusive<u32>, b: &RangeInclusive<u32>) -> Option<u32> {
    let (low, high) = ((*a.start()).max(*b.start()), (*a.end()).min(*b.end()));
    (low <= high).then_some(high)
}

/// One call, the same on every attempt: shared by the attempts in an `Arc`, so a retry copies
/// nothing.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// The service's name.
    pub(crate) service: Cow<'static, str>,
    /// The function's name.
    pub(crate) function: Cow<'static, str>,
    /// [`signature_hash`](crate::service::signature_hash) of the function the client means.
    pub(crate) signature: u64,
    /// The arguments, encoded by [`encode`](crate::service::encode).
    pub(crate) args: Vec<u8>,
    /// The call's headers (wire 2 and later; wire 1 carries none of them).
    pub(crate) head: Head,
}

/// The headers that stay the same over a call's attempts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Head {
    /// The calling node's name.
    pub(crate) caller: Option<Arc<str>>,
    /// The call's id; inherited by calls made inside its handler.
    pub(crate) request_id: RequestId,
    /// The largest reply the caller can read, in bytes (its frame limit less the envelope).
    pub(crate) reply_limit: Option<u64>,
    /// What the caller set on the call.
    pub(crate) metadata: Metadata,
}

/// What changes from one attempt to the next.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AttemptHead {
    /// Which attempt, from 1.
    pub(crate) number: u32,
    /// The time left in the caller's whole budget when the attempt was sent.
    pub(crate) budget_left: Option<Duration>,
}

/// One attempt of a call, as a transport sends it.
#[derive(Debug, Clone)]
pub(crate) struct Envelope {
    pub(crate) request: Arc<Request>,
    pub(crate) attempt: AttemptHead,
}

/// What a provider answers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    /// The function ran; its encoded return value.
    Done(Vec<u8>),
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
}
