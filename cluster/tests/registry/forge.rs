//! chitchat's wire format written by hand: what a peer holding the gossip key (on an
//! `insecure()` registry, anyone who reaches the port) can send, byte by byte, whatever
//! chitchat itself would write.

use std::net::SocketAddr;
use std::time::Duration;

use cluster::registry::{GossipConfig, GossipRegistry, Registry};
use cluster::{Keyring, Node};
use tokio::net::UdpSocket;

/// The cluster of every node here.
pub const CLUSTER: &str = "test";
const MAGIC: [u8; 2] = 45_139u16.to_le_bytes();
const SYN: u8 = 0;
const SYN_ACK: u8 = 1;
const ACK: u8 = 2;

/// A node on an insecure registry (plaintext gossip), and its registry.
pub async fn victim(name: &str, config: GossipConfig) -> (Node, GossipRegistry) {
    let registry = GossipRegistry::new(config.insecure().cluster_id(CLUSTER));
    let node = Node::builder()
        .name(name)
        .insecure()
        .registry(registry.clone())
        .start()
        .await
        .expect("the node starts");
    (node, registry)
}

/// A chitchat node id.
#[derive(Debug, Clone)]
pub struct Id {
    pub name: String,
    pub generation: u64,
    pub addr: SocketAddr,
}

impl Id {
    pub fn new(name: impl Into<String>, generation: u64, addr: SocketAddr) -> Self {
        Self {
            name: name.into(),
            generation,
            addr,
        }
    }

    /// The id of `node`'s own gossip state.
    pub fn of(node: &Node, registry: &GossipRegistry) -> Self {
        let info = registry
            .nodes()
            .into_iter()
            .find(|n| n.name == node.name())
            .expect("the node sees itself");
        Self::new(
            info.name,
            info.generation,
            registry.gossip_addr().expect("gossiping"),
        )
    }

    fn write(&self, buf: &mut Vec<u8>) {
        string(buf, &self.name);
        buf.extend(self.generation.to_le_bytes());
        match self.addr {
            SocketAddr::V4(a) => {
                buf.push(4);
                buf.extend(a.ip().octets());
            }
            SocketAddr::V6(a) => {
                buf.push(6);
                buf.extend(a.ip().octets());
            }
        }
        buf.extend(self.addr.port().to_le_bytes());
    }
}

fn string(buf: &mut Vec<u8>, s: &str) {
    buf.extend(
        u16::try_from(s.len())
            .expect("a short string")
            .to_le_bytes(),
    );
    buf.extend(s.as_bytes());
}

/// A V0 SYN: the digest (id, heartbeat), every version 0, and the cluster.
pub fn syn(digest: &[(Id, u64)]) -> Vec<u8> {
    let mut m = header(0, SYN);
    m.extend(u16::try_from(digest.len()).unwrap().to_le_bytes());
    for (id, heartbeat) in digest {
        id.write(&mut m);
        m.extend(heartbeat.to_le_bytes());
        m.extend(0u64.to_le_bytes()); // last GC version
        m.extend(0u64.to_le_bytes()); // max version
    }
    string(&mut m, CLUSTER);
    m
}

/// A V1 SYN with an empty digest (an empty compressed stream).
pub fn syn_v1() -> Vec<u8> {
    let mut m = header(1, SYN);
    m.push(0); // no more blocks
    string(&mut m, CLUSTER);
    m
}

fn header(version: u8, kind: u8) -> Vec<u8> {
    let mut m = MAGIC.to_vec();
    m.push(version);
    m.push(kind);
    m
}

/// The operations of a delta, before they are cut into blocks.
#[derive(Default)]
pub struct Ops(Vec<u8>);

impl Ops {
    /// The node the next operations are about, as a full update (from version 0).
    pub fn node(mut self, id: &Id) -> Self {
        self.0.push(0);
        id.write(&mut self.0);
        self.0.extend(0u64.to_le_bytes()); // last GC version
        self.0.extend(0u64.to_le_bytes()); // from version (excluded)
        self
    }

    /// A key set at `version` (versions must grow within a node).
    pub fn set(mut self, key: &str, value: &str, version: u64) -> Self {
        self.0.push(1);
        string(&mut self.0, key);
        string(&mut self.0, value);
        self.0.extend(version.to_le_bytes());
        self.0.push(0); // set, not deleted
        self
    }

    /// The node's max version.
    pub fn max_version(mut self, version: u64) -> Self {
        self.0.push(2);
        self.0.extend(version.to_le_bytes());
        self
    }

    /// An ACK carrying these operations, in uncompressed blocks.
    pub fn ack(self) -> Vec<u8> {
        let mut m = header(0, ACK);
        for block in self.0.chunks(usize::from(u16::MAX)) {
            m.push(2); // uncompressed
            m.extend(u16::try_from(block.len()).unwrap().to_le_bytes());
            m.extend(block);
        }
        m.push(0); // no more blocks
        m
    }
}

/// A zstd frame of `len` copies of `byte` (one RLE block): 11 bytes that decompress to up to
/// 64 KiB.
pub fn rle_frame(byte: u8, len: u32) -> Vec<u8> {
    assert!((256..=65_535).contains(&len));
    let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD];
    // Single segment, content size in 2 bytes (minus 256), no checksum, no dictionary.
    frame.push(0b0110_0000);
    frame.extend(u16::try_from(len - 256).unwrap().to_le_bytes());
    // Last block, RLE, of `len` bytes.
    let block = 1 | (1 << 1) | (len << 3);
    frame.extend(&block.to_le_bytes()[..3]);
    frame.push(byte);
    frame
}

