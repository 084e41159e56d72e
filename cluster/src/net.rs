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

/// The receive buffer asked for on the gossip socket: a node that pushes a change to a hundred
/// peers gets a hundred answers at once, each a digest of every node (6 KB at 100 nodes), past
/// Linux's default of 208 KiB, which dropped them. The kernel clamps it to
/// `net.core.rmem_max`; `docs/registry.md` says when to raise that.
pub(crate) const GOSSIP_RECV_BUFFER: usize = 4 << 20;

/// A UDP socket bound to `addr`, with a receive buffer of `recv_buffer` bytes if the kernel
/// allows that much (less if not: the size is a request).
#[cfg(not(feature = "simulation"))]
pub(crate) async fn bind_udp(
    addr: std::net::SocketAddr,
    recv_buffer: usize,
) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if let Err(e) = socket.set_recv_buffer_size(recv_buffer) {
        tracing::debug!("gossip socket: no receive buffer of {recv_buffer} bytes: {e}");
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    UdpSocket::from_std(socket.into())
}

/// turmoil's sockets have no buffer to size.
#[cfg(feature = "simulation")]
pub(crate) async fn bind_udp(
    addr: std::net::SocketAddr,
    _recv_buffer: usize,
) -> std::io::Result<UdpSocket> {
    UdpSocket::bind(addr).await
}
