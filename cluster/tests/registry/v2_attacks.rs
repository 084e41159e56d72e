//! What a V2 digest part (`vendor/chitchat/src/parts.rs`) lets a peer holding the gossip key (on
//! an `insecure()` registry: anyone) make a node do: its names share their start with the
//! previous entry's, so 18 bytes could stand for a name of 65,535. Unbounded, one datagram of
//! 65 KB decoded to 57 MB of names, two joined halves to 234 MB, and 60 such datagrams stalled
//! a node's gossip past the 2 s that gets it declared dead. A digest now decodes to at most 16
//! times its bytes in names, or is refused as malformed (dropped and counted).

use std::time::{Duration, Instant};

use chitchat::{ChitchatEnvelope, ProtocolVersion};
use cluster::registry::GossipConfig;

use crate::forge::{CLUSTER, Peer, syn, victim};

fn varint(mut v: u64, buf: &mut Vec<u8>) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// A V2 SYN whose digest lists `entries` node ids that all share one name of `name_len`
/// bytes: the first entry spells the name out once, every later one says "the previous
/// name, whole, and nothing more" (18 bytes), and differs only in its generation.
/// Returns the datagram and the bytes of names it decodes to.
fn name_bomb(name_len: usize, entries: usize) -> (Vec<u8>, usize) {
    let mut m = 45_139u16.to_le_bytes().to_vec();
    m.push(2); // V2
    m.push(0); // SYN
    m.push(0); // covers every id
    varint(entries as u64, &mut m);
    for i in 0..entries {
        if i == 0 {
            varint(0, &mut m);
            varint(name_len as u64, &mut m);
            m.extend(std::iter::repeat_n(b'a', name_len));
        } else {
            varint(name_len as u64, &mut m); // shares the previous name, whole
            varint(0, &mut m); // and adds nothing
        }
        m.extend((i as u64 + 1).to_le_bytes()); // generation
        if i == 0 {
            m.push(4);
            m.extend([127, 0, 0, 1]);
        } else {
            m.push(0); // the previous entry's IP
        }
        m.extend(1u16.to_le_bytes()); // port
        varint(1, &mut m); // heartbeat
        varint(0, &mut m); // last GC version
        varint(0, &mut m); // max version
    }
    m.extend(u16::try_from(CLUSTER.len()).unwrap().to_le_bytes());
    m.extend(CLUSTER.as_bytes());
    (m, name_len * entries)
}

/// The peak resident set of this process, in bytes.
fn peak_rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kb: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// The bound: a decoded digest's names at most this many times the bytes it was read from.
const MAX_NAME_EXPANSION: usize = 16;

#[test]
fn a_v2_datagram_whose_names_pass_sixteen_times_its_size_is_refused() {
    // One unfragmented datagram (UDP's 65,507 bytes): a name of 32,000 bytes, then entries
    // of 18 bytes each repeating it.
    let (datagram, names) = name_bomb(32_000, 1_800);
    assert!(datagram.len() <= 65_507, "{} bytes", datagram.len());
    assert!(names > 800 * datagram.len());
    let started = Instant::now();
    let decoded = ChitchatEnvelope::deserialize_up_to(&mut &datagram[..], ProtocolVersion::V2);
    let took = started.elapsed();
    assert!(
        decoded.is_err(),
        "{} bytes of names from {} bytes",
        names,
        datagram.len()
    );
    assert!(took < Duration::from_millis(100), "refused in {took:?}");
    // The same shape within the bound decodes, names and all.
    let (datagram, names) = name_bomb(1_000, 20);
    assert!(names <= MAX_NAME_EXPANSION * datagram.len());
    let decoded = ChitchatEnvelope::deserialize_up_to(&mut &datagram[..], ProtocolVersion::V2);
    assert!(decoded.is_ok(), "{decoded:?}");
}

/// `whole` as the transport's two halves of a datagram too large for one (`transport.rs`).
fn halves(whole: &[u8], id: u64) -> Vec<Vec<u8>> {
    let half = whole.len().div_ceil(2);
    whole
        .chunks(half)
        .enumerate()
        .map(|(index, chunk)| {
            let mut part = b"cg\x01p".to_vec();
            part.extend(id.to_be_bytes());
            part.push(index as u8);
            part.extend(chunk);
            part
        })
        .collect()
}

#[test]
fn two_joined_halves_of_a_v2_datagram_cannot_decode_to_a_quarter_gigabyte_of_names() {
    // Two halves, each within UDP's limit, that the transport joins before decoding: a name
    // of 65,000 bytes (the decoder's bound for one name is 65,535), then 3,600 entries.
    let (whole, names) = name_bomb(65_000, 3_600);
    for half in halves(&whole, 1) {
        assert!(half.len() <= 65_507);
    }
    assert!(names > 200 << 20);
    let before = peak_rss();
    let decoded = ChitchatEnvelope::deserialize_up_to(&mut &whole[..], ProtocolVersion::V2);
    let grew = peak_rss().saturating_sub(before);
    assert!(decoded.is_err(), "refused");
    drop(decoded);
    // At most 16 times the 130 KB it was read from: 2 MB (the bound is loose for the
    // harness's other threads, which share the process's peak).
    assert!(
        grew < 64 << 20,
        "one message made this process hold {} MB more",
        grew >> 20
    );
}

#[tokio::test]
async fn a_syn_is_answered_at_once_behind_sixty_v2_name_bombs() {
    let (node, registry) = victim("victim", GossipConfig::new()).await;
    let peer = Peer::to(&registry).await;
    assert!(peer.alive().await);
    let dropped = registry.dropped_datagrams();
    let (bomb, _) = name_bomb(32_000, 1_800);
    for _ in 0..60 {
        peer.send(&bomb).await;
    }
    // The gossip task reads datagrams in order: the SYN-ACK to this one comes once it has
    // read the bombs sent before it.
    let started = Instant::now();
    let answered = peer.syn_ack(&syn(&[])).await.is_some();
    let stalled = started.elapsed();
    let refused = registry.dropped_datagrams() - dropped;
    node.shutdown().await;
    assert!(
        answered && stalled < Duration::from_millis(500),
        "60 datagrams of 65 KB stalled the node's gossip for {stalled:?} (answered: {answered})"
    );
    assert_eq!(refused, 60, "each bomb dropped and counted as malformed");
}
