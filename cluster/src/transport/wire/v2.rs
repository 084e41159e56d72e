//! Wire version 2, after a [handshake](super::handshake): a request is
//! `(service, function, signature, headers, args)` and a reply `(kind, code, body, headers)`,
//! both bincode inside tarpc's frame. The header map ([`super::headers`]) is where new fields
//! go; a reply kind this node does not know is read as an undeliverable reply for that one
//! call, never as a broken frame.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_bytes::{ByteBuf, Bytes};

use super::headers::{self, ATTEMPT, BUDGET_LEFT, CALLER, METADATA, REPLY_LIMIT, REQUEST_ID};
use super::{AttemptHead, Envelope, Head, Reply, Request};
use crate::context::{Metadata, RequestId};

#[tarpc::service]
pub(crate) trait Wire {
    /// Runs one attempt of a call.
    async fn call(request: Shared) -> Shared2;
}

/// An attempt as wire 2 carries it. Written from the shared request without copying its
/// arguments; read back with one allocation for the arguments.
#[derive(Debug, Clone)]
pub(crate) struct Shared(pub(crate) Envelope);

/// A reply as wire 2 carries it.
#[derive(Debug, Clone)]
pub(crate) struct Shared2(pub(crate) Reply);

impl Serialize for Shared {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Envelope { request, attempt } = &self.0;
        let mut tuple = serializer.serialize_tuple(5)?;
        tuple.serialize_element(&*request.service)?;
        tuple.serialize_element(&*request.function)?;
        tuple.serialize_element(&request.signature)?;
        tuple.serialize_element(&RequestHeaders(&request.head, attempt))?;
        tuple.serialize_element(Bytes::new(&request.args))?;
        tuple.end()
    }
}

struct RequestHeaders<'a>(&'a Head, &'a AttemptHead);

impl Serialize for RequestHeaders<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (head, attempt) = (self.0, self.1);
        let id = head.request_id.0.to_le_bytes();
        let number = attempt.number.to_le_bytes();
        let budget = attempt.budget_left.map(|left| {
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
            head.caller.as_deref().map(|c| (CALLER, c.as_bytes())),
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
                let mut attempt = AttemptHead::default();
                seq.next_element_seed(ReadRequestHeaders(&mut head, &mut attempt))?
                    .ok_or_else(missing)?;
                let args: ByteBuf = seq.next_element()?.ok_or_else(missing)?;
                let request = Request {
                    service: service.into(),
                    function: function.into(),
                    signature,
                    args: args.into_vec(),
                    head,
                };
                Ok(Shared(Envelope {
                    request: Arc::new(request),
                    attempt,
                }))
            }
        }
        deserializer.deserialize_tuple(5, Fields)
    }
}

struct ReadRequestHeaders<'a>(&'a mut Head, &'a mut AttemptHead);

impl<'de> DeserializeSeed<'de> for ReadRequestHeaders<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        let (head, attempt) = (self.0, self.1);
        headers::read(deserializer, |key, value| {
            match key {
                CALLER => {
                    let name = std::str::from_utf8(value).map_err(|e| e.to_string())?;
                    head.caller = Some(Arc::from(name));
                }
                REQUEST_ID => {
                    head.request_id = RequestId(u128::from_le_bytes(headers::fixed(key, value)?));
                }
                ATTEMPT => attempt.number = u32::from_le_bytes(headers::fixed(key, value)?),
                BUDGET_LEFT => {
                    let micros = u64::from_le_bytes(headers::fixed(key, value)?);
                    attempt.budget_left = Some(Duration::from_micros(micros));
                }
                REPLY_LIMIT => {
                    head.reply_limit = Some(u64::from_le_bytes(headers::fixed(key, value)?));
                }
                METADATA => {
                    let entries: Vec<(String, String)> =
                        rmp_serde::from_slice(value).map_err(|e| e.to_string())?;
                    let metadata = Metadata::from_entries(entries);
                    metadata.check().map_err(|e| e.to_string())?;
                    head.metadata = metadata;
                }
                _ => {}
            }
            Ok(())
        })
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
        headers::read(deserializer, |_, _| Ok(()))
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

    fn envelope() -> Envelope {
        let mut metadata = Metadata::new();
        metadata.insert("tenant", "acme");
        Envelope {
            request: Arc::new(Request {
                service: "search".into(),
                function: "search".into(),
                signature: 42,
                args: vec![1, 2, 3],
                head: Head {
                    caller: Some("web-1".into()),
                    request_id: RequestId(7 << 70 | 9),
                    reply_limit: Some(1 << 20),
                    metadata,
                },
            }),
            attempt: AttemptHead {
                number: 3,
                budget_left: Some(Duration::from_millis(1500)),
            },
        }
    }

    #[test]
    fn a_request_reads_back_as_written() {
        let mut codec = Bincode::<Shared, Shared>::default();
        let bytes = Pin::new(&mut codec).serialize(&Shared(envelope())).unwrap();
        let back = Pin::new(&mut codec)
            .deserialize(&bytes[..].into())
            .unwrap()
            .0;
        let (sent, got) = (envelope(), back);
        assert_eq!(got.request.service, sent.request.service);
        assert_eq!(got.request.args, sent.request.args);
        assert_eq!(got.request.head.caller.as_deref(), Some("web-1"));
        assert_eq!(got.request.head.request_id, sent.request.head.request_id);
        assert_eq!(got.request.head.reply_limit, Some(1 << 20));
        assert_eq!(got.request.head.metadata.get("tenant"), Some("acme"));
        assert_eq!(got.attempt.number, 3);
        assert_eq!(got.attempt.budget_left, Some(Duration::from_millis(1500)));
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
        assert_eq!(got.attempt.number, 2);
        assert_eq!(got.request.args, [1, 2]);

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
        assert!(
            Pin::new(&mut Bincode::<Shared, Shared>::default())
                .deserialize(&bytes[..].into())
                .is_err()
        );
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
