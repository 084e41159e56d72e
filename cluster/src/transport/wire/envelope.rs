//! The envelope every frame's message travels in, in both wire versions: a request with its
//! id and deadline, a cancel, a response to an id. These are tarpc 0.38's `ClientMessage`,
//! `Request`, `Context` and `Response`, written by bincode 1's default options (variable-length
//! integers), byte for byte: nodes of earlier releases, which ran tarpc, read and write the
//! same frames (tests in this file check it against tarpc itself, a dev-dependency).
//!
//! Defined here rather than taken from tarpc, because tarpc brings its client, its server and
//! OpenTelemetry into every build of a user's service for four plain types.
//!
//! 1. A request: `ClientMessage::Request` (variant 0), its context (the deadline as the time
//!    left, a `Duration`: seconds then nanoseconds; a trace context of 16 + 8 + 1 bytes that
//!    this build writes empty and ignores, its own trace travelling in the wire 2 headers), its
//!    id, then the call: `Call` (variant 0) and the wire version's request frame.
//! 2. A cancel: variant 1, a trace context, the id of the request to stop.
//! 3. A response: the request's id, then `Ok` and `Call` (variants 0 and 0) and the wire
//!    version's reply frame, or `Err` (variant 1) and a `ServerError` (an `io::ErrorKind` as a
//!    number, a text), which earlier releases sent when they refused a request before its
//!    handler ran.
//!
//! A deadline read from the wire is at most a year away (`MAX_DEADLINE`): a peer that sends
//! `u64::MAX` seconds gets a far deadline, not an overflow.

use std::io;
use std::time::Duration;

use bincode::Options;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tokio::time::Instant;

/// A message from a caller to a provider.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ClientMessage<T> {
    Request(Request<T>),
    Cancel {
        #[serde(default)]
        trace_context: TraceContext,
        request_id: u64,
    },
}

/// A request: its context, its id on the connection, its call.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Request<T> {
    pub(crate) context: Context,
    pub(crate) id: u64,
    pub(crate) message: T,
}

/// What a request carries beside its call: when it ends, and a trace context.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Context {
    /// Written as the time left when the frame is written; read as that much from when it is
    /// read, on this node's clock.
    #[serde(with = "time_left")]
    pub(crate) deadline: Instant,
    pub(crate) trace_context: TraceContext,
}

impl Context {
    /// The context of a request that ends at `deadline`.
    pub(crate) fn until(deadline: Instant) -> Self {
        Self {
            deadline,
            trace_context: TraceContext::default(),
        }
    }
}

/// tarpc's trace context: a 128-bit trace id (16 little-endian bytes), a span id and whether
/// it was sampled. Carried for the frame's layout; this build's traces travel in the wire 2
/// headers (`headers.rs`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TraceContext {
    pub(crate) trace_id: [u8; 16],
    pub(crate) span_id: u64,
    pub(crate) sampling_decision: SamplingDecision,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum SamplingDecision {
    Sampled,
    #[default]
    Unsampled,
}

/// A provider's answer to the request of id `request_id`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Response<T> {
    pub(crate) request_id: u64,
    pub(crate) message: Result<T, ServerError>,
}

/// A refusal before the handler ran (earlier releases' tarpc server, when it throttled).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ServerError {
    /// A number for an `io::ErrorKind`, as sent (tarpc wrote an `i32`'s bytes where it read a
    /// `u32`): not read by this crate.
    pub(crate) kind: u32,
    pub(crate) detail: String,
}

/// The one request of a wire version, as `#[tarpc::service]` named it for a trait with one
/// function, `call`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum CallRequest<F> {
    Call { request: F },
}

/// The one response of a wire version.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum CallResponse<F> {
    Call(F),
}

/// A wire version's request frame, and the reply frame that answers it.
pub(crate) trait Answered {
    type Reply;
}

/// The time left before `deadline` as a request carries it: at most a year (`MAX_DEADLINE`),
/// which is "no limit" (earlier releases' tarpc panicked on deadlines a couple of years out).
pub(crate) fn left_until(deadline: Instant, now: Instant) -> Duration {
    deadline
        .saturating_duration_since(now)
        .min(crate::transport::tcp::MAX_DEADLINE)
}

/// The deadline of a request read at `now` with `left` to go: at most a year away.
pub(crate) fn time_left_read(now: Instant, left: Duration) -> Instant {
    crate::deadline::later(now, left.min(crate::transport::tcp::MAX_DEADLINE))
}

/// Serde for a deadline as the time left (`Duration`'s own layout).
mod time_left {
    use super::*;

