//! The sockets every connection and datagram of a node goes through: the OS's (tokio's), or,
//! with the `simulation` feature, turmoil's simulated network, so that whole clusters run in one
//! test under a seeded scheduler with partitions, loss and crashes (`tests/simulation/`,
//! `docs/registry.md`, "Deterministic simulation").
//!
//! The two sets have the same methods for what the crate uses (`bind`, `connect`, `accept`,
//! `send_to`, `recv_from`, `peek`, `set_nodelay`, `local_addr`), so the seam is these names
//! alone. With the feature on, every node must run inside a turmoil host: turmoil's sockets
//! outside one panic, as tokio's do inside one.

#[cfg(not(feature = "simulation"))]
pub(crate) use tokio::net::{TcpListener, TcpStream, UdpSocket};
#[cfg(feature = "simulation")]
pub(crate) use turmoil::net::{TcpListener, TcpStream, UdpSocket};
