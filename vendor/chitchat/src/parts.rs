//! Not upstream's: digests in parts, each in one unfragmented datagram (protocol V2).
//!
//! Upstream sends the digest of every node in one datagram, up to UDP's 65,507 bytes: past
//! some 25 nodes a SYN is IP-fragmented, and the loss of any fragment loses all of it (at 1 %
//! loss, a 45-fragment digest is lost a third of the time). In V2 a digest covers a range of
//! node ids, `[from, to)` ([`Covers`]), and lists the sender's own entry beside it, so that a
//! SYN to a peer is as many datagrams as the digest takes ([`split`]), each complete on its own
//! and answered by a SYN-ACK for the same range ([`reply`]). Every node's entry still goes to
//! every peer gossiped with in every round, as upstream's: heartbeats spread as fast.
//!
//! What a part tells its receiver: its entries, as any digest; and for an id in its range
//! that the receiver holds and the part does not list, that the sender lacks that node. An id
//! outside the range that the part does not list tells nothing.
//!
//! The V2 encoding: a flags byte (1: `from` follows, 2: `to` follows), each bound as a V0 id,
//! the number of entries (LEB128), then each entry: its name as the bytes it shares with the
//! previous entry's name and the rest (both lengths LEB128), its generation (8 bytes), its IP
//! (0: the previous entry's; 4 or 6: the address follows) and port, then heartbeat, last GC
//! version and max version (LEB128). About 22 bytes an entry where V0 takes 49.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use anyhow::{Context, bail};

use crate::digest::{Digest, NodeDigest};
use crate::serialize::{Deserializable, Serializable};
use crate::{ChitchatId, Heartbeat, NodeState};

/// The node ids a digest speaks for: `from` (inclusive) to `to` (exclusive), `None` being
/// unbounded. A V0 or V1 digest covers every id.
#[derive(Debug, Clone, Default, Eq, PartialEq)]
pub struct Covers {
    pub(crate) from: Option<ChitchatId>,
    pub(crate) to: Option<ChitchatId>,
}

impl Covers {
    pub(crate) fn contains(&self, id: &ChitchatId) -> bool {
        self.from.as_ref().is_none_or(|from| id >= from) && self.to.as_ref().is_none_or(|to| id < to)
    }

    pub(crate) fn is_all(&self) -> bool {
        self.from.is_none() && self.to.is_none()
    }
}

/// The node states a digest speaks for: those in its range, then those it lists outside it.
pub(crate) fn spoken_for<'a>(
    states: &'a BTreeMap<ChitchatId, NodeState>,
    digest: &'a Digest,
) -> impl Iterator<Item = (&'a ChitchatId, &'a NodeState)> + 'a {
    let covers = &digest.covers;
    let start = match &covers.from {
        Some(from) => std::ops::Bound::Included(from),
        None => std::ops::Bound::Unbounded,
    };
    let in_range = states
        .range((start, std::ops::Bound::Unbounded))
        .take_while(move |(id, _)| covers.contains(id));
    let listed = digest
        .node_digests
        .keys()
        .filter(move |id| !covers.contains(id))
        .filter_map(move |id| states.get_key_value(id));
    in_range.chain(listed)
}

