//! What a provider is: its description (data that travels with its registry entry) and the codec
//! its arguments and results are carried in.

mod changes;
mod codec;
mod description;
mod encoded;
pub mod shape;

pub use changes::{Change, breaking_changes, changes};
pub(crate) use codec::decode_within;
pub use codec::{CodecError, MAX_DEPTH, decode, encode, encode_value};
pub use description::{
    FunctionDescription, ServiceDescription, WIRE_VERSION, signature_hash, version,
};
pub use encoded::Encoded;
