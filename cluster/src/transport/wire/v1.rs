//! Wire version 1, the first release's: no handshake, a request is
//! `(wire, service, function, signature, args)` and a reply a bincode enum. Kept byte for byte,
//! so that nodes of the first release and of this one call each other during an upgrade; it
//! carries no headers (no caller, request id, budget, metadata or reply limit).

use std::fmt;
use std::sync::Arc;

use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_bytes::Bytes;

use super::{Head, Reply, Request};
use crate::service::Encoded;

/// Wire 1's one request, a call ([`envelope`](super::envelope)).
pub(crate) type WireRequest = super::envelope::CallRequest<RequestFrame>;

/// Wire 1's one response, a call's reply.
pub(crate) type WireResponse = super::envelope::CallResponse<ReplyFrame>;

impl super::envelope::Answered for RequestFrame {
    type Reply = ReplyFrame;
}

/// An attempt as wire 1 carries it, and the wire version its sender wrote in it (always 1 from
/// a conforming peer).
#[derive(Debug, Clone)]
pub(crate) struct RequestFrame {
    pub(crate) wire: u32,
    pub(crate) request: Arc<Request>,
}

impl Serialize for RequestFrame {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let request = &self.request;
        let mut tuple = serializer.serialize_tuple(5)?;
        tuple.serialize_element(&self.wire)?;
        tuple.serialize_element(&*request.service)?;
        tuple.serialize_element(&*request.function)?;
        tuple.serialize_element(&request.signature)?;
        tuple.serialize_element(Bytes::new(&request.args))?;
        tuple.end()
    }
}

impl<'de> Deserialize<'de> for RequestFrame {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = RequestFrame;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a wire 1 request")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RequestFrame, A::Error> {
                let missing = || de::Error::custom("a wire 1 request is missing fields");
                let wire: u32 = seq.next_element()?.ok_or_else(missing)?;
                let service: String = seq.next_element()?.ok_or_else(missing)?;
                let function: String = seq.next_element()?.ok_or_else(missing)?;
                let signature: u64 = seq.next_element()?.ok_or_else(missing)?;
                let args: Encoded = seq.next_element()?.ok_or_else(missing)?;
                let request = Request {
                    service: service.into(),
                    function: function.into(),
                    signature,
                    args,
                    head: Head::default(),
                    attempt: Default::default(),
                };
                Ok(RequestFrame {
                    wire,
                    request: Arc::new(request),
                })
            }
        }
        deserializer.deserialize_tuple(5, Fields)
    }
}

/// The reply of wire 1, as the first release declared it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum ReplyFrame {
    Done(Encoded),
    Refused(u16, String),
    Panicked(String),
    TooLarge(String),
    Undeliverable(String),
    Expired,
}

impl From<Reply> for ReplyFrame {
    fn from(reply: Reply) -> Self {
        match reply {
            Reply::Done(bytes) => ReplyFrame::Done(bytes),
            Reply::Refused(code, detail) => ReplyFrame::Refused(code, detail),
            Reply::Panicked(message) => ReplyFrame::Panicked(message),
            Reply::TooLarge(detail) => ReplyFrame::TooLarge(detail),
            Reply::Undeliverable(detail) => ReplyFrame::Undeliverable(detail),
            Reply::Expired => ReplyFrame::Expired,
            // Wire 1 carries no call id, so no reply of it is ever recalled or interrupted.
            Reply::Interrupted(detail) => ReplyFrame::Undeliverable(detail),
            Reply::Recalled(reply) => Self::from(std::sync::Arc::unwrap_or_clone(reply)),
        }
    }
}

impl From<ReplyFrame> for Reply {
    fn from(reply: ReplyFrame) -> Self {
        match reply {
            ReplyFrame::Done(bytes) => Reply::Done(bytes),
            ReplyFrame::Refused(code, detail) => Reply::Refused(code, detail),
            ReplyFrame::Panicked(message) => Reply::Panicked(message),
            ReplyFrame::TooLarge(detail) => Reply::TooLarge(detail),
            ReplyFrame::Undeliverable(detail) => Reply::Undeliverable(detail),
            ReplyFrame::Expired => Reply::Expired,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::pin::Pin;

    use tarpc::tokio_serde::formats::Bincode;
    use tarpc::tokio_serde::{Deserializer as _, Serializer as _};

    use super::*;

    /// The first release's request, as it declared it.
    #[derive(Serialize)]
    struct FirstRelease {
        wire: u32,
        service: Cow<'static, str>,
        function: Cow<'static, str>,
        signature: u64,
        #[serde(with = "serde_bytes")]
        args: Vec<u8>,
    }

    #[test]
    fn a_request_is_written_byte_for_byte_as_the_first_release_wrote_it() {
        let first = FirstRelease {
            wire: 1,
            service: "search".into(),
            function: "search".into(),
            signature: 42,
            args: vec![1, 2, 3],
        };
        let ours = RequestFrame {
            wire: 1,
            request: Arc::new(Request {
                service: "search".into(),
                function: "search".into(),
                signature: 42,
                args: vec![1, 2, 3].into(),
                head: Head::default(),
                attempt: Default::default(),
            }),
        };
        let theirs = Pin::new(&mut Bincode::<(), FirstRelease>::default())
            .serialize(&first)
            .unwrap();
        let mut codec = Bincode::<RequestFrame, RequestFrame>::default();
        let bytes = Pin::new(&mut codec).serialize(&ours).unwrap();
        assert_eq!(bytes, theirs);
        let back = Pin::new(&mut codec).deserialize(&bytes[..].into()).unwrap();
        assert_eq!((back.wire, &back.request.args[..]), (1, &[1, 2, 3][..]));
    }
}
