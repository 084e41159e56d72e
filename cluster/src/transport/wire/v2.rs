//! Wire version 2, after a [handshake](super::handshake): a request is
//! `(service, function, signature, headers, args)` and a reply `(kind, code, body, headers)`,
//! both bincode inside tarpc's frame. The caller is not a header: it is the node that opened the
//! connection, named in its handshake (and, with mutual TLS, proven by its certificate). The header map ([`super::headers`]) is where new fields
//! go; a reply kind this node does not know is read as an undeliverable reply for that one
//! call, never as a broken frame.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_bytes::{ByteBuf, Bytes};
use tokio::time::Instant;

use super::headers::{self, ATTEMPT, BUDGET_LEFT, METADATA, REPLY_LIMIT, REQUEST_ID};
use super::{Head, Reply, Request};
use crate::context::{MAX_METADATA_BYTES, MAX_METADATA_ENTRIES, Metadata, RequestId};

#[tarpc::service]
pub(crate) trait Wire {
    /// Runs one attempt of a call.
    async fn call(request: Shared) -> Shared2;
}

/// An attempt as wire 2 carries it. Written from the shared request without copying its
/// arguments; read back with one allocation for the arguments.
#[derive(Debug, Clone)]
pub(crate) struct Shared(pub(crate) Arc<Request>);

/// A reply as wire 2 carries it.
#[derive(Debug, Clone)]
pub(crate) struct Shared2(pub(crate) Reply);

impl Serialize for Shared {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let request = &self.0;
        let mut tuple = serializer.serialize_tuple(5)?;
        tuple.serialize_element(&*request.service)?;
        tuple.serialize_element(&*request.function)?;
        tuple.serialize_element(&request.signature)?;
        tuple.serialize_element(&RequestHeaders(request))?;
        tuple.serialize_element(Bytes::new(&request.args))?;
        tuple.end()
    }
}

struct RequestHeaders<'a>(&'a Request);

impl Serialize for RequestHeaders<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let head = &self.0.head;
        let id = head.request_id.0.to_le_bytes();
        let number = self.0.attempt().to_le_bytes();
        // Time left when the frame is written: the receiver counts from when it reads it.
        let budget = head.budget_deadline.map(|end| {
            let left = end.saturating_duration_since(Instant::now());
            u64::try_from(left.as_micros())
                .unwrap_or(u64::MAX)
                .to_le_bytes()
        });
        let limit = head.reply_limit.map(u64::to_le_bytes);
        let metadata = if head.metadata.is_empty() {
            None
        } else {
            Some(rmp_serde::to_vec(head.metadata.entries()).map_err(serde::ser::Error::custom)?)
        };
        let present = [
            Some((REQUEST_ID, &id[..])),
            Some((ATTEMPT, &number[..])),
            budget.as_ref().map(|b| (BUDGET_LEFT, &b[..])),
            limit.as_ref().map(|l| (REPLY_LIMIT, &l[..])),
            metadata.as_deref().map(|m| (METADATA, m)),
        ];
        headers::write(&present, serializer)
    }
}

impl<'de> Deserialize<'de> for Shared {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Shared;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a wire 2 request")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shared, A::Error> {
                let missing = || de::Error::custom("a wire 2 request is missing fields");
                let service: String = seq.next_element()?.ok_or_else(missing)?;
                let function: String = seq.next_element()?.ok_or_else(missing)?;
                let signature: u64 = seq.next_element()?.ok_or_else(missing)?;
                let mut head = Head::default();
                let mut attempt = 0;
                seq.next_element_seed(ReadRequestHeaders(&mut head, &mut attempt))?
                    .ok_or_else(missing)?;
                let args: ByteBuf = seq.next_element()?.ok_or_else(missing)?;
                let request = Request {
                    service: service.into(),
                    function: function.into(),
                    signature,
                    args: args.into_vec(),
                    head,
                    attempt: AtomicU32::new(attempt),
                };
                Ok(Shared(Arc::new(request)))
            }
        }
        deserializer.deserialize_tuple(5, Fields)
    }
}

struct ReadRequestHeaders<'a>(&'a mut Head, &'a mut u32);

impl<'de> DeserializeSeed<'de> for ReadRequestHeaders<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        let (head, attempt) = (self.0, self.1);
        let problem = headers::read(deserializer, |key, value| {
            match key {
                REQUEST_ID => {
                    head.request_id = RequestId(u128::from_le_bytes(headers::fixed(key, value)?));
                }
                ATTEMPT => *attempt = u32::from_le_bytes(headers::fixed(key, value)?),
                BUDGET_LEFT => {
                    let micros = u64::from_le_bytes(headers::fixed(key, value)?);
                    // A budget too far out for the clock is no limit, never an overflow.
                    head.budget_deadline =
                        Instant::now().checked_add(Duration::from_micros(micros));
                }
                REPLY_LIMIT => {
                    head.reply_limit = Some(u64::from_le_bytes(headers::fixed(key, value)?));
                }
                METADATA => {
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
                }
                _ => {}
            }
            Ok(())
        })?;
        head.invalid = problem;
        Ok(())
    }
}

/// Reply kinds: stable numbers, so peers of other builds agree. A new kind is a new number.
mod kind {
    pub(super) const DONE: u16 = 0;
    pub(super) const REFUSED: u16 = 1;
    pub(super) const PANICKED: u16 = 2;
    pub(super) const TOO_LARGE: u16 = 3;
    pub(super) const UNDELIVERABLE: u16 = 4;
    pub(super) const EXPIRED: u16 = 5;
}

