//! Wire version 2, after a [handshake](super::handshake): a request is `(service, function,
//! signature, (request id, attempt, budget left, reply limit), headers, args)` and a reply `(kind,
//! code, body, headers)`, both bincode inside the envelope's frame ([`super::envelope`]). What
//! every request carries is positional (cheap to write and read); the header map holds what may be
//! absent (metadata) and whatever later builds add. The caller is not a header: it is the node that
//! opened the connection, named in its handshake (and, with mutual TLS, proven by its certificate).
//! The header map ([`super::headers`]) is where new fields go; a reply kind this node does not know
//! is read as an undeliverable reply for that one call, never as a broken frame.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_bytes::Bytes;
use tokio::time::Instant;

use super::headers::{self, CALL_ID, METADATA, PINNED, RECALLED, TRACE};
use super::names::Name;
use super::{Head, Reply, Request, Traced};
use crate::context::{MAX_METADATA_BYTES, MAX_METADATA_ENTRIES, Metadata, RequestId, TraceParent};
use crate::service::Encoded;

/// Wire 2's one request, a call ([`envelope`](super::envelope)).
pub(crate) type WireRequest = super::envelope::CallRequest<RequestFrame>;

/// Wire 2's one response, a call's reply.
pub(crate) type WireResponse = super::envelope::CallResponse<ReplyFrame>;

impl super::envelope::Answered for RequestFrame {
    type Reply = ReplyFrame;
}

/// An attempt as wire 2 carries it. Written from the shared request without copying its
/// arguments; read back with one allocation for the arguments.
#[derive(Debug, Clone)]
pub(crate) struct RequestFrame(pub(crate) Arc<Request>);

/// A reply as wire 2 carries it.
#[derive(Debug, Clone)]
pub(crate) struct ReplyFrame(pub(crate) Reply);

impl From<ReplyFrame> for Reply {
    fn from(frame: ReplyFrame) -> Self {
        frame.0
    }
}

impl RequestFrame {
    /// The fourth field: the request id, the attempt, the budget left in microseconds and the
    /// reply limit (`u64::MAX` for either of the last two when unset).
    /// `now` is when the frame is written: the budget is sent as the time left then, and the
    /// receiver counts from when it reads it.
    pub(crate) fn core(&self, now: Instant) -> (u128, u32, u64, u64) {
        let request = &self.0;
        let head = &request.head;
        let budget = head.budget_deadline.map_or(NONE, |end| {
            let left = end.saturating_duration_since(now);
            u64::try_from(left.as_micros()).unwrap_or(NONE)
        });
        (
            head.request_id.0,
            request.attempt(),
            budget,
            head.reply_limit.unwrap_or(NONE),
        )
    }

    /// The fifth field, the header map's byte string, handed to `with`.
    pub(crate) fn with_headers<R>(&self, with: impl FnOnce(&[u8]) -> R) -> R {
        let (head, trace) = (&self.0.head, self.0.trace());
        let call_id = head.call_id.map(u128::to_le_bytes);
        let pinned = head.pinned.map(u64::to_le_bytes);
        let trace = trace.map(TraceParent::to_bytes);
        let present = [
            (!head.encoded_metadata.is_empty())
                .then_some((METADATA, head.encoded_metadata.as_slice())),
            call_id.as_ref().map(|id| (CALL_ID, &id[..])),
            pinned.as_ref().map(|generation| (PINNED, &generation[..])),
            trace.as_ref().map(|trace| (TRACE, &trace[..])),
        ];
        headers::encoded(&present, with)
    }
}

impl Serialize for RequestFrame {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let request = &self.0;
        let mut tuple = serializer.serialize_tuple(6)?;
        tuple.serialize_element(&*request.service)?;
        tuple.serialize_element(&*request.function)?;
        tuple.serialize_element(&request.signature)?;
        tuple.serialize_element(&self.core(Instant::now()))?;
        self.with_headers(|headers| tuple.serialize_element(Bytes::new(headers)))?;
        tuple.serialize_element(Bytes::new(&request.args))?;
        tuple.end()
    }
}

