//! Who a node is and whom it trusts: certificates that name a node of a cluster
//! ([`Identity`], issued by a CA: `cluster init` and `issue`, or `Authority` with the
//! `authority` feature), mutual TLS on every RPC connection
//! (`tls.rs`), the key that seals gossip ([`Keyring`]), and the callers a service admits
//! ([`Callers`]). `docs/security.md` walks through it, attack by attack.
//!
//! Secure is the default: a node over TCP starts only with an identity, or with
//! [`NodeBuilder::insecure`](crate::NodeBuilder::insecure) said by name.

#[cfg(feature = "authority")]
mod authority;
mod callers;
pub(crate) mod der;
mod identity;
mod keyring;
pub(crate) mod names;
pub(crate) mod seal;
pub(crate) mod tls;

#[cfg(feature = "authority")]
pub use authority::Authority;
pub use callers::{Callers, Guarded};
pub use identity::{Identity, IdentityError};
pub use keyring::{GossipKey, KeyId, Keyring};