/// The entries of a digest part that `state` holds: ids in `covers`, in order, without those
/// scheduled for deletion.
fn in_range<'a>(
    states: &'a BTreeMap<ChitchatId, NodeState>,
    covers: &'a Covers,
    skip: &'a HashSet<&ChitchatId>,
) -> impl Iterator<Item = (&'a ChitchatId, NodeDigest)> + 'a {
    let start = match &covers.from {
        Some(from) => std::ops::Bound::Included(from),
        None => std::ops::Bound::Unbounded,
    };
    states
        .range((start, std::ops::Bound::Unbounded))
        .take_while(move |(id, _)| covers.contains(id))
        .filter(move |(id, _)| !skip.contains(id))
        .map(|(id, state)| (id, state.digest()))
}

/// This node's digest in parts of at most `budget` encoded bytes each (a part holds at least
/// its own entry and one other, whatever the budget): every node in `states` but those in
/// `skip`, each part listing `own` beside its range. One part covering every id when all fit.
pub(crate) fn split(
    states: &BTreeMap<ChitchatId, NodeState>,
    own: &ChitchatId,
    skip: &HashSet<&ChitchatId>,
    budget: usize,
) -> Vec<Digest> {
    let own_digest = states.get(own).map(NodeState::digest).unwrap_or_default();
    let longest = longest_id(states.keys());
    let all = Covers::default();
    let mut parts = Vec::new();
    let mut part = Part::new(own, own_digest, None, longest);
    for (id, digest) in in_range(states, &all, skip).filter(|(id, _)| *id != own) {
        if !part.try_add(id, digest, budget) {
            parts.push(part.finish(Some(id.clone())));
            part = Part::new(own, own_digest, Some(id.clone()), longest);
            part.try_add(id, digest, usize::MAX);
        }
    }
    parts.push(part.finish(None));
    parts
}

/// The bytes of the longest of `ids` as a bound (a V0 id): what a part's `to` may take.
fn longest_id<'a>(ids: impl Iterator<Item = &'a ChitchatId>) -> usize {
    ids.map(Serializable::serialized_len).max().unwrap_or(0)
}

/// The digest answering a part `asked`: this node's own entry, its entries for the ids `asked`
/// lists, and its entries in `asked`'s range, as many as `budget` has room for. The range is
/// narrowed to what fits; what the asker then does not hear of, it hears in a later round.
pub(crate) fn reply(
    states: &BTreeMap<ChitchatId, NodeState>,
    own: &ChitchatId,
    skip: &HashSet<&ChitchatId>,
    asked: &Digest,
    budget: usize,
) -> Digest {
    let own_digest = states.get(own).map(NodeState::digest).unwrap_or_default();
    let range = in_range(states, &asked.covers, skip).map(|(id, _)| id);
    let longest = longest_id(range.chain(asked.covers.to.iter()));
    let mut part = Part::new(own, own_digest, asked.covers.from.clone(), longest);
    for id in asked.node_digests.keys() {
        if let Some(state) = states.get(id)
            && !skip.contains(id)
            && !asked.covers.contains(id)
        {
            part.add_extra(id, state.digest(), budget);
        }
    }
    for (id, digest) in in_range(states, &asked.covers, skip) {
        if !part.try_add(id, digest, budget) {
            return part.finish(Some(id.clone()));
        }
    }
    part.finish(asked.covers.to.clone())
}

/// A part being filled, with a bound on the bytes it takes encoded. Its range entries cost
/// what they cost one after the other; an entry outside the range (the own entry, the asker's)
/// sorts anywhere among them, so it is counted whole, with room for the entry after it losing
/// its shared name and address ([`SLACK`]). Room for a `to` bound as long as the longest id is
/// kept.
struct Part {
    digest: Digest,
    len: usize,
    previous: Option<ChitchatId>,
}

/// What an entry outside the range can cost the range entry sorted after it: a name of up to 64
/// bytes no longer shared, and an IPv6 address.
const SLACK: usize = 64 + 16;

impl Part {
    fn new(own: &ChitchatId, own_digest: NodeDigest, from: Option<ChitchatId>, longest: usize) -> Self {
        let bounds = 1 + from.as_ref().map_or(0, Serializable::serialized_len) + longest;
        let mut digest = Digest::default();
        digest.covers.from = from;
        let mut part = Part { digest, len: bounds + 3, previous: None };
        part.add_extra(own, own_digest, usize::MAX);
        part
    }

    /// An entry outside the range, if the part stays within `budget` with it: an asker that
    /// lists many ids outside its range gets no reply larger than its budget for them.
    fn add_extra(&mut self, id: &ChitchatId, digest: NodeDigest, budget: usize) {
        let len = entry_len(None, id, &digest) + SLACK;
        if self.digest.node_digests.contains_key(id) || self.len + len > budget {
            return;
        }
        self.digest.node_digests.insert(id.clone(), digest);
        self.len += len;
    }