/// A core field a caller did not set (no budget, no reply limit).
const NONE: u64 = u64::MAX;

impl<'de> Deserialize<'de> for RequestFrame {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = RequestFrame;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a wire 2 request")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RequestFrame, A::Error> {
                let missing = || de::Error::custom("a wire 2 request is missing fields");
                let Name(service) = seq.next_element()?.ok_or_else(missing)?;
                let Name(function) = seq.next_element()?.ok_or_else(missing)?;
                let signature: u64 = seq.next_element()?.ok_or_else(missing)?;
                let core: (u128, u32, u64, u64) = seq.next_element()?.ok_or_else(missing)?;
                let mut head = head_of(core, Instant::now());
                seq.next_element_seed(ReadRequestHeaders(&mut head))?
                    .ok_or_else(missing)?;
                let args: Encoded = seq.next_element()?.ok_or_else(missing)?;
                Ok(RequestFrame::of(
                    (service, function, signature),
                    core.1,
                    head,
                    args,
                ))
            }
        }
        deserializer.deserialize_tuple(6, Fields)
    }
}

impl RequestFrame {
    /// The frame of a request read from its parts.
    pub(super) fn of(
        (service, function, signature): (
            std::borrow::Cow<'static, str>,
            std::borrow::Cow<'static, str>,
            u64,
        ),
        attempt: u32,
        head: Head,
        args: Encoded,
    ) -> Self {
        RequestFrame(Arc::new(Request {
            service,
            function,
            signature,
            args,
            head,
            attempt: AtomicU32::new(attempt),
        }))
    }
}

/// The head a request's fourth field, `(request id, attempt, budget left, reply limit)`, says,
/// read at `now`.
pub(super) fn head_of((id, _, budget, limit): (u128, u32, u64, u64), now: Instant) -> Head {
    Head {
        request_id: RequestId(id),
        // A budget too far out for the clock is no limit, never an overflow.
        budget_deadline: (budget != NONE)
            .then(|| crate::deadline::later(now, Duration::from_micros(budget))),
        reply_limit: (limit != NONE).then_some(limit),
        ..Head::default()
    }
}

/// Reads a request's header map, `bytes`, into `head`: a header it cannot read marks the
/// request invalid (refused on its own), never the frame.
pub(super) fn read_request_headers(head: &mut Head, bytes: &[u8]) {
    head.invalid = headers::walk(bytes, &mut |key, value| request_header(head, key, value));
}

struct ReadRequestHeaders<'a>(&'a mut Head);

impl<'de> DeserializeSeed<'de> for ReadRequestHeaders<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        let head = self.0;
        let problem = headers::read(deserializer, |key, value| request_header(head, key, value))?;
        head.invalid = problem;
        Ok(())
    }
}

/// One header of a request, into `head`.
fn request_header(head: &mut Head, key: u16, value: &[u8]) -> Result<(), String> {
    if key == METADATA {
        // Bounded before it is decoded: a peer cannot make this node build more.
        if value.len() > MAX_METADATA_BYTES + 8 * MAX_METADATA_ENTRIES + 16 {
            return Err(format!(
                "the metadata is {} bytes, over its bounds ({MAX_METADATA_BYTES} bytes)",
                value.len()
            ));
        }
        let entries: Vec<(String, String)> = rmp_serde::from_slice(value)
            .map_err(|e| format!("the metadata cannot be read: {e}"))?;
        let metadata = Metadata::from_entries(entries);
        metadata.check().map_err(|e| e.to_string())?;
        head.metadata = metadata;
    } else if key == CALL_ID {
        let id: [u8; 16] = value
            .try_into()
            .map_err(|_| format!("a call id of {} bytes, not 16", value.len()))?;
        head.call_id = Some(u128::from_le_bytes(id));
    } else if key == PINNED {
        let generation: [u8; 8] = value
            .try_into()
            .map_err(|_| format!("a pinned generation of {} bytes, not 8", value.len()))?;
        head.pinned = Some(u64::from_le_bytes(generation));
    } else if key == TRACE {
        head.trace = Some(Traced::new(TraceParent::from_bytes(value)?));
    }
    Ok(())
}

