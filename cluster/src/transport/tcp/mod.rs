//! tarpc over TCP: one listener per node, one multiplexed connection per peer, opened with a
//! handshake that agrees the wire version ([`super::wire::handshake`]), re-established after
//! failure.

mod channel;
mod codec;
mod connect;
mod limit;
mod serve;

pub(crate) use channel::MAX_DEADLINE;
pub(crate) use connect::{ConnectConfig, TcpConnector};
pub(crate) use serve::{ServeConfig, serve};