    /// Adds a range entry (in order) if the part stays within `budget` bytes with it, or if it
    /// is the first: a part always makes progress.
    fn try_add(&mut self, id: &ChitchatId, digest: NodeDigest, budget: usize) -> bool {
        if self.digest.node_digests.contains_key(id) {
            return true;
        }
        let len = entry_len(self.previous.as_ref(), id, &digest);
        if self.previous.is_some() && self.len + len > budget {
            return false;
        }
        self.len += len;
        self.digest.node_digests.insert(id.clone(), digest);
        self.previous = Some(id.clone());
        true
    }

    fn finish(mut self, to: Option<ChitchatId>) -> Digest {
        self.digest.covers.to = to;
        self.digest
    }
}

/// The bytes of one entry encoded after `previous`.
fn entry_len(previous: Option<&ChitchatId>, id: &ChitchatId, digest: &NodeDigest) -> usize {
    let shared = previous.map_or(0, |p| shared_prefix(&p.node_id, &id.node_id));
    let suffix = id.node_id.len() - shared;
    let same_ip = previous.is_some_and(|p| p.gossip_advertise_addr.ip() == id.gossip_advertise_addr.ip());
    let ip = match id.gossip_advertise_addr.ip() {
        _ if same_ip => 0,
        IpAddr::V4(_) => 4,
        IpAddr::V6(_) => 16,
    };
    varint_len(shared as u64)
        + varint_len(suffix as u64)
        + suffix
        + 8
        + 1
        + ip
        + 2
        + varint_len(digest.heartbeat.0)
        + varint_len(digest.last_gc_version)
        + varint_len(digest.max_version)
}

/// The bytes two names share at their start, ending on a character boundary.
fn shared_prefix(a: &str, b: &str) -> usize {
    let mut n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    while !b.is_char_boundary(n) {
        n -= 1;
    }
    n
}

pub(crate) fn serialize_v2(digest: &Digest, buf: &mut Vec<u8>) {
    let covers = &digest.covers;
    buf.push(u8::from(covers.from.is_some()) | (u8::from(covers.to.is_some()) << 1));
    for bound in [&covers.from, &covers.to].into_iter().flatten() {
        bound.serialize(buf);
    }
    write_varint(digest.node_digests.len() as u64, buf);
    let mut previous: Option<&ChitchatId> = None;
    for (id, entry) in &digest.node_digests {
        let shared = previous.map_or(0, |p| shared_prefix(&p.node_id, &id.node_id));
        let suffix = &id.node_id.as_bytes()[shared..];
        write_varint(shared as u64, buf);
        write_varint(suffix.len() as u64, buf);
        buf.extend_from_slice(suffix);
        buf.extend_from_slice(&id.generation_id.to_le_bytes());
        let addr = id.gossip_advertise_addr;
        match addr.ip() {
            ip if previous.is_some_and(|p| p.gossip_advertise_addr.ip() == ip) => buf.push(0),
            IpAddr::V4(ip) => {
                buf.push(4);
                buf.extend_from_slice(&ip.octets());
            }
            IpAddr::V6(ip) => {
                buf.push(6);
                buf.extend_from_slice(&ip.octets());
            }
        }
        buf.extend_from_slice(&addr.port().to_le_bytes());
        write_varint(entry.heartbeat.0, buf);
        write_varint(entry.last_gc_version, buf);
        write_varint(entry.max_version, buf);
        previous = Some(id);
    }
}

/// The bytes of names a V2 digest may decode to, per byte it was read from. A name shares its
/// start with the previous one, so 18 bytes could stand for 65,535 of name: unbounded, one
/// datagram of 65 KB decoded to 57 MB of names. Entries of 20-character names take about 22
/// bytes each, and past 16 bytes of fixed fields an entry can stand for at most 16 times its
/// size only with names over 256 bytes that share all but their end.
pub(crate) const MAX_NAME_EXPANSION: usize = 16;