/// Reply kinds: stable numbers, so peers of other builds agree. A new kind is a new number.
mod kind {
    pub(super) const DONE: u16 = 0;
    pub(super) const REFUSED: u16 = 1;
    pub(super) const PANICKED: u16 = 2;
    pub(super) const TOO_LARGE: u16 = 3;
    pub(super) const UNDELIVERABLE: u16 = 4;
    pub(super) const EXPIRED: u16 = 5;
    pub(super) const INTERRUPTED: u16 = 6;
}

impl ReplyFrame {
    /// What the frame carries: the reply's kind, its code, its body, and whether it is recalled
    /// from the provider's record (its one header).
    pub(crate) fn parts(&self) -> (u16, u16, &[u8], bool) {
        let (reply, recalled) = match &self.0 {
            Reply::Recalled(reply) => (&**reply, true),
            reply => (reply, false),
        };
        let (kind, code, body): (u16, u16, &[u8]) = match reply {
            Reply::Done(bytes) => (kind::DONE, 0, bytes),
            Reply::Refused(code, detail) => (kind::REFUSED, *code, detail.as_bytes()),
            Reply::Panicked(message) => (kind::PANICKED, 0, message.as_bytes()),
            Reply::TooLarge(detail) => (kind::TOO_LARGE, 0, detail.as_bytes()),
            Reply::Undeliverable(detail) => (kind::UNDELIVERABLE, 0, detail.as_bytes()),
            Reply::Expired => (kind::EXPIRED, 0, &[]),
            Reply::Interrupted(detail) => (kind::INTERRUPTED, 0, detail.as_bytes()),
            // A record holds what the handler answered, never a recalled reply.
            Reply::Recalled(_) => (
                kind::UNDELIVERABLE,
                0,
                &b"a recalled reply inside another"[..],
            ),
        };
        (kind, code, body, recalled)
    }
}

impl Serialize for ReplyFrame {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (kind, code, body, recalled) = self.parts();
        let mut tuple = serializer.serialize_tuple(4)?;
        tuple.serialize_element(&kind)?;
        tuple.serialize_element(&code)?;
        tuple.serialize_element(Bytes::new(body))?;
        tuple.serialize_element(&ReplyHeaders(recalled))?;
        tuple.end()
    }
}

/// A reply's headers: whether it is recalled from the provider's record.
struct ReplyHeaders(bool);

impl Serialize for ReplyHeaders {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let recalled = self.0.then_some((RECALLED, &[][..]));
        headers::write(&[recalled], serializer)
    }
}

/// Reads a reply's headers: whether it was recalled; keys this node does not know are skipped.
struct ReadReplyHeaders;

impl<'de> DeserializeSeed<'de> for ReadReplyHeaders {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        let mut recalled = false;
        headers::read(deserializer, |key, _| {
            recalled |= key == RECALLED;
            Ok(())
        })?;
        Ok(recalled)
    }
}

