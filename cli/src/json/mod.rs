//! JSON in and out of a call without the service's Rust types: arguments checked and encoded
//! by the shape in the provider's registry entry (`shaped.rs`), answers decoded as any
//! MessagePack value and shown as JSON (`wire.rs`).

mod shaped;
mod wire;

pub use shaped::{arguments, from_wire, to_wire};
pub use wire::{AsJson, Wire};

#[cfg(test)]
mod roundtrip;
#[cfg(test)]
mod tests;
