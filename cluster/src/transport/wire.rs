//! The envelope every call travels in, whatever the service: one tarpc service with one method.

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A request for one attempt of one call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Request {
    /// [`WIRE_VERSION`](crate::service::WIRE_VERSION) of the sender.
    pub(crate) wire: u32,
    /// The service's name.
    pub(crate) service: Cow<'static, str>,
    /// The function's name.
    pub(crate) function: Cow<'static, str>,
    /// [`signature_hash`](crate::service::signature_hash) of the function the client means.
    pub(crate) signature: u64,
    /// The arguments, encoded by [`encode`](crate::service::encode).
    #[serde(with = "serde_bytes")]
    pub(crate) args: Vec<u8>,
}

/// What a provider answers.
///
/// Refusals carry a numeric code rather than an enum, so a peer of a later build can add codes
/// without the other side failing to read the frame (which would kill the connection).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum Reply {
    /// The function ran; its encoded return value.
    Done(#[serde(with = "serde_bytes")] Vec<u8>),
    /// The provider did not run the function: [`Reason::code`](crate::error::Reason), detail.
    Refused(u16, String),
    /// The function panicked; the panic message.
    Panicked(String),
    /// The function ran; its return value is larger than a frame may be.
    TooLarge(String),
    /// The function ran, but its result cannot be delivered (not encodable).
    Undeliverable(String),
    /// The deadline passed while the function ran; it was stopped. (Over TCP the client has
    /// given up by then and never reads this; in memory it is how a timeout surfaces.)
    Expired,
}

#[tarpc::service]
pub(crate) trait Wire {
    /// Runs one attempt of a call.
    async fn call(request: Shared) -> Reply;
}

/// A request as [`Wire::call`] takes it: in an `Arc`, so that the connector can resend a request
/// that provably never left (a dead pooled connection) without copying its arguments.
///
/// It travels exactly as the bare [`Request`] (as serde's `Arc<Request>` does), but is read back
/// with one allocation: serde reads an `Arc<T>` into a `Box<T>` first and then moves it into the
/// `Arc`, two allocations and a copy for every request a provider receives.
#[derive(Debug, Clone)]
pub(crate) struct Shared(pub(crate) Arc<Request>);

impl Serialize for Shared {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Shared {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Request::deserialize(deserializer).map(|request| Shared(Arc::new(request)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tarpc::tokio_serde::formats::Bincode;
    use tarpc::tokio_serde::{Deserializer as _, Serializer as _};

    use super::{Request, Shared};

    #[test]
    fn a_shared_request_travels_as_an_arc_of_it_did() {
        let request = Arc::new(Request {
            wire: 1,
            service: "search".into(),
            function: "search".into(),
            signature: 42,
            args: vec![1, 2, 3],
        });
        let mut as_arc = Bincode::<Arc<Request>, Arc<Request>>::default();
        let mut as_shared = Bincode::<Shared, Shared>::default();
        let bytes = std::pin::Pin::new(&mut as_arc).serialize(&request).unwrap();
        let shared = std::pin::Pin::new(&mut as_shared)
            .serialize(&Shared(request.clone()))
            .unwrap();
        assert_eq!(bytes, shared);
        let back = std::pin::Pin::new(&mut as_shared)
            .deserialize(&bytes.as_ref().into())
            .unwrap();
        assert_eq!(format!("{:?}", back.0), format!("{request:?}"));
    }
}
