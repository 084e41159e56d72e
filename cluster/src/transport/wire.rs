//! The envelope every call travels in, whatever the service: one tarpc service with one method.

use serde::{Deserialize, Serialize};

/// A request for one attempt of one call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Request {
    /// [`WIRE_VERSION`](crate::service::WIRE_VERSION) of the sender.
    pub(crate) wire: u32,
    /// The service's name.
    pub(crate) service: String,
    /// The function's name.
    pub(crate) function: String,
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
    // An `Arc`, so that the connector can resend a request that provably never left (a dead
    // pooled connection) without copying its arguments.
    async fn call(request: std::sync::Arc<Request>) -> Reply;
}
