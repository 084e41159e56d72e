//! The sockets every connection and datagram of a node goes through: the OS's (tokio's), or,
//! with the `simulation` feature, turmoil's simulated network, so that whole clusters run in one
//! test under a seeded scheduler with partitions, loss and crashes (`tests/simulation/`,
//! `docs/registry.md`, "Deterministic simulation").
//!
//! The two sets have the same methods for what the crate uses (`bind`, `connect`, `accept`,
//! `send_to`, `recv_from`, `peek`, `set_nodelay`, `local_addr`), so the seam is these names
//! and the two functions below for what only the OS's sockets have (`bind_udp`, `keep_alive`).
//! With the feature on, every node must run inside a turmoil host: turmoil's sockets
//! outside one panic, as tokio's do inside one.

#[cfg(not(feature = "simulation"))]
pub(crate) use tokio::net::{TcpListener, TcpStream, UdpSocket};
#[cfg(feature = "simulation")]
pub(crate) use turmoil::net::{TcpListener, TcpStream, UdpSocket};

/// TCP keepalive on every connection of the call path, both the caller's and the provider's:
/// a peer that vanished without a word (power lost, a partition, a NAT that forgot the flow)
/// is otherwise found only by the next call on the connection, which then fails, and its
/// connection holds a place among the provider's established ones until the idle timeout
/// (5 min by default). With these values the kernel finds it within 25 s of silence (10 s idle,
/// then three probes 5 s apart) at the cost of one empty segment per 10 s on an idle
/// connection; 10 s is also well under the idle time after which NATs and firewalls drop a flow.
#[cfg(not(feature = "simulation"))]
pub(crate) const KEEPALIVE_IDLE: std::time::Duration = std::time::Duration::from_secs(10);
/// The time between unanswered keepalive probes.
#[cfg(not(feature = "simulation"))]
pub(crate) const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);
/// Unanswered probes after which the kernel closes the connection.
#[cfg(not(feature = "simulation"))]
pub(crate) const KEEPALIVE_PROBES: u32 = 3;

/// Turns TCP keepalive on for `stream` ([`KEEPALIVE_IDLE`]). A failure costs only the early
/// notice of a dead peer: logged, not fatal.
#[cfg(not(feature = "simulation"))]
pub(crate) fn keep_alive(stream: &TcpStream) {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL);
    // Elsewhere the system's own count of probes applies.
    #[cfg(any(
        target_os = "linux",
        target_os = "android",
        target_os = "freebsd",
        target_os = "macos",
        target_os = "windows"
    ))]
    let keepalive = keepalive.with_retries(KEEPALIVE_PROBES);
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_keepalive(&keepalive) {
        tracing::debug!("no TCP keepalive on a connection: {e}");
    }
}

/// What a call-path connection runs on beneath TLS (or beneath the frames, in plaintext): the
/// socket itself, or, with the `uncooperative-io` feature and `CLUSTER_UNCOOPERATIVE_IO=SEED`
/// set, the socket through an IO that does not cooperate (`transport/uncooperative.rs`), for
/// CI's run of the call-path suite on sockets that move a few bytes at a time.
#[cfg(not(feature = "uncooperative-io"))]
pub(crate) fn beneath_tls(stream: TcpStream) -> TcpStream {
    stream
}

#[cfg(feature = "uncooperative-io")]
pub(crate) fn beneath_tls(
    stream: TcpStream,
) -> crate::transport::uncooperative::Uncooperative<TcpStream> {
    crate::transport::uncooperative::from_env(stream)
}

/// turmoil's streams are no sockets; its network loses a host by the test's say-so.
#[cfg(feature = "simulation")]
pub(crate) fn keep_alive(_stream: &TcpStream) {}

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

#[cfg(all(test, not(feature = "simulation")))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keep_alive_turns_keepalive_on_with_our_timing() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let socket = socket2::SockRef::from(&stream);
        assert!(!socket.keepalive().unwrap(), "off by default");
        keep_alive(&stream);
        assert!(socket.keepalive().unwrap());
        #[cfg(target_os = "linux")]
        {
            assert_eq!(socket.tcp_keepalive_time().unwrap(), KEEPALIVE_IDLE);
            assert_eq!(socket.tcp_keepalive_interval().unwrap(), KEEPALIVE_INTERVAL);
            assert_eq!(socket.tcp_keepalive_retries().unwrap(), KEEPALIVE_PROBES);
        }
    }
}
