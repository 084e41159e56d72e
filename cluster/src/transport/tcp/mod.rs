//! tarpc over TCP: one listener per node, one multiplexed connection per peer, opened with a
//! handshake that agrees the wire version ([`super::wire::handshake`]), re-established after
//! failure.

mod channel;
mod codec;
mod connect;
mod limit;
mod opening;
mod serve;

pub(crate) use connect::{ConnectConfig, TcpConnector};
pub use opening::DEFAULT_MAX_OPENING_CONNECTIONS;

/// The furthest deadline handed to tarpc, on either side: a year. tarpc's timers panic on one a
/// couple of years out (and its decoder on one past `Instant`'s range); "no limit" is a year.
pub(crate) const MAX_DEADLINE: std::time::Duration =
    std::time::Duration::from_secs(365 * 24 * 3600);
pub(crate) use serve::{ServeConfig, serve};