    pub(super) fn serialize<S: Serializer>(deadline: &Instant, s: S) -> Result<S::Ok, S::Error> {
        left_until(*deadline, Instant::now()).serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Instant, D::Error> {
        Ok(time_left_read(Instant::now(), Duration::deserialize(d)?))
    }
}

/// bincode 1's default options, as tokio-serde's codec used them for tarpc's frames:
/// variable-length little-endian integers, no trailing bytes.
fn options() -> impl Options {
    bincode::DefaultOptions::new()
}

/// `message` read from a frame's body.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(frame: &[u8]) -> io::Result<T> {
    options()
        .deserialize(frame)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// `message` appended to `out` as a frame's body.
pub(crate) fn encode_into(message: &impl Serialize, out: &mut impl io::Write) -> io::Result<()> {
    options()
        .serialize_into(out, message)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// `message` as a frame's body.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn encode(message: &impl Serialize) -> Vec<u8> {
    options().serialize(message).expect("a message encodes")
}

#[cfg(test)]
mod tests {
    //! The same bytes as tarpc's types written by tokio-serde's bincode codec, both ways.

    use proptest::prelude::*;
    use tarpc::tokio_serde::formats::Bincode;
    use tarpc::tokio_serde::{Deserializer as _, Serializer as _};
    use tokio_util::bytes::BytesMut;

    use super::*;

    type Body = (u32, String, serde_bytes::ByteBuf);

    fn tarpc_writes<T: Serialize + serde::de::DeserializeOwned + Unpin>(message: &T) -> Vec<u8> {
        let mut codec = Bincode::<T, T>::default();
        std::pin::Pin::new(&mut codec)
            .serialize(message)
            .unwrap()
            .to_vec()
    }

    fn tarpc_reads<T: Serialize + serde::de::DeserializeOwned + Unpin>(bytes: &[u8]) -> T {
        let mut codec = Bincode::<T, T>::default();
        std::pin::Pin::new(&mut codec)
            .deserialize(&BytesMut::from(bytes))
            .unwrap()
    }

    fn tarpc_context(secs: u64, trace: u128, span: u64, sampled: bool) -> tarpc::context::Context {
        let mut context = tarpc::context::current();
        context.deadline = std::time::Instant::now() + Duration::from_secs(secs);
        context.trace_context.trace_id = trace.into();
        context.trace_context.span_id = span.into();
        context.trace_context.sampling_decision = if sampled {
            tarpc::trace::SamplingDecision::Sampled
        } else {
            tarpc::trace::SamplingDecision::Unsampled
        };
        context
    }

    fn ours(secs: u64, trace: u128, span: u64, sampled: bool) -> Context {
        Context {
            deadline: Instant::now() + Duration::from_secs(secs),
            trace_context: TraceContext {
                trace_id: trace.to_le_bytes(),
                span_id: span,
                sampling_decision: if sampled {
                    SamplingDecision::Sampled
                } else {
                    SamplingDecision::Unsampled
                },
            },
        }
    }

    fn mine_context_trace(trace: u128, span: u64, sampled: bool) -> TraceContext {
        ours(1, trace, span, sampled).trace_context
    }

    /// The bytes after the deadline's seconds and nanoseconds (which differ by the time
    /// between the two writes) and the rest of the frame.
    fn past_deadline(bytes: &[u8]) -> (u64, &[u8]) {
        let options = bincode::DefaultOptions::new();
        let mut reader = &bytes[1..];
        let (secs, _nanos): (u64, u32) = options.deserialize_from(&mut reader).unwrap();
        (secs, reader)
    }

    // tarpc's own request and response enums for a service of one function, `call`.
    #[tarpc::service]
    trait Wire {
        async fn call(request: Body) -> Body;
    }

