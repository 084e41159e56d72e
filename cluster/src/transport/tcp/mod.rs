//! Calls over TCP: one listener per node, one multiplexed connection per peer, opened with a
//! handshake that agrees the wire version ([`super::wire::handshake`]), re-established after
//! failure.

mod answering;
mod budget;
mod caller_frames;
mod calling;
mod channel;
mod connect;
mod established;
mod files;
mod frames;
mod heartbeat;
mod limit;
mod opening;
mod serve;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod uncooperative_tests;
mod varint;

pub(crate) use budget::ConnectionLimits;
pub use budget::DEFAULT_MAX_BUFFERED_BYTES;
pub(crate) use budget::FLOOR;
pub(crate) use connect::{ConnectConfig, TcpConnector};
pub use established::DEFAULT_MAX_CONNECTIONS;
pub(crate) use frames::FrameLimits;
#[cfg(test)]
pub(crate) use frames::{paused, written_request_frames};
pub(crate) use heartbeat::FEATURE as HEARTBEAT;
pub use opening::DEFAULT_MAX_OPENING_CONNECTIONS;

/// The furthest deadline a request carries or is read with, on either side: a year ("no
/// limit"). Earlier releases ran tarpc, whose timers panic on one a couple of years out.
pub(crate) const MAX_DEADLINE: std::time::Duration =
    std::time::Duration::from_secs(365 * 24 * 3600);
pub(crate) use serve::{Incoming, ServeConfig, serve};