impl<'de> Deserialize<'de> for ReplyFrame {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = ReplyFrame;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a wire 2 reply")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ReplyFrame, A::Error> {
                let missing = || de::Error::custom("a wire 2 reply is missing fields");
                let kind: u16 = seq.next_element()?.ok_or_else(missing)?;
                let code: u16 = seq.next_element()?.ok_or_else(missing)?;
                let body: Encoded = seq.next_element()?.ok_or_else(missing)?;
                let recalled = seq
                    .next_element_seed(ReadReplyHeaders)?
                    .ok_or_else(missing)?;
                let text = || String::from_utf8_lossy(&body).into_owned();
                let reply = match kind {
                    kind::DONE => Reply::Done(body),
                    kind::REFUSED => Reply::Refused(code, text()),
                    kind::PANICKED => Reply::Panicked(text()),
                    kind::TOO_LARGE => Reply::TooLarge(text()),
                    kind::UNDELIVERABLE => Reply::Undeliverable(text()),
                    kind::EXPIRED => Reply::Expired,
                    kind::INTERRUPTED => Reply::Interrupted(text()),
                    other => Reply::Undeliverable(format!(
                        "the provider answered with a reply of kind {other}, which this node does not know: {}",
                        text()
                    )),
                };
                Ok(ReplyFrame(if recalled {
                    Reply::Recalled(std::sync::Arc::new(reply))
                } else {
                    reply
                }))
            }
        }
        deserializer.deserialize_tuple(4, Fields)
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;

    use tarpc::tokio_serde::formats::Bincode;
    use tarpc::tokio_serde::{Deserializer as _, Serializer as _};

    use super::*;

    fn request() -> Arc<Request> {
        let mut metadata = Metadata::new();
        metadata.insert("tenant", "acme");
        Arc::new(Request {
            service: "search".into(),
            function: "search".into(),
            signature: 42,
            args: vec![1, 2, 3].into(),
            head: Head {
                caller: Some("web-1".into()),
                request_id: RequestId(7 << 70 | 9),
                reply_limit: Some(1 << 20),
                budget_deadline: Some(Instant::now() + Duration::from_millis(1500)),
                encoded_metadata: crate::transport::wire::encode_metadata(&metadata),
                metadata,
                invalid: None,
                frame_id: None,
                call_id: Some(u128::MAX - 5),
                pinned: Some(77),
                trace: Some(Box::new(Traced {
                    call: TraceParent::new(u128::MAX - 1, 5, true).unwrap(),
                    // The third attempt's span: the provider's parent, in place of the call's.
                    span: std::sync::atomic::AtomicU64::new(u64::MAX - 2),
                })),
            },
            attempt: AtomicU32::new(3),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_reads_back_as_written() {
        let mut codec = Bincode::<RequestFrame, RequestFrame>::default();
        let sent = request();
        let bytes = Pin::new(&mut codec)
            .serialize(&RequestFrame(sent.clone()))
            .unwrap();
        let got = Pin::new(&mut codec)
            .deserialize(&bytes[..].into())
            .unwrap()
            .0;
        assert_eq!(got.service, sent.service);
        assert_eq!(got.args, sent.args);
        assert_eq!(
            got.head.caller, None,
            "the caller is the connection's, not a header"
        );
        assert_eq!(got.head.request_id, sent.head.request_id);
        assert_eq!(got.head.reply_limit, Some(1 << 20));
        assert_eq!(got.head.metadata.get("tenant"), Some("acme"));
        assert_eq!(got.attempt(), 3);
        assert_eq!(got.head.budget_deadline, sent.head.budget_deadline);
        assert_eq!(got.head.call_id, Some(u128::MAX - 5));
        assert_eq!(got.head.pinned, Some(77));
        assert_eq!(
            got.trace(),
            TraceParent::new(u128::MAX - 1, u64::MAX - 2, true)
        );
    }

    #[test]
    fn unknown_header_keys_are_skipped_and_bad_known_ones_refused() {
        // A request from a later build: one header this build does not know.
        struct Later;
        impl Serialize for Later {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut tuple = serializer.serialize_tuple(6)?;
                tuple.serialize_element("search")?;
                tuple.serialize_element("search")?;
                tuple.serialize_element(&42u64)?;
                tuple.serialize_element(&(1u128, 2u32, NONE, NONE))?;
                tuple.serialize_element(&Raw(&[Some((999, b"trace"))]))?;
                tuple.serialize_element(Bytes::new(&[1, 2]))?;
                tuple.end()
            }
        }
        struct Raw<'a>(&'a [Option<(u16, &'a [u8])>]);
        impl Serialize for Raw<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                headers::write(self.0, serializer)
            }
        }
        let bytes = bincode_of(&Later);
        let got = Pin::new(&mut Bincode::<RequestFrame, RequestFrame>::default())
            .deserialize(&bytes[..].into())
            .unwrap()
            .0;
        assert_eq!(got.attempt(), 2);
        assert_eq!(got.args, [1, 2]);

        struct Broken;
        impl Serialize for Broken {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut tuple = serializer.serialize_tuple(6)?;
                tuple.serialize_element("s")?;
                tuple.serialize_element("f")?;
                tuple.serialize_element(&1u64)?;
                tuple.serialize_element(&(1u128, 1u32, NONE, NONE))?;
                tuple.serialize_element(&Raw(&[Some((METADATA, b"\xc1"))]))?;
                tuple.serialize_element(Bytes::new(&[]))?;
                tuple.end()
            }
        }
        let bytes = bincode_of(&Broken);
        let got = Pin::new(&mut Bincode::<RequestFrame, RequestFrame>::default())
            .deserialize(&bytes[..].into())
            .expect("the frame is read; the request is refused on its own");
        let invalid = got.0.head.invalid.as_deref().unwrap();
        assert!(invalid.contains("metadata cannot be read"), "{invalid}");
    }

    #[test]
    fn every_reply_reads_back_and_an_unknown_kind_is_undeliverable() {
        let mut codec = Bincode::<ReplyFrame, ReplyFrame>::default();
        for reply in [
            Reply::Done(vec![9, 9].into()),
            Reply::Refused(6, "draining".into()),
            Reply::Panicked("boom".into()),
            Reply::TooLarge("big".into()),
            Reply::Undeliverable("no".into()),
            Reply::Expired,
            Reply::Interrupted("stopped".into()),
            Reply::Recalled(std::sync::Arc::new(Reply::Done(vec![1].into()))),
            Reply::Recalled(std::sync::Arc::new(Reply::Panicked("boom".into()))),
        ] {
            let bytes = Pin::new(&mut codec)
                .serialize(&ReplyFrame(reply.clone()))
                .unwrap();
            let back = Pin::new(&mut codec).deserialize(&bytes[..].into()).unwrap();
            assert_eq!(back.0, reply);
        }
        let later = bincode_of(&(
            77u16,
            0u16,
            Bytes::new(b"news"),
            Vec::<(u16, serde_bytes::ByteBuf)>::new(),
        ));
        let back = Pin::new(&mut codec).deserialize(&later[..].into()).unwrap();
        assert!(
            matches!(back.0, Reply::Undeliverable(d) if d.contains("kind 77") && d.contains("news"))
        );
    }

    fn bincode_of<T: Serialize + Unpin>(value: &T) -> Vec<u8> {
        let mut codec = Bincode::<(), T>::default();
        Pin::new(&mut codec).serialize(value).unwrap().to_vec()
    }
}