impl Serialize for Shared2 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (kind, code, body): (u16, u16, &[u8]) = match &self.0 {
            Reply::Done(bytes) => (kind::DONE, 0, bytes),
            Reply::Refused(code, detail) => (kind::REFUSED, *code, detail.as_bytes()),
            Reply::Panicked(message) => (kind::PANICKED, 0, message.as_bytes()),
            Reply::TooLarge(detail) => (kind::TOO_LARGE, 0, detail.as_bytes()),
            Reply::Undeliverable(detail) => (kind::UNDELIVERABLE, 0, detail.as_bytes()),
            Reply::Expired => (kind::EXPIRED, 0, &[]),
        };
        let mut tuple = serializer.serialize_tuple(4)?;
        tuple.serialize_element(&kind)?;
        tuple.serialize_element(&code)?;
        tuple.serialize_element(Bytes::new(body))?;
        tuple.serialize_element(&NoHeaders)?;
        tuple.end()
    }
}

/// A reply carries no header yet; the map is there so that one can be added.
struct NoHeaders;

impl Serialize for NoHeaders {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        headers::write(&[], serializer)
    }
}

struct SkipHeaders;

impl<'de> DeserializeSeed<'de> for SkipHeaders {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        headers::read(deserializer, |_, _| Ok(())).map(|_| ())
    }
}

impl<'de> Deserialize<'de> for Shared2 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Shared2;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a wire 2 reply")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shared2, A::Error> {
                let missing = || de::Error::custom("a wire 2 reply is missing fields");
                let kind: u16 = seq.next_element()?.ok_or_else(missing)?;
                let code: u16 = seq.next_element()?.ok_or_else(missing)?;
                let body: ByteBuf = seq.next_element()?.ok_or_else(missing)?;
                seq.next_element_seed(SkipHeaders)?.ok_or_else(missing)?;
                let text = || String::from_utf8_lossy(&body).into_owned();
                Ok(Shared2(match kind {
                    kind::DONE => Reply::Done(body.into_vec()),
                    kind::REFUSED => Reply::Refused(code, text()),
                    kind::PANICKED => Reply::Panicked(text()),
                    kind::TOO_LARGE => Reply::TooLarge(text()),
                    kind::UNDELIVERABLE => Reply::Undeliverable(text()),
                    kind::EXPIRED => Reply::Expired,
                    other => Reply::Undeliverable(format!(
                        "the provider answered with a reply of kind {other}, which this node does not know: {}",
                        text()
                    )),
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
            args: vec![1, 2, 3],
            head: Head {
                caller: Some("web-1".into()),
                request_id: RequestId(7 << 70 | 9),
                reply_limit: Some(1 << 20),
                budget_deadline: Some(Instant::now() + Duration::from_millis(1500)),
                metadata,
                invalid: None,
            },
            attempt: AtomicU32::new(3),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_reads_back_as_written() {
        let mut codec = Bincode::<Shared, Shared>::default();
        let sent = request();
        let bytes = Pin::new(&mut codec)
            .serialize(&Shared(sent.clone()))
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
    }

    #[test]
    fn unknown_header_keys_are_skipped_and_bad_known_ones_refused() {
        // A request from a later build: one header this build does not know.
        struct Later;
        impl Serialize for Later {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut tuple = serializer.serialize_tuple(5)?;
                tuple.serialize_element("search")?;
                tuple.serialize_element("search")?;
                tuple.serialize_element(&42u64)?;
                tuple.serialize_element(&Raw(&[
                    Some((999, b"trace")),
                    Some((ATTEMPT, &2u32.to_le_bytes())),
                ]))?;
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
        let got = Pin::new(&mut Bincode::<Shared, Shared>::default())
            .deserialize(&bytes[..].into())
            .unwrap()
            .0;
        assert_eq!(got.attempt(), 2);
        assert_eq!(got.args, [1, 2]);

        struct Broken;
        impl Serialize for Broken {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut tuple = serializer.serialize_tuple(5)?;
                tuple.serialize_element("s")?;
                tuple.serialize_element("f")?;
                tuple.serialize_element(&1u64)?;
                tuple.serialize_element(&Raw(&[Some((ATTEMPT, b"x"))]))?;
                tuple.serialize_element(Bytes::new(&[]))?;
                tuple.end()
            }
        }
        let bytes = bincode_of(&Broken);
        let got = Pin::new(&mut Bincode::<Shared, Shared>::default())
            .deserialize(&bytes[..].into())
            .expect("the frame is read; the request is refused on its own");
        assert!(got.0.head.invalid.as_deref().unwrap().contains("header 3"));
    }

    #[test]
    fn every_reply_reads_back_and_an_unknown_kind_is_undeliverable() {
        let mut codec = Bincode::<Shared2, Shared2>::default();
        for reply in [
            Reply::Done(vec![9, 9]),
            Reply::Refused(6, "draining".into()),
            Reply::Panicked("boom".into()),
            Reply::TooLarge("big".into()),
            Reply::Undeliverable("no".into()),
            Reply::Expired,
        ] {
            let bytes = Pin::new(&mut codec)
                .serialize(&Shared2(reply.clone()))
                .unwrap();
            let back = Pin::new(&mut codec).deserialize(&bytes[..].into()).unwrap();
            assert_eq!(back.0, reply);
        }
        let later = bincode_of(&(
            77u16,
            0u16,
            Bytes::new(b"news"),
            Vec::<(u16, ByteBuf)>::new(),
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