/// A UDP socket speaking to one node's gossip port.
pub struct Peer {
    pub socket: UdpSocket,
    pub to: SocketAddr,
    /// A member's keyring: what it sends is sealed, what it reads opened.
    pub keyring: Option<Keyring>,
}

impl Peer {
    pub async fn to(registry: &GossipRegistry) -> Self {
        Self {
            socket: UdpSocket::bind("127.0.0.1:0").await.unwrap(),
            to: registry.gossip_addr().expect("gossiping"),
            keyring: None,
        }
    }

    /// A member holding `keyring`, speaking to a secure registry (of cluster [`CLUSTER`]).
    pub async fn member_of(registry: &GossipRegistry, keyring: Keyring) -> Self {
        Self {
            keyring: Some(keyring),
            ..Self::to(registry).await
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.socket.local_addr().unwrap()
    }

    pub async fn send(&self, datagram: &[u8]) {
        let sealed;
        let datagram = match &self.keyring {
            Some(keyring) => {
                sealed = keyring.seal_datagram(CLUSTER, datagram);
                &sealed[..]
            }
            None => datagram,
        };
        self.socket.send_to(datagram, self.to).await.unwrap();
    }

    /// The next datagram, if one comes within `within`.
    pub async fn recv(&self, within: Duration) -> Option<Vec<u8>> {
        let mut buf = vec![0; 70_000];
        let (len, _) = tokio::time::timeout(within, self.socket.recv_from(&mut buf))
            .await
            .ok()?
            .ok()?;
        buf.truncate(len);
        match &self.keyring {
            Some(keyring) => keyring.open_datagram(CLUSTER, &buf),
            None => Some(buf),
        }
    }

    /// Sends `syn` and returns the node's SYN-ACK: proof that its gossip task is alive, and
    /// (one task, in order) that it has handled everything sent before.
    pub async fn syn_ack(&self, syn: &[u8]) -> Option<Vec<u8>> {
        self.send(syn).await;
        let give_up = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let left = give_up.saturating_duration_since(tokio::time::Instant::now());
            let reply = self.recv(left).await?;
            if reply.get(3) == Some(&SYN_ACK) {
                return Some(reply);
            }
        }
    }

    /// [`syn_ack`](Self::syn_ack) with a digest of nothing.
    pub async fn alive(&self) -> bool {
        self.syn_ack(&syn(&[])).await.is_some()
    }
}

/// How many nodes the digest of a V0 SYN-ACK lists.
pub fn digest_len(syn_ack: &[u8]) -> u16 {
    assert_eq!(syn_ack[2], 0, "a V0 reply");
    u16::from_le_bytes([syn_ack[4], syn_ack[5]])
}

/// A service description as JSON, padded to about `pad` bytes more.
pub fn description(name: &str, pad: usize) -> String {
    format!(
        r#"{{"name":"{name}","version":"1.0.0","options":{{}},"functions":[],"wire":2,"pad":"{}"}}"#,
        "x".repeat(pad)
    )
}

/// Keeps `id` alive at the peer's node: a heartbeat every 20 ms, as long as the task runs.
pub fn beat(peer: std::sync::Arc<Peer>, id: Id) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for heartbeat in 2.. {
            peer.send(&syn(&[(id.clone(), heartbeat)])).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// As a member holding `keyring`: live generations `7..` of node `name`, each saying it is up
/// at one of `at`, forged into `registry` (of a secure cluster [`CLUSTER`]); returns once
/// `registry` holds them all, or has refused them: a registry whose node has an identity takes
/// only values signed by the node they are about (`docs/security.md`, "Signed gossip"), and
/// these are unsigned. Their heartbeats go on until the tasks are aborted.
pub async fn forge_holders(
    registry: &GossipRegistry,
    keyring: Keyring,
    name: &str,
    at: &[SocketAddr],
) -> Vec<tokio::task::JoinHandle<()>> {
    let known = registry.nodes().len() + at.len();
    let peer = std::sync::Arc::new(Peer::member_of(registry, keyring).await);
    let mut beats = Vec::new();
    for (generation, at) in (7..).zip(at) {
        let id = Id::new(name, generation, peer.addr());
        assert!(peer.syn_ack(&syn(&[(id.clone(), 1)])).await.is_some());
        let ops = Ops::default()
            .node(&id)
            .set("rpc", &at.to_string(), 1)
            .set("status", "up", 2);
        peer.send(&ops.ack()).await;
        beats.push(beat(peer.clone(), id));
    }
    let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
    while (registry.nodes().iter().all(|n| n.name != name)
        || usize::from(digest_len(&peer.syn_ack(&syn(&[])).await.expect("answers"))) < known)
        && registry.forged_updates() < at.len() as u64
    {
        assert!(
            tokio::time::Instant::now() < give_up,
            "the forged holders were never taken: {:?}",
            registry.nodes()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    beats
}

/// A listener on loopback that accepts TCP and says nothing: an open port that is no node.
/// Its connections are held until the task is aborted.
pub async fn bare_listener() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepting = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    (addr, accepting)
}
