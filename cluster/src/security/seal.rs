//! Sealing gossip datagrams: each is encrypted and authenticated with XChaCha20-Poly1305 under
//! the keyring's primary key.
//!
//! ```text
//! magic "cg\x02s" (4) | key id (4) | sent at, µs since 1970 (8) | nonce (24) | ciphertext + tag (16)
//! ```
//!
//! The header and the cluster's name are authenticated with the payload: a datagram of
//! another cluster, a changed header or a forged one does not open. A datagram sent more than
//! the replay window ago (or that far in the future: clocks differ) is refused, and so is one
//! whose nonce was already seen inside the window.
//!
//! Why XChaCha20: every node seals under one cluster-wide key with nonces drawn at random, and
//! two datagrams under one key and one nonce give away both plaintexts and the power to forge.
//! With ChaCha20-Poly1305's 96-bit nonce that risk reaches 2^-32 after about 2^32 datagrams
//! per key, which a cluster of 100 nodes sending 50 a second reaches in under ten days; with a
//! 192-bit nonce, never. XChaCha20-Poly1305 (draft-irtf-cfrg-xchacha-03) is ChaCha20-Poly1305
//! under a subkey that HChaCha20 derives from the key and the nonce's first 16 bytes, with the
//! nonce's last 8 as its nonce: ring seals, `hchacha.rs` derives.
//!
//! Datagrams of the earlier format (magic `cg\x01s`, a 12-byte nonce under the key itself)
//! still open, and a node answers a peer that speaks only that format in it
//! (`registry/gossip/transport.rs`, `Formats`): a rolling upgrade keeps gossiping both ways.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, Tag, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

use super::keyring::SealKey;
use super::{KeyId, Keyring};

/// The first bytes of a sealed datagram.
pub(crate) const MAGIC: [u8; 4] = *b"cg\x02s";
/// Those of the earlier format, ChaCha20-Poly1305 with a 96-bit nonce: read, and written only
/// to a peer that sends nothing else.
pub(crate) const MAGIC_V1: [u8; 4] = *b"cg\x01s";
const NONCE: usize = 24;
const NONCE_V1: usize = 12;
const HEADER: usize = 4 + 4 + 8 + NONCE;
/// What sealing adds to a datagram.
pub(crate) const OVERHEAD: usize = HEADER + 16;
/// The most nonces remembered; past it the oldest is forgotten (a replay of it inside the
/// window would then open: the bound is what keeps a busy cluster's memory flat).
const MAX_SEEN: usize = 1 << 17;

/// The two ways a datagram is sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// XChaCha20-Poly1305, a 192-bit nonce: what this node seals with.
    XChaCha,
    /// ChaCha20-Poly1305, a 96-bit nonce: a node of an earlier build.
    ChaCha,
}

impl Format {
    /// The format a datagram says it is in, if it is sealed at all.
    pub(crate) fn of(datagram: &[u8]) -> Option<Self> {
        if datagram.starts_with(&MAGIC) {
            Some(Format::XChaCha)
        } else if datagram.starts_with(&MAGIC_V1) {
            Some(Format::ChaCha)
        } else {
            None
        }
    }

    fn magic(self) -> [u8; 4] {
        match self {
            Format::XChaCha => MAGIC,
            Format::ChaCha => MAGIC_V1,
        }
    }

    fn nonce_len(self) -> usize {
        match self {
            Format::XChaCha => NONCE,
            Format::ChaCha => NONCE_V1,
        }
    }

    /// The ChaCha20-Poly1305 key and nonce that seal under `key` with this format's `nonce`.
    fn key_and_nonce<'k>(
        self,
        key: &'k SealKey,
        nonce: &[u8],
    ) -> (std::borrow::Cow<'k, LessSafeKey>, Nonce) {
        match self {
            Format::ChaCha => (
                std::borrow::Cow::Borrowed(&key.chacha),
                Nonce::assume_unique_for_key(nonce.try_into().expect("12 bytes")),
            ),
            Format::XChaCha => {
                let (head, tail) = nonce.split_at(16);
                let subkey = super::hchacha::hchacha20(
                    &key.raw,
                    &<[u8; 16]>::try_from(head).expect("16 bytes"),
                );
                let mut short = [0u8; 12];
                short[4..].copy_from_slice(tail);
                (
                    std::borrow::Cow::Owned(LessSafeKey::new(
                        UnboundKey::new(&CHACHA20_POLY1305, &subkey).expect("a 32-byte key"),
                    )),
                    Nonce::assume_unique_for_key(short),
                )
            }
        }
    }
}

/// Why a datagram was not opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// It does not begin with [`MAGIC`] or [`MAGIC_V1`]: a plaintext sender, or not gossip at
    /// all.
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

/// A datagram opened: its payload, when its sender sealed it (µs since 1970, by the sender's
/// clock), and the format it came in.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Opened {
    pub(crate) plain: Vec<u8>,
    pub(crate) sent: u64,
    pub(crate) format: Format,
}

/// Seals and opens one node's datagrams.
pub(crate) struct Sealer {
    keyring: Keyring,
    cluster: Vec<u8>,
    window: Duration,
    seen: Mutex<Seen>,
    random: SystemRandom,
}

