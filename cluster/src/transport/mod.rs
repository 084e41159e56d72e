//! Moving requests and replies between nodes: over TCP ([`tcp`]), and an in-process
//! network for unit tests ([`MemoryNetwork`]), both behind [`Connector`].

mod memory;
pub(crate) mod tcp;
#[cfg(any(test, feature = "uncooperative-io"))]
pub(crate) mod uncooperative;
pub(crate) mod wire;

use std::sync::Arc;

use tokio::time::Instant;

pub use memory::MemoryNetwork;
pub use wire::WIRE_VERSIONS;
pub(crate) use wire::{Head, Reply, Request};

use crate::registry::NodeInfo;

/// Bytes a frame needs beyond the encoded arguments or return value and the call's metadata:
/// the envelope's own fields and headers.
pub(crate) const ENVELOPE_OVERHEAD: usize = 1024;

/// The default largest frame, 8 MiB, as tokio-util's codec.
pub const DEFAULT_MAX_FRAME: usize = 8 << 20;

/// The largest frame limit a node may set, 1 GiB: above it, a wire 1 frame's length could be
/// mistaken for the handshake's magic.
pub const MAX_FRAME_LIMIT: usize = 1 << 30;

/// The client side of a transport. An enum rather than a trait object: the send future then
/// lives inside the call's own future instead of in a box of its own on every attempt.
pub(crate) enum Connector {
    /// Over TCP ([`tcp`]).
    Tcp(tcp::TcpConnector),
    /// The in-process network.
    Memory(MemoryNetwork),
}

impl Connector {
    /// Connections open to providers now (none in memory).
    pub(crate) fn open(&self) -> usize {
        match self {
            Connector::Tcp(tcp) => tcp.open(),
            Connector::Memory(_) => 0,
        }
    }

    /// Sends one attempt and waits for its reply until `deadline`; returns by `deadline`.
    pub(crate) async fn send(
        &self,
        to: &NodeInfo,
        request: Arc<Request>,
        deadline: Instant,
    ) -> Result<Reply, TransportError> {
        match self {
            Connector::Tcp(tcp) => tcp.send(to, request, deadline).await,
            Connector::Memory(network) => network.send(to.addr, request, deadline).await,
        }
    }

    /// Sends `request` to whatever node is at `addr`, on a connection of its own: the node's
    /// name as the connection proved it (`None` in memory, where nothing proves it), and its
    /// reply. Returns by `deadline`.
    pub(crate) async fn ask_unnamed(
        &self,
        addr: std::net::SocketAddr,
        request: Arc<Request>,
        deadline: Instant,
    ) -> Result<(Option<String>, Reply), TransportError> {
        match self {
            Connector::Tcp(tcp) => tcp
                .ask_unnamed(addr, request, deadline)
                .await
                .map(|(name, reply)| (Some(name), reply)),
            Connector::Memory(network) => network
                .send(addr, request, deadline)
                .await
                .map(|reply| (None, reply)),
        }
    }

    /// Closes every connection this node opened; later sends open new ones.
    pub(crate) fn close(&self) {
        if let Connector::Tcp(tcp) = self {
            tcp.close();
        }
    }
}

/// Why an attempt got no reply. The split is what matters for retries: whether the request may
/// have reached the provider's code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TransportError {
    /// It provably never left this node, or was refused before reaching a provider.
    NotSent(String),
    /// Never sent: the peer did not finish opening a connection within the connect timeout.
    /// It may be stalled, overloaded or cut off rather than gone (a process that is gone
    /// refuses the connection: `NotSent`).
    NoAnswer(String),
    /// Never sent: the peer said it is busy (its connection limit, or an earlier release's
    /// throttle). Alive, and counted against it as an overload refusal is.
    Busy(String),
    /// Never sent: it waited on this node until the deadline (its in-flight limit to the peer
    /// was full, or the connection was still writing what was ahead of it). Says nothing of
    /// the peer.
    Queued(String),
    /// The connection broke after it was sent.
    Lost(String),
    /// The deadline passed after it was sent.
    Timeout,
    /// The peer does not speak a wire version this node speaks: it was never sent, and is not
    /// sent to that peer again in this call.
    WireVersion(String),
    /// The peer is not a member this node can trust: the TLS handshake failed (another CA, a
    /// plaintext peer, a certificate of another cluster). Never sent; not sent there again in
    /// this call.
    Untrusted(String),
    /// The peer's certificate names another node than the registry entry chosen: never sent;
    /// another provider is tried.
    WrongPeer(String),
}