#[cfg(test)]
mod properties {
    use std::pin::Pin;

    use proptest::prelude::*;
    use tarpc::tokio_serde::formats::Bincode;
    use tarpc::tokio_serde::{Deserializer as _, Serializer as _};

    use super::*;

    fn metadata() -> impl Strategy<Value = Metadata> {
        proptest::collection::vec((".{0,12}", ".{0,40}"), 0..6)
            .prop_map(|entries| entries.into_iter().collect())
    }

    /// A core field as a caller sets it: absent, or any value but the one that means absent.
    fn field() -> impl Strategy<Value = Option<u64>> {
        prop_oneof![Just(None), (0..NONE).prop_map(Some)]
    }

    /// How far out a budget is read at most (`deadline.rs`'s "no limit"), in µs.
    const FAR_MICROS: u64 = 100 * 365 * 24 * 3600 * 1_000_000;

    fn reply() -> impl Strategy<Value = Reply> {
        prop_oneof![
            any::<Vec<u8>>().prop_map(|d| Reply::Done(Encoded::from_slice(&d))),
            (any::<u16>(), any::<String>()).prop_map(|(code, d)| Reply::Refused(code, d)),
            any::<String>().prop_map(Reply::Panicked),
            any::<String>().prop_map(Reply::TooLarge),
            any::<String>().prop_map(Reply::Undeliverable),
            Just(Reply::Expired),
            any::<String>().prop_map(Reply::Interrupted),
            any::<Vec<u8>>().prop_map(|d| {
                Reply::Recalled(std::sync::Arc::new(Reply::Done(Encoded::from_slice(&d))))
            }),
        ]
    }

