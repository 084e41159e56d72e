//! What a peer holding the gossip key can send (issue 11's audit, H1, H2, M1): nothing
//! panics the node's gossip, makes it decompress without bound, or writes its own state.
//! Each test forges datagrams by hand (`forge.rs`) to a node on an insecure registry, then
//! asks it for a SYN-ACK: an answer proves its gossip task is alive and has handled what came
//! before.

use std::time::Duration;

use chitchat::{ChitchatEnvelope, MAX_DECOMPRESSED_LEN, ProtocolVersion};
use cluster::registry::{GossipConfig, Registry};

use crate::forge::{Id, Ops, Peer, description, rle_frame, syn, syn_v1, victim};
use crate::support::{Engine, Mode, SearchServer, until};

/// A node that `peer` named in a digest, so that the victim takes deltas about it.
async fn known(peer: &Peer, name: &str) -> Id {
    let id = Id::new(name, 1, peer.addr());
    assert!(peer.syn_ack(&syn(&[(id.clone(), 1)])).await.is_some());
    id
}

#[tokio::test]
async fn a_delta_whose_max_version_is_below_its_last_key_is_dropped_and_gossip_goes_on() {
    let (node, registry) = victim("victim", GossipConfig::new()).await;
    let peer = Peer::to(&registry).await;
    let x = known(&peer, "x").await;
    let dropped = registry.dropped_datagrams();
    // Before: `assert!(node_delta.max_version >= self.max_version)` ended chitchat's task.
    peer.send(
        &Ops::default()
            .node(&x)
            .set("k", "v", 1000)
            .max_version(50)
            .ack(),
    )
    .await;
    assert!(peer.alive().await, "gossip is alive");
    assert_eq!(
        registry.dropped_datagrams(),
        dropped + 1,
        "refused as it was read"
    );
    assert_eq!(registry.failure(), None);
    node.shutdown().await;
}

#[tokio::test]
async fn a_key_whose_first_character_takes_two_bytes_does_not_stop_gossip() {
    let (node, registry) = victim("victim", GossipConfig::new()).await;
    let peer = Peer::to(&registry).await;
    let x = known(&peer, "x").await;
    // Before: chitchat's listeners sliced the key at byte 1, inside `é`.
    peer.send(&Ops::default().node(&x).set("é", "v", 1).ack())
        .await;
    assert!(peer.alive().await, "gossip is alive");
    assert_eq!(registry.failure(), None);
    node.shutdown().await;
}

#[tokio::test]
async fn node_ids_too_long_for_a_digest_are_not_admitted_and_gossip_goes_on() {
    let (node, registry) = victim("victim", GossipConfig::new()).await;
    let peer = Peer::to(&registry).await;
    // Before: the second made the node's own digest longer than a datagram, and answering a
    // SYN asserted that a delta still fitted beside it. Now a name past 255 bytes is refused.
    for name in ["a", "b"] {
        let long = Id::new(name.repeat(40_000), 1, peer.addr());
        assert!(peer.syn_ack(&syn(&[(long, 1)])).await.is_some());
    }
    assert!(peer.alive().await, "gossip is alive");
    assert!(registry.refused_updates() >= 1);
    node.shutdown().await;
}

#[tokio::test]
async fn this_nodes_own_state_sent_by_a_peer_is_dropped() {
    let (node, registry) = victim("victim", GossipConfig::new()).await;
    let peer = Peer::to(&registry).await;
    let own = Id::of(&node, &registry);
    // Before: applied as a peer's update. `rev` at u64::MAX then overflowed on the next
    // registration, and `svc:evil` was served by this node to everyone.
    peer.send(
        &Ops::default()
            .node(&own)
            .set("rev", &u64::MAX.to_string(), 1_000_000)
            .set("svc:evil", &description("evil", 0), 1_000_001)
            .set("status", "up", 1_000_002)
            .ack(),
    )
    .await;
    assert!(peer.alive().await);
    assert!(registry.lookup("evil").is_empty(), "no forged entry");
    assert!(registry.refused_updates() >= 1);
    let engine = std::sync::Arc::new(Engine::new("victim", Mode::Answer));
    let _registration = node
        .serve(SearchServer::new(engine))
        .await
        .expect("registers");
    until("its own entry is in its copy", || {
        registry.lookup("search").len() == 1
    })
    .await;
    node.shutdown().await;
}

/// An ACK of `blocks` compressed blocks, each 11 bytes decompressing to 64 KiB of
/// `SetMaxVersion` operations (tag 2, version 0x0202…: nine bytes of 2), after a node.
fn bomb(blocks: usize) -> Vec<u8> {
    let x = Id::new("x", 1, "127.0.0.1:1".parse().unwrap());
    let mut m = Ops::default().node(&x).ack();
    m.pop(); // its "no more blocks"
    let frame = rle_frame(2, 9 * 7281);
    for _ in 0..blocks {
        m.push(1); // compressed
        m.extend(u16::try_from(frame.len()).unwrap().to_le_bytes());
        m.extend(&frame);
    }
    m.push(0);
    m
}

#[test]
fn a_message_that_decompresses_past_the_cap_is_refused() {
    let small = bomb(2);
    ChitchatEnvelope::deserialize(&mut &small[..]).expect("128 KiB of operations is a delta");
    // 32 blocks: 2 MiB from 450 bytes. Before: read whole, however many blocks there were
    // (a 65 KB datagram made 186 MiB).
    let big = bomb(32);
    assert!(big.len() < 500);
    let err = ChitchatEnvelope::deserialize(&mut &big[..]).expect_err("past the cap");
    assert!(
        format!("{err:#}").contains(&format!("more than {MAX_DECOMPRESSED_LEN} bytes")),
        "{err:#}"
    );
}

#[tokio::test]
async fn a_datagram_full_of_compressed_blocks_is_refused_and_gossip_goes_on() {
    let (node, registry) = victim("victim", GossipConfig::new()).await;
    let peer = Peer::to(&registry).await;
    // About 4,600 blocks: 290 MiB decompressed, before.
    let datagram = bomb(4_600);
    assert!(datagram.len() < 65_507);
    let dropped = registry.dropped_datagrams();
    peer.send(&datagram).await;
    assert!(peer.alive().await);
    assert_eq!(registry.dropped_datagrams(), dropped + 1);
    node.shutdown().await;
}

#[tokio::test]
async fn a_v1_message_is_refused_before_it_is_read() {
    let v1 = syn_v1();
    let refused = ChitchatEnvelope::deserialize_up_to(&mut &v1[..], ProtocolVersion::V0);
    assert!(refused.is_err());
    let (node, registry) = victim("victim", GossipConfig::new()).await;
    let peer = Peer::to(&registry).await;
    let dropped = registry.dropped_datagrams();
    // Before: answered in V1, the compressed digest read first.
    peer.send(&v1).await;
    let reply = peer
        .syn_ack(&syn(&[]))
        .await
        .expect("the V0 SYN is answered");
    assert_eq!(reply[2], 0, "the first answer is the V0 one's");
    assert!(peer.recv(Duration::from_millis(50)).await.is_none());
    assert_eq!(registry.dropped_datagrams(), dropped + 1);
    node.shutdown().await;
}