    proptest! {
        #[test]
        fn a_request_is_written_and_read_as_tarpc_does(
            secs in 1u64..1_000_000, trace: u128, span: u64, sampled: bool, id: u64,
            body: (u32, String, Vec<u8>),
        ) {
            let body: Body = (body.0, body.1, serde_bytes::ByteBuf::from(body.2));
            let theirs = tarpc::ClientMessage::Request(tarpc::Request {
                context: tarpc_context(secs, trace, span, sampled),
                id,
                message: WireRequest::Call { request: body.clone() },
            });
            let mine = ClientMessage::Request(Request {
                context: ours(secs, trace, span, sampled),
                id,
                message: CallRequest::Call { request: body.clone() },
            });
            let (theirs_bytes, mine_bytes) = (tarpc_writes(&theirs), encode(&mine));
            // The deadline is the time left when written: a second apart at most.
            let (their_secs, their_rest) = past_deadline(&theirs_bytes);
            let (my_secs, my_rest) = past_deadline(&mine_bytes);
            prop_assert!(their_secs.abs_diff(my_secs) <= 1 && my_secs <= secs);
            prop_assert_eq!(their_rest, my_rest);
            // Each reads the other's.
            let read: ClientMessage<CallRequest<Body>> = decode(&theirs_bytes).unwrap();
            let ClientMessage::Request(read) = read else { panic!("a request") };
            prop_assert_eq!(read.id, id);
            prop_assert_eq!(read.context.trace_context, mine_context_trace(trace, span, sampled));
            let left = read.context.deadline.saturating_duration_since(Instant::now());
            prop_assert!(left <= Duration::from_secs(secs));
            prop_assert!(left + Duration::from_secs(2) >= Duration::from_secs(secs));
            let CallRequest::Call { request } = read.message;
            prop_assert_eq!(request, body.clone());
            let theirs: tarpc::ClientMessage<WireRequest> = tarpc_reads(&mine_bytes);
            let tarpc::ClientMessage::Request(theirs) = theirs else { panic!("a request") };
            prop_assert_eq!(theirs.id, id);
            prop_assert_eq!(theirs.context.trace_context, tarpc_context(1, trace, span, sampled).trace_context);
            let WireRequest::Call { request } = theirs.message;
            prop_assert_eq!(request, body);
        }

        #[test]
        fn a_cancel_and_a_response_are_the_same_bytes_as_tarpcs(
            id: u64, trace: u128, span: u64, value: Vec<u8>, kind in 0u32..20, detail: String,
        ) {
            let cancel = ClientMessage::<CallRequest<Body>>::Cancel {
                trace_context: ours(1, trace, span, true).trace_context,
                request_id: id,
            };
            let theirs = tarpc::ClientMessage::<Body>::Cancel {
                trace_context: tarpc_context(1, trace, span, true).trace_context,
                request_id: id,
            };
            prop_assert_eq!(encode(&cancel), tarpc_writes(&theirs));
            let value: Body = (kind, detail.clone(), serde_bytes::ByteBuf::from(value));
            let done = Response { request_id: id, message: Ok(CallResponse::Call(value.clone())) };
            let theirs = tarpc::Response {
                request_id: id,
                message: Ok::<_, tarpc::ServerError>(WireResponse::Call(value)),
            };
            prop_assert_eq!(encode(&done), tarpc_writes(&theirs));
            let refused = Response::<CallResponse<()>> {
                request_id: id,
                message: Err(ServerError { kind, detail: detail.clone() }),
            };
            // Only the detail counts: tarpc writes the kind as an `i32` (zigzag) and reads a
            // `u32`, so its own kinds do not read back; this crate reads the detail alone.
            let read: tarpc::Response<CallResponse<()>> = tarpc_reads(&encode(&refused));
            let read = read.message.unwrap_err();
            prop_assert_eq!(&read.detail, &detail);
            let back = tarpc_writes(&tarpc::Response::<CallResponse<()>> {
                request_id: id,
                message: Err(read),
            });
            let back: Response<CallResponse<()>> = decode(&back).unwrap();
            prop_assert_eq!(back.message.unwrap_err().detail, detail);
        }
    }

    #[test]
    fn an_absurd_deadline_reads_as_a_far_one() {
        // Variant 0, then `u64::MAX` seconds (tag 253 and 8 bytes), 0 nanoseconds.
        let mut frame = vec![0u8, 253];
        frame.extend_from_slice(&u64::MAX.to_le_bytes());
        frame.push(0);
        frame.extend_from_slice(&encode(&TraceContext::default()));
        frame.push(7);
        frame.extend_from_slice(&encode(&CallRequest::Call { request: 1u8 }));
        let read: ClientMessage<CallRequest<u8>> = decode(&frame).unwrap();
        let ClientMessage::Request(read) = read else {
            panic!("a request")
        };
        assert_eq!(read.id, 7);
        let left = read.context.deadline - Instant::now();
        assert!(
            left > Duration::from_secs(3600 * 24 * 364)
                && left <= crate::transport::tcp::MAX_DEADLINE
        );
        let nanos_overflow = [
            0u8, 253, 255, 255, 255, 255, 255, 255, 255, 255, 252, 0xff, 0xff, 0xff, 0xff,
        ];
        assert!(decode::<ClientMessage<CallRequest<u8>>>(&nanos_overflow).is_err());
    }
}
