//! Sealing gossip datagrams: each is encrypted and authenticated with ChaCha20-Poly1305 under
//! the keyring's primary key.
//!
//! ```text
//! magic "cg\x01s" (4) | key id (4) | sent at, µs since 1970 (8) | nonce (12) | ciphertext + tag (16)
//! ```
//!
//! The header and the cluster's name are authenticated with the payload: a datagram of
//! another cluster, a changed header or a forged one does not open. A datagram sent more than
//! the replay window ago (or that far in the future: clocks differ) is refused, and so is one
//! whose nonce was already seen inside the window.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ring::aead::{Aad, Nonce, Tag};
use ring::rand::{SecureRandom, SystemRandom};

use super::{KeyId, Keyring};

/// The first bytes of a sealed datagram.
pub(crate) const MAGIC: [u8; 4] = *b"cg\x01s";
const HEADER: usize = 4 + 4 + 8 + 12;
/// What sealing adds to a datagram.
pub(crate) const OVERHEAD: usize = HEADER + 16;
/// The most nonces remembered; past it the oldest is forgotten (a replay of it inside the
/// window would then open: the bound is what keeps a busy cluster's memory flat).
const MAX_SEEN: usize = 1 << 17;

/// Why a datagram was not opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// It does not begin with [`MAGIC`]: a plaintext sender, or not gossip at all.
    NotSealed,
    /// Too short to be sealed.
    Truncated,
    /// Sealed with a key this node does not hold.
    UnknownKey(KeyId),
    /// It does not open under the key it names: forged, damaged, or of another cluster.
    Forged,
    /// Sent outside the replay window.
    Stale(i64),
    /// Its nonce was seen already inside the window.
    Replayed,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::NotSealed => f.write_str(
                "not sealed: a node without the cluster's gossip key (started insecure?) or not gossip",
            ),
            Refused::Truncated => f.write_str("too short to be a sealed datagram"),
            Refused::UnknownKey(id) => write!(
                f,
                "sealed with key {id}, which this node does not hold (a key rotation half done?)"
            ),
            Refused::Forged => f.write_str(
                "does not open: forged, damaged, or sealed for another cluster",
            ),
            Refused::Stale(ms) => write!(
                f,
                "sent {ms} ms from this node's clock, outside the replay window (a replay, or clocks apart)"
            ),
            Refused::Replayed => f.write_str("a replay of a datagram already received"),
        }
    }
}

/// Seals and opens one node's datagrams.
pub(crate) struct Sealer {
    keyring: Keyring,
    cluster: Vec<u8>,
    window: Duration,
    seen: Mutex<Seen>,
    random: SystemRandom,
}

#[derive(Default)]
struct Seen {
    nonces: HashSet<[u8; 12]>,
    order: VecDeque<([u8; 12], u64)>,
}

impl Sealer {
    pub(crate) fn new(keyring: Keyring, cluster: &str, window: Duration) -> Self {
        Self {
            keyring,
            cluster: cluster.as_bytes().to_vec(),
            window,
            seen: Mutex::default(),
            random: SystemRandom::new(),
        }
    }

    /// `plain`, sealed with the primary key.
    pub(crate) fn seal(&self, plain: &[u8]) -> Vec<u8> {
        self.seal_at(plain, now_micros())
    }

    /// `plain`, sealed as sent at `sent` (µs since 1970).
    pub(crate) fn seal_at(&self, plain: &[u8], sent: u64) -> Vec<u8> {
        let (id, key) = self.keyring.sealing();
        let mut nonce = [0u8; 12];
        self.random
            .fill(&mut nonce)
            .expect("the operating system's random source failed");
        let mut out = Vec::with_capacity(OVERHEAD + plain.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&id.0);
        out.extend_from_slice(&sent.to_be_bytes());
        out.extend_from_slice(&nonce);
        let mut aad = out.clone();
        aad.extend_from_slice(&self.cluster);
        let mut body = plain.to_vec();
        let tag = key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&aad),
                &mut body,
            )
            .expect("a gossip datagram is far below ChaCha20-Poly1305's limit");
        out.extend_from_slice(&body);
        out.extend_from_slice(tag.as_ref());
        out
    }

    /// The payload of a sealed datagram, or why there is none.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn open(&self, datagram: &[u8]) -> Result<Vec<u8>, Refused> {
        self.open_timed(datagram).map(|(plain, _)| plain)
    }

    /// The payload of a sealed datagram and when its sender sealed it (µs since 1970, by the
    /// sender's clock), or why there is none.
    pub(crate) fn open_timed(&self, datagram: &[u8]) -> Result<(Vec<u8>, u64), Refused> {
        if !datagram.starts_with(&MAGIC) {
            return Err(Refused::NotSealed);
        }
        if datagram.len() < OVERHEAD {
            return Err(Refused::Truncated);
        }
        let (header, rest) = datagram.split_at(HEADER);
        let id = KeyId(header[4..8].try_into().expect("4 bytes"));
        let sent = u64::from_be_bytes(header[8..16].try_into().expect("8 bytes"));
        let nonce: [u8; 12] = header[16..28].try_into().expect("12 bytes");
        let key = self.keyring.opening(id).ok_or(Refused::UnknownKey(id))?;
        // The time is checked before the datagram is opened: a node that has fallen behind
        // reads many that are out of the window, and opening each would only slow it further.
        // (A forged time gains nothing: changed, the datagram does not open.)
        let now = now_micros();
        let window = u64::try_from(self.window.as_micros()).unwrap_or(u64::MAX);
        if now.abs_diff(sent) > window {
            let ms = (i128::from(sent) - i128::from(now)) / 1000;
            return Err(Refused::Stale(
                ms.clamp(i64::MIN.into(), i64::MAX.into()) as i64
            ));
        }
        let (body, tag) = rest.split_at(rest.len() - 16);
        let mut aad = header.to_vec();
        aad.extend_from_slice(&self.cluster);
        let mut plain = body.to_vec();
        let tag = Tag::try_from(tag).map_err(|_| Refused::Truncated)?;
        key.open_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&aad),
            tag,
            &mut plain,
            0..,
        )
        .map_err(|_| Refused::Forged)?;
        // Only an authentic datagram gets this far: its time and nonce are the sender's.
        self.remember(nonce, now, window)?;
        Ok((plain, sent))
    }

    fn remember(&self, nonce: [u8; 12], now: u64, window: u64) -> Result<(), Refused> {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        // Anything received more than twice the window ago can no longer pass the time check.
        while let Some(&(old, at)) = seen.order.front() {
            if now.saturating_sub(at) <= window.saturating_mul(2) && seen.order.len() < MAX_SEEN {
                break;
            }
            seen.order.pop_front();
            seen.nonces.remove(&old);
        }
        if !seen.nonces.insert(nonce) {
            return Err(Refused::Replayed);
        }
        seen.order.push_back((nonce, now));
        Ok(())
    }
}