    proptest! {
        #[test]
        fn any_request_reads_back_as_written(
            service in any::<String>(),
            function in any::<String>(),
            signature in any::<u64>(),
            args in any::<Vec<u8>>(),
            id in any::<u128>(),
            attempt in any::<u32>(),
            limit in field(),
            budget in field(),
            metadata in metadata(),
        ) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            // With the clock paused, time left is written and read at the same instant.
            let (sent, got) = rt.block_on(async {
                let sent = Request {
                    service: service.into(),
                    function: function.into(),
                    signature,
                    args: Encoded::from_slice(&args),
                    head: Head {
                        request_id: RequestId(id),
                        reply_limit: limit,
                        budget_deadline: budget
                            .map(|micros| Instant::now() + Duration::from_micros(micros)),
                        encoded_metadata: crate::transport::wire::encode_metadata(&metadata),
                        metadata,
                        ..Head::default()
                    },
                    attempt: AtomicU32::new(attempt),
                };
                let frame = RequestFrame(Arc::new(sent.clone()));
                let mut codec = Bincode::<RequestFrame, RequestFrame>::default();
                let bytes = Pin::new(&mut codec).serialize(&frame).unwrap();
                let got = Pin::new(&mut codec).deserialize(&bytes[..].into()).unwrap();
                (sent, got.0)
            });
            prop_assert_eq!(
                (&got.service, &got.function, got.signature, &got.args, got.attempt()),
                (&sent.service, &sent.function, sent.signature, &sent.args, sent.attempt())
            );
            let (got, sent) = (&got.head, &sent.head);
            // A budget further out than "no limit" reads as "no limit".
            let far = budget.filter(|&micros| micros > FAR_MICROS).map(|micros| {
                Duration::from_micros(micros) - Duration::from_micros(FAR_MICROS)
            });
            let expected = sent.budget_deadline.map(|end| end - far.unwrap_or_default());
            prop_assert_eq!(
                (got.request_id, got.reply_limit, got.budget_deadline, &got.invalid),
                (sent.request_id, sent.reply_limit, expected, &None)
            );
            prop_assert_eq!(got.metadata.entries(), sent.metadata.entries());
        }

        #[test]
        fn any_reply_reads_back_as_written(reply in reply()) {
            let mut codec = Bincode::<ReplyFrame, ReplyFrame>::default();
            let bytes = Pin::new(&mut codec).serialize(&ReplyFrame(reply.clone())).unwrap();
            let back = Pin::new(&mut codec).deserialize(&bytes[..].into()).unwrap();
            prop_assert_eq!(back.0, reply);
        }

        #[test]
        fn any_bytes_are_a_request_or_an_error_never_a_panic(bytes in any::<Vec<u8>>()) {
            let mut codec = Bincode::<RequestFrame, ReplyFrame>::default();
            let _ = Pin::new(&mut codec).deserialize(&bytes[..].into());
            let mut codec = Bincode::<ReplyFrame, ReplyFrame>::default();
            let _ = Pin::new(&mut codec).deserialize(&bytes[..].into());
        }
    }
}
