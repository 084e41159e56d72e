//! JSON in and out of a call without the service's Rust types: arguments checked and encoded
//! by the shape in the provider's registry entry (`shaped.rs`), answers decoded as any
//! MessagePack value and shown as JSON (`wire.rs`), and a call of `service.function` by name
//! through the ordinary call path (`by_name.rs`). `cluster call` and the discovery gateway's
//! function routes are both made of these.

mod by_name;
mod shaped;
mod wire;

pub use by_name::{Answer, FindError, Found, Functions, MAX_DESCRIPTIONS, returns_result};
pub use shaped::{arguments, from_wire, to_wire};
pub use wire::{AsJson, Wire};

#[cfg(test)]
mod roundtrip;
#[cfg(test)]
mod tests;