pub(crate) fn deserialize_v2(buf: &mut &[u8]) -> anyhow::Result<Digest> {
    let mut names_left = buf.len().saturating_mul(MAX_NAME_EXPANSION);
    let flags = take(buf, 1)?[0];
    if flags & !3 != 0 {
        bail!("unknown digest flags {flags:#x}");
    }
    let from = if flags & 1 != 0 { Some(ChitchatId::deserialize(buf)?) } else { None };
    let to = if flags & 2 != 0 { Some(ChitchatId::deserialize(buf)?) } else { None };
    let count = read_varint(buf)?;
    let mut node_digests = BTreeMap::new();
    let mut previous: Option<ChitchatId> = None;
    for _ in 0..count {
        let shared = usize::try_from(read_varint(buf)?)?;
        let suffix_len = usize::try_from(read_varint(buf)?)?;
        let prefix = match &previous {
            Some(p) => p.node_id.as_bytes().get(..shared),
            None => (shared == 0).then_some(&[][..]),
        }
        .context("a name shares more than the previous one has")?;
        let suffix = take(buf, suffix_len)?;
        if prefix.len() + suffix.len() > usize::from(u16::MAX) {
            bail!("a node name longer than 65,535 bytes");
        }
        names_left = names_left.checked_sub(prefix.len() + suffix.len()).with_context(|| {
            format!("names of more than {MAX_NAME_EXPANSION} times the digest's bytes")
        })?;
        let name = String::from_utf8([prefix, suffix].concat())?;
        let generation = u64::from_le_bytes(take(buf, 8)?.try_into()?);
        let ip = match take(buf, 1)?[0] {
            0 => previous.as_ref().context("no previous address")?.gossip_advertise_addr.ip(),
            4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(take(buf, 4)?)?)),
            6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(take(buf, 16)?)?)),
            tag => bail!("unknown address tag {tag}"),
        };
        let port = u16::from_le_bytes(take(buf, 2)?.try_into()?);
        let entry = NodeDigest {
            heartbeat: Heartbeat(read_varint(buf)?),
            last_gc_version: read_varint(buf)?,
            max_version: read_varint(buf)?,
        };
        let id = ChitchatId {
            node_id: Arc::from(name),
            generation_id: generation,
            gossip_advertise_addr: SocketAddr::new(ip, port),
        };
        node_digests.insert(id.clone(), entry);
        previous = Some(id);
    }
    Ok(Digest {
        node_digests,
        covers: Covers { from, to },
    })
}

fn take<'a>(buf: &mut &'a [u8], len: usize) -> anyhow::Result<&'a [u8]> {
    if buf.len() < len {
        bail!("digest cut short: {len} bytes wanted, {} left", buf.len());
    }
    let (head, rest) = buf.split_at(len);
    *buf = rest;
    Ok(head)
}

fn varint_len(mut value: u64) -> usize {
    let mut len = 1;
    while value >= 0x80 {
        value >>= 7;
        len += 1;
    }
    len
}

fn write_varint(mut value: u64, buf: &mut Vec<u8>) {
    while value >= 0x80 {
        buf.push(value as u8 | 0x80);
        value >>= 7;
    }
    buf.push(value as u8);
}