impl Keyring {
    /// `plain` sealed as a node of `cluster` holding this keyring seals a gossip datagram. Not
    /// a public API: what the tests of `cluster/tests/registry/` forge as a member holding the
    /// key.
    #[doc(hidden)]
    pub fn seal_datagram(&self, cluster: &str, plain: &[u8]) -> Vec<u8> {
        Sealer::new(self.clone(), cluster, Duration::from_secs(30)).seal(plain)
    }

    /// The payload of a gossip datagram sealed for `cluster` under a key of this keyring, if
    /// it opens. Not a public API, as [`seal_datagram`](Self::seal_datagram).
    #[doc(hidden)]
    pub fn open_datagram(&self, cluster: &str, sealed: &[u8]) -> Option<Vec<u8>> {
        Sealer::new(self.clone(), cluster, Duration::from_secs(30))
            .open_timed(sealed)
            .ok()
            .map(|(plain, _)| plain)
    }
}

pub(crate) fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::GossipKey;

    fn sealer(key: &GossipKey, cluster: &str) -> Sealer {
        Sealer::new(Keyring::new(key.clone()), cluster, Duration::from_secs(30))
    }

    #[test]
    fn what_is_sealed_opens_once_and_nothing_else_opens() {
        let key = GossipKey::generate();
        let (a, b) = (sealer(&key, "prod"), sealer(&key, "prod"));
        let sealed = a.seal(b"hello");
        assert_eq!(sealed.len(), 5 + OVERHEAD);
        assert_eq!(b.open(&sealed).unwrap(), b"hello");
        assert_eq!(b.open(&sealed), Err(Refused::Replayed));
        assert_eq!(b.open(b"hello"), Err(Refused::NotSealed));
        assert_eq!(b.open(&sealed[..10]), Err(Refused::Truncated));

        let mut flipped = a.seal(b"hello");
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(b.open(&flipped), Err(Refused::Forged));
        let mut later = a.seal(b"hello");
        later[15] ^= 1; // the time is authenticated too
        assert_eq!(b.open(&later), Err(Refused::Forged));

        assert_eq!(
            sealer(&key, "staging").open(&a.seal(b"x")),
            Err(Refused::Forged),
            "the same key under another cluster's name does not open"
        );
        let stranger = sealer(&GossipKey::generate(), "prod");
        assert!(matches!(
            stranger.open(&a.seal(b"x")),
            Err(Refused::UnknownKey(_))
        ));
    }

    proptest::proptest! {
        #[test]
        fn anything_sealed_opens_to_itself_and_not_with_any_one_bit_flipped(
            plain in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            bit in proptest::prelude::any::<proptest::sample::Index>(),
        ) {
            let key = GossipKey::from_hex(&"5a".repeat(32)).unwrap();
            let (a, b) = (sealer(&key, "prod"), sealer(&key, "prod"));
            let sealed = a.seal(&plain);
            let bit = bit.index(sealed.len() * 8);
            let mut flipped = sealed.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let refused = b.open(&flipped);
            proptest::prop_assert!(
                matches!(refused, Err(Refused::NotSealed | Refused::UnknownKey(_) | Refused::Forged | Refused::Stale(_))),
                "bit {} flipped: {:?}", bit, refused
            );
            proptest::prop_assert_eq!(b.open(&sealed), Ok(plain));
        }

        #[test]
        fn any_bytes_are_refused_never_a_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..100),
        ) {
            let key = GossipKey::from_hex(&"5a".repeat(32)).unwrap();
            let mut datagram = MAGIC.to_vec();
            datagram.extend_from_slice(&key.id().0);
            datagram.extend_from_slice(&bytes);
            proptest::prop_assert!(sealer(&key, "prod").open(&datagram).is_err());
            proptest::prop_assert!(sealer(&key, "prod").open(&bytes).is_err());
        }
    }

    #[test]
    fn an_old_datagram_is_refused() {
        let key = GossipKey::generate();
        let (a, b) = (sealer(&key, "prod"), sealer(&key, "prod"));
        let minute = 60_000_000;
        let old = a.seal_at(b"x", now_micros() - minute);
        assert!(matches!(b.open(&old), Err(Refused::Stale(ms)) if ms < -59_000));
        let future = a.seal_at(b"x", now_micros() + minute);
        assert!(matches!(b.open(&future), Err(Refused::Stale(ms)) if ms > 59_000));
    }
}
