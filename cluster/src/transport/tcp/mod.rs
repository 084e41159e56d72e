//! tarpc over TCP: one listener per node, one multiplexed connection per peer, opened with a
//! handshake that agrees the wire version ([`super::wire::handshake`]), re-established after
//! failure.

mod channel;
mod codec;
mod connect;
mod limit;
mod opening;
mod serve;

pub(crate) use channel::MAX_DEADLINE;
pub(crate) use connect::{ConnectConfig, TcpConnector};
pub use opening::DEFAULT_MAX_OPENING_CONNECTIONS;
pub(crate) use serve::{ServeConfig, serve};