/// LEB128, refusing more than 64 bits rather than wrapping.
fn read_varint(buf: &mut &[u8]) -> anyhow::Result<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = take(buf, 1)?[0];
        let bits = u64::from(byte & 0x7f);
        if shift == 63 && bits > 1 {
            bail!("a number past 64 bits");
        }
        value |= bits << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    bail!("a number past 64 bits")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ProtocolVersion;

    fn id(name: &str, port: u16) -> ChitchatId {
        ChitchatId::new(name.to_owned(), 1_700_000_000_000_000_000 + u64::from(port), ([10, 0, 0, 1], port).into())
    }

    fn states(n: u16) -> BTreeMap<ChitchatId, NodeState> {
        (0..n)
            .map(|i| {
                let id = id(&format!("orders-{i:04}"), 7_000 + i);
                let mut state = NodeState::for_test();
                state.try_set_heartbeat(Heartbeat(1));
                state.try_set_heartbeat(Heartbeat(1_000 + u64::from(i)));
                (id, state)
            })
            .collect()
    }

    fn roundtrip(digest: &Digest) -> Digest {
        let mut buf = Vec::new();
        digest.serialize(ProtocolVersion::V2, &mut buf);
        assert_eq!(buf.len(), digest.serialized_len(ProtocolVersion::V2));
        let mut read = &buf[..];
        let back = Digest::deserialize(ProtocolVersion::V2, &mut read).unwrap();
        assert!(read.is_empty());
        back
    }

    #[test]
    fn a_digest_roundtrips_with_its_range_names_and_addresses() {
        let mut digest = Digest::default();
        for (name, addr) in [
            ("a", "10.0.0.1:1"),
            ("ab", "10.0.0.1:2"),
            ("abé", "[::1]:3"),
            ("abéz", "[::1]:4"),
            ("b", "10.0.0.2:5"),
        ] {
            let id = ChitchatId::new(name.to_owned(), u64::MAX, addr.parse().unwrap());
            digest.node_digests.insert(
                id,
                NodeDigest { heartbeat: Heartbeat(u64::MAX), last_gc_version: 0, max_version: 300 },
            );
        }
        digest.covers.from = Some(id("a", 1));
        digest.covers.to = Some(id("z", 9));
        assert_eq!(roundtrip(&digest), digest);
        digest.covers = Covers::default();
        assert_eq!(roundtrip(&digest), digest);
    }

    #[test]
    fn an_entry_takes_under_half_of_v0s_bytes() {
        let states = states(100);
        let parts = split(&states, states.keys().next().unwrap(), &HashSet::new(), usize::MAX);
        assert_eq!(parts.len(), 1);
        let v2 = parts[0].serialized_len(ProtocolVersion::V2);
        let v0 = parts[0].serialized_len(ProtocolVersion::V0);
        assert!(v2 * 2 < v0, "V2 {v2} bytes, V0 {v0}");
    }

    #[test]
    fn parts_fit_their_budget_and_cover_every_id_once() {
        let states = states(300);
        let own = id("orders-0150", 7_150);
        for budget in [300, 1_232 - 60, 4_000] {
            let parts = split(&states, &own, &HashSet::new(), budget);
            assert!(parts.len() > 1);
            let mut seen = HashSet::new();
            for (i, part) in parts.iter().enumerate() {
                let len = part.serialized_len(ProtocolVersion::V2);
                assert!(len <= budget, "part {i} takes {len} bytes of {budget}");
                assert!(part.node_digests.contains_key(&own), "part {i} lists the sender");
                assert_eq!(roundtrip(part), *part);
                for id in part.node_digests.keys().filter(|id| part.covers.contains(id)) {
                    assert!(seen.insert(id.clone()), "{id:?} in two ranges");
                }
                // Contiguous: each range starts where the last ended.
                let previous_end = i.checked_sub(1).and_then(|j| parts[j].covers.to.clone());
                assert_eq!(part.covers.from, previous_end);
            }
            assert_eq!(parts.last().unwrap().covers.to, None);
            assert_eq!(seen.len(), states.len(), "every id, at budget {budget}");
        }
    }

    #[test]
    fn a_reply_answers_the_asked_range_and_narrows_it_to_what_fits() {
        let states = states(300);
        let own = id("orders-0007", 7_007);
        let asker = id("orders-0290", 7_290);
        let parts = split(&states, &asker, &HashSet::new(), 1_000);
        let asked = &parts[1];
        let answer = reply(&states, &own, &HashSet::new(), asked, 100_000);
        assert_eq!(answer.covers, asked.covers, "everything fits: the same range");
        assert!(answer.node_digests.contains_key(&own));
        assert!(answer.node_digests.contains_key(&asker), "what the asker listed, answered");
        let listed = answer.node_digests.keys().filter(|id| answer.covers.contains(id)).count();
        let held = states.keys().filter(|id| asked.covers.contains(id)).count();
        assert_eq!(listed, held);

        let narrow = reply(&states, &own, &HashSet::new(), asked, 300);
        assert!(narrow.serialized_len(ProtocolVersion::V2) <= 300);
        assert_eq!(narrow.covers.from, asked.covers.from);
        let end = narrow.covers.to.clone().expect("narrowed");
        assert!(asked.covers.contains(&end), "the narrowed end is inside the asked range");
        assert!(narrow.node_digests.keys().filter(|id| narrow.covers.contains(id)).all(|id| *id < end));
    }

    #[test]
    fn names_that_share_their_start_decode_within_the_bound() {
        // 1,000 nodes named as the cluster crate names them, and the worst a cluster node can
        // send: names of 255 bytes (the crate's longest), all one name in generations that
        // differ, each entry 17 bytes standing for 255.
        let mut digest = Digest::default();
        for i in 0..1_000u64 {
            let addr = "10.0.0.1:7280".parse().unwrap();
            let id = ChitchatId::new(format!("orders-7f9c4d-{i:05}"), i, addr);
            let entry = NodeDigest { heartbeat: Heartbeat(i), last_gc_version: 0, max_version: i };
            digest.node_digests.insert(id, entry);
        }
        assert_eq!(roundtrip(&digest), digest);
        let mut digest = Digest::default();
        for generation in 0..200u64 {
            let id = ChitchatId::new("n".repeat(255), generation, "10.0.0.1:7280".parse().unwrap());
            let entry = NodeDigest { heartbeat: Heartbeat(1), last_gc_version: 0, max_version: 0 };
            digest.node_digests.insert(id, entry);
        }
        assert_eq!(roundtrip(&digest), digest);
    }

    /// A digest of `entries` ids sharing one name of `name_len` bytes: the first spells it out,
    /// each later one says "the previous name, whole" (18 bytes) and differs in generation.
    fn name_bomb(name_len: usize, entries: usize) -> Vec<u8> {
        let mut bomb = vec![0];
        write_varint(entries as u64, &mut bomb);
        for i in 0..entries {
            if i == 0 {
                write_varint(0, &mut bomb);
                write_varint(name_len as u64, &mut bomb);
                bomb.extend(std::iter::repeat_n(b'a', name_len));
            } else {
                write_varint(name_len as u64, &mut bomb);
                write_varint(0, &mut bomb);
            }
            bomb.extend((i as u64).to_le_bytes());
            if i == 0 {
                bomb.extend([4, 127, 0, 0, 1]);
            } else {
                bomb.push(0);
            }
            bomb.extend([1, 0, 1, 0, 0]);
        }
        bomb
    }

    #[test]
    fn a_digest_naming_more_than_its_bound_is_refused() {
        // Unbounded, this datagram of 65 KB decoded to 57 MB of names.
        let bomb = name_bomb(32_000, 1_800);
        assert!(bomb.len() < 65_507);
        let error = Digest::deserialize(ProtocolVersion::V2, &mut &bomb[..]).unwrap_err();
        assert!(error.to_string().contains("times the digest's bytes"), "{error}");
        // Within the bound, the same shape decodes: 15 names of 32,000 bytes in 32 KB.
        let small = name_bomb(32_000, 15);
        let digest = Digest::deserialize(ProtocolVersion::V2, &mut &small[..]).unwrap();
        let names: usize = digest.node_digests.keys().map(|id| id.node_id.len()).sum();
        assert!(names <= small.len() * MAX_NAME_EXPANSION);
    }

    #[test]
    fn hostile_bytes_are_refused_without_panic() {
        let states = states(20);
        let parts = split(&states, states.keys().next().unwrap(), &HashSet::new(), usize::MAX);
        let mut good = Vec::new();
        parts[0].serialize(ProtocolVersion::V2, &mut good);
        // Every prefix, and every byte flipped, reads as an error or a digest, never a panic.
        for len in 0..good.len() {
            let _ = Digest::deserialize(ProtocolVersion::V2, &mut &good[..len]);
        }
        for i in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[i] ^= 1 << bit;
                let _ = Digest::deserialize(ProtocolVersion::V2, &mut &bad[..]);
            }
        }
        for bad in [
            &[4u8][..],                               // unknown flags
            &[0, 1, 3, 0][..],                        // a name sharing more than there was
            &[0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f][..], // count past 64 bits
        ] {
            assert!(Digest::deserialize(ProtocolVersion::V2, &mut &bad[..]).is_err(), "{bad:?}");
        }
    }
}