/// Nonces seen inside the window, those of the earlier format zero-padded (a format's nonces
/// cannot meet the other's: their datagrams open under different keys).
#[derive(Default)]
struct Seen {
    nonces: HashSet<[u8; NONCE]>,
    order: VecDeque<([u8; NONCE], u64)>,
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
        self.seal_as(Format::XChaCha, plain, now_micros())
    }

    /// `plain`, sealed as sent at `sent` (µs since 1970).
    #[cfg(test)]
    pub(crate) fn seal_at(&self, plain: &[u8], sent: u64) -> Vec<u8> {
        self.seal_as(Format::XChaCha, plain, sent)
    }

    /// `plain`, sealed in `format` as sent at `sent` (µs since 1970).
    pub(crate) fn seal_as(&self, format: Format, plain: &[u8], sent: u64) -> Vec<u8> {
        let (id, key) = self.keyring.sealing();
        let mut nonce = [0u8; NONCE];
        let nonce = &mut nonce[..format.nonce_len()];
        self.random
            .fill(nonce)
            .expect("the operating system's random source failed");
        let mut out = Vec::with_capacity(OVERHEAD + plain.len());
        out.extend_from_slice(&format.magic());
        out.extend_from_slice(&id.0);
        out.extend_from_slice(&sent.to_be_bytes());
        out.extend_from_slice(nonce);
        let mut aad = out.clone();
        aad.extend_from_slice(&self.cluster);
        let mut body = plain.to_vec();
        let (key, nonce) = format.key_and_nonce(&key, nonce);
        let tag = key
            .seal_in_place_separate_tag(nonce, Aad::from(&aad), &mut body)
            .expect("a gossip datagram is far below ChaCha20-Poly1305's limit");
        out.extend_from_slice(&body);
        out.extend_from_slice(tag.as_ref());
        out
    }

    /// The payload of a sealed datagram, or why there is none.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn open(&self, datagram: &[u8]) -> Result<Vec<u8>, Refused> {
        self.open_timed(datagram).map(|opened| opened.plain)
    }

    /// A sealed datagram opened, or why it does not open.
    pub(crate) fn open_timed(&self, datagram: &[u8]) -> Result<Opened, Refused> {
        let format = Format::of(datagram).ok_or(Refused::NotSealed)?;
        let header_len = HEADER - NONCE + format.nonce_len();
        if datagram.len() < header_len + 16 {
            return Err(Refused::Truncated);
        }
        let (header, rest) = datagram.split_at(header_len);
        let id = KeyId(header[4..8].try_into().expect("4 bytes"));
        let sent = u64::from_be_bytes(header[8..16].try_into().expect("8 bytes"));
        let nonce = &header[16..];
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
        let (key, ring_nonce) = format.key_and_nonce(&key, nonce);
        key.open_in_place_separate_tag(ring_nonce, Aad::from(&aad), tag, &mut plain, 0..)
            .map_err(|_| Refused::Forged)?;
        // Only an authentic datagram gets this far: its time and nonce are the sender's.
        let mut seen = [0u8; NONCE];
        seen[..nonce.len()].copy_from_slice(nonce);
        self.remember(seen, now, window)?;
        Ok(Opened {
            plain,
            sent,
            format,
        })
    }

    fn remember(&self, nonce: [u8; NONCE], now: u64, window: u64) -> Result<(), Refused> {
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
            .map(|opened| opened.plain)
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
    use ring::aead::{CHACHA20_POLY1305, LessSafeKey, UnboundKey};

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

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    /// draft-irtf-cfrg-xchacha-03, appendix A.3.1: HChaCha20 (`hchacha.rs`) and
    /// ring's ChaCha20-Poly1305 put together as the draft says give its ciphertext and tag.
    #[test]
    fn xchacha_sealing_gives_the_drafts_known_answer() {
        let raw: [u8; 32] =
            unhex("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f")
                .try_into()
                .unwrap();
        let key = SealKey {
            raw,
            chacha: LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &raw).unwrap()),
        };
        let nonce = unhex("404142434445464748494a4b4c4d4e4f5051525354555657");
        let aad = unhex("50515253c0c1c2c3c4c5c6c7");
        let mut text = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.".to_vec();
        let (sealing, nonce) = Format::XChaCha.key_and_nonce(&key, &nonce);
        let tag = sealing
            .seal_in_place_separate_tag(nonce, Aad::from(&aad), &mut text)
            .unwrap();
        assert_eq!(
            text,
            unhex(concat!(
                "bd6d179d3e83d43b9576579493c0e939572a1700252bfaccbed2902c21396cbb",
                "731c7f1b0b4aa6440bf3a82f4eda7e39ae64c6708c54c216cb96b72e1213b452",
                "2f8c9ba40db5d945b11b69b982c1bb9e3f3fac2bc369488f76b2383565d3fff9",
                "21f9664c97637da9768812f615c68b13b52e"
            ))
        );
        assert_eq!(tag.as_ref(), unhex("c0875924c1c7987947deafd8780acf49"));
    }

    #[test]
    fn both_formats_open_each_once_and_say_which_they_were() {
        let key = GossipKey::generate();
        let (a, b) = (sealer(&key, "prod"), sealer(&key, "prod"));
        let now = now_micros();
        let new = a.seal(b"hello");
        let old = a.seal_as(Format::ChaCha, b"hello", now);
        assert_eq!(new.len(), old.len() + NONCE - NONCE_V1);
        assert!(new.starts_with(b"cg\x02s") && old.starts_with(b"cg\x01s"));
        for (sealed, format) in [(&new, Format::XChaCha), (&old, Format::ChaCha)] {
            let opened = b.open_timed(sealed).unwrap();
            assert_eq!(
                (opened.plain.as_slice(), opened.format),
                (&b"hello"[..], format)
            );
            assert_eq!(b.open(sealed), Err(Refused::Replayed));
        }
        // A datagram of one format relabelled as the other does not open.
        let mut relabelled = a.seal_as(Format::ChaCha, b"hello", now);
        relabelled[..4].copy_from_slice(&MAGIC);
        assert!(b.open(&relabelled).is_err());
        let mut relabelled = a.seal(b"hello");
        relabelled[..4].copy_from_slice(&MAGIC_V1);
        assert_eq!(b.open(&relabelled), Err(Refused::Forged));
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
