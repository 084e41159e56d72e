//! Who wrote a node's gossip state: each node signs its own, every receiver checks (issue 35).
//!
//! The gossip key proves membership, not authorship: any holder of it could publish state
//! under another node's name (tombstones for its entries at higher versions, `status =
//! leaving`, another `rpc` address, a heartbeat pinned at 2^64). So, on a sealed registry whose
//! node has an identity:
//!
//! 1. **The certificate is published.** Each node puts its certificate chain (DER, base64, `,`
//!    between certificates) in its own state under [`CERT`], among its first keys
//!    (`GossipRegistry::spawn`), so its version is below every value it signs.
//! 2. **Every key-value is signed by its owner**, once per version: chitchat signs what changed
//!    before it builds a delta (`vendor/chitchat/src/auth.rs`), with the node's certificate
//!    key (ECDSA P-256, ring). What is signed ([`message`]): a domain tag, the cluster, the
//!    owner's node id, generation and gossip address, the key, the value, its version and
//!    whether it is set or deleted. So a tombstone is signed like a value, and a signature
//!    cannot be moved to another node, another generation, another key or another version.
//! 3. **Relaying keeps the signature.** A node stores each signature beside the value it came
//!    with, and sends the two on together: epidemic spread needs no word from the owner.
//! 4. **Every receiver verifies** ([`Authorship::verify`]) before chitchat applies a value: the
//!    owner's [`CERT`] value must chain to the cluster's CA (now: expiry counts) and name
//!    `spiffe://<cluster>/node/<owner's node id>`, and the signature must be that
//!    certificate's key's. The [`CERT`] value itself is verified with the key it carries. A
//!    value is verified once: chitchat applies only versions above the one held, so the same
//!    value relayed by every peer is checked the first time only (that is the cache by node,
//!    key and version). Verified certificates are cached by node and content ([`MAX_CERTS`]),
//!    with their expiry.
//! 5. **What is refused is dropped and counted** (`GossipRegistry::forged_updates`, a WARN at
//!    most every 10 s): a value unsigned, signed by another node, or with a certificate that
//!    does not chain or names another node. The rest of that node's delta goes with it (a gap
//!    chitchat would never ask for again), and its max version moves only as far as what was
//!    applied: a forged max version would stop a receiver from asking for the node's true
//!    values, and a forged GC version used to wipe them.
//! 6. **Each node lists its values** (`chitchat.live`, `vendor/chitchat/src/auth.rs`, "the
//!    owner's list"): a max version is a peer's word that no signature covers, so a member
//!    could send a joiner only a node's newest values and hide the older ones. A receiver
//!    holding the list goes back below the first listed version it lacks and asks again.
//! 7. **Heartbeats are bounded by time, not signed.** A heartbeat changes on every message a
//!    node handles, and rides in every digest: signing each would cost a signature per round
//!    per node and 70 bytes per node in every digest (about four times a quiet cluster's
//!    bytes). Instead a node's heartbeat counts [`TICK_MS`] since its generation (its start,
//!    nanoseconds since 1970), at most [`LEAD_MS`] ahead of its clock
//!    ([`Authorship::own_heartbeat`]), and a receiver refuses a heartbeat above the time since
//!    that generation on its own clock plus [`LEAD_MS`] and `GossipConfig::clock_skew` (500 ms)
//!    ([`Authorship::heartbeat_ceiling`]). Pinning a node at 2^64 is refused; the most a liar
//!    can do is put a node's heartbeat up to 600 ms ahead, which holds its own heartbeats back
//!    that long (below `dead_after`, 2 s), and each such lie is itself a heartbeat: a liar can
//!    make a node look alive (while it answers no call, which callers pass over), not dead.
//!    Clocks must agree within `clock_skew`; a node whose clock is further ahead has its
//!    heartbeats refused (counted, with a WARN that says so).
//!
//! On an `insecure()` registry nothing is signed and nothing is checked. A node of an earlier
//! build in a signing cluster cannot read a signed value (an unknown op: it drops the whole
//! delta), and its own values are unsigned, which signing nodes refuse: the two builds do not
//! see each other's entries (`docs/security.md`, "Signed gossip").

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chitchat::{Authenticator, ChitchatId, Heartbeat, NodeState, Signature, SignedKeyValue};
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _, UnparsedPublicKey};
use rustls::pki_types::CertificateDer;

use crate::security::Identity;
use crate::security::{der, names, tls};

/// The key under which a node publishes its certificate chain.
pub(crate) const CERT: &str = "cert";
/// What one step of a signing node's heartbeat stands for (ms). Hundredths of a second keep a
/// heartbeat's varint in a digest about as long as upstream's count of messages (3 bytes after
/// an hour); milliseconds took a byte more per node, and at 100 nodes a third part.
pub(crate) const TICK_MS: u64 = 10;
/// How far a node's own heartbeat may run ahead of its clock (ms): it goes up on every message,
/// and a burst of messages within a millisecond may take it a little ahead.
pub(crate) const LEAD_MS: u64 = 100;
/// How far ahead of a receiver's clock a node's may be (ms) before its heartbeats are refused,
/// by default (`GossipConfig::clock_skew`).
#[cfg(test)]
pub(crate) const MAX_SKEW_MS: u64 = 500;
/// Verified certificates held at most; past it the cache starts again empty.
pub(crate) const MAX_CERTS: usize = 4096;
/// The longest certificate value judged (base64 DER, `,` between certificates): a node's
/// certificate and an intermediate or two take 600 to 2,000 bytes. Checking a chain costs
/// more the more certificates it offers to build paths from: a member's value of a dozen
/// made-up intermediates cost 0.1 to 0.2 s to refuse.
const MAX_CERT_LEN: usize = 8 * 1024;
/// The most certificates in a value: the node's and two intermediates.
const MAX_CHAIN: usize = 3;
/// How long a certificate refused stays refused before it is judged again: a refusal may
/// depend on time (a certificate not valid yet, this node's clock behind).
const REFUSED_FOR: std::time::Duration = std::time::Duration::from_secs(60);
/// A generation below this (2001 in nanoseconds since 1970) is no start time (tests use small
/// numbers): such a node's heartbeats are not bounded, and its own count as upstream's do.
const PLAUSIBLE_GENERATION: u64 = 1_000_000_000_000_000_000;
const DOMAIN: &[u8] = b"cluster gossip kv 1\0";

/// Signs this node's gossip state and judges every other node's (chitchat's [`Authenticator`]).
pub(crate) struct Authorship {
    cluster: String,
    ca: Vec<CertificateDer<'static>>,
    key: EcdsaKeyPair,
    rng: SystemRandom,
    certs: Mutex<HashMap<CertSlot, Verified>>,
    /// `GossipConfig::clock_skew`, in ms.
    skew_ms: u64,
    /// This node's clock for heartbeats and expiry: the wall clock when made, run on by the
    /// monotonic clock, so that a step of the wall clock (NTP) neither stops this node's
    /// heartbeats nor makes it refuse everyone's.
    clock: Clock,
    /// When a refused certificate was last logged.
    warned: Mutex<Option<std::time::Instant>>,
}

/// The wall clock read once, run on by the monotonic clock.
#[derive(Debug, Clone, Copy)]
struct Clock {
    wall_nanos: u64,
    started: std::time::Instant,
}

impl Clock {
    fn now() -> Self {
        Self {
            wall_nanos: wall_nanos(),
            started: std::time::Instant::now(),
        }
    }

    /// Nanoseconds since 1970.
    fn nanos(&self) -> u64 {
        let run = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.wall_nanos.saturating_add(run)
    }

    fn secs(&self) -> i64 {
        i64::try_from(self.nanos() / 1_000_000_000).unwrap_or(i64::MAX)
    }

    /// Milliseconds since `generation` (a start time in nanoseconds), if it is one.
    fn since(&self, generation: u64) -> Option<u64> {
        (generation >= PLAUSIBLE_GENERATION)
            .then(|| self.nanos().saturating_sub(generation) / 1_000_000)
    }

    /// [`Self::since`] in heartbeat steps.
    fn ticks_since(&self, generation: u64) -> Option<u64> {
        self.since(generation).map(|ms| ms / TICK_MS)
    }
}

/// A certificate value as cached: its owner's node id and the SHA-256 of the value.
type CertSlot = (Arc<str>, [u8; 32]);

/// A certificate value judged: the public key it carries and when it (or a certificate of its
/// chain) expires, or refused until a time.
#[derive(Clone)]
enum Verified {
    Key { public: Arc<[u8]>, not_after: i64 },
    Refused { until: std::time::Instant },
}

impl std::fmt::Debug for Authorship {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorship")
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl Authorship {
    /// The authorship of `identity`'s node, and the value of its [`CERT`] key. Refused if its
    /// key is not an ECDSA P-256 key in PKCS#8 (what `cluster init` and `Authority` make).
    pub(crate) fn new(
        identity: &Identity,
        clock_skew: std::time::Duration,
    ) -> Result<(Self, String), String> {
        let id = &identity.inner;
        let rng = SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            id.key.secret_der(),
            &rng,
        )
        .map_err(|e| {
            format!(
                "signed gossip needs the node's key as ECDSA P-256 in PKCS#8, as `cluster issue` writes it: {e}"
            )
        })?;
        let cert = id
            .chain
            .iter()
            .map(|c| STANDARD.encode(c.as_ref()))
            .collect::<Vec<_>>()
            .join(",");
        let authorship = Self {
            cluster: id.cluster.clone(),
            ca: id.ca.clone(),
            key,
            rng,
            certs: Mutex::default(),
            skew_ms: u64::try_from(clock_skew.as_millis()).unwrap_or(u64::MAX),
            clock: Clock::now(),
            warned: Mutex::default(),
        };
        // The key must be the certificate's: a node signing with another would be refused by
        // every peer, silently.
        let public = authorship.key.public_key().as_ref().to_vec();
        match authorship.judge(&id.node, &cert) {
            Verified::Key {
                public: certified, ..
            } if *certified == *public => {}
            _ => return Err("the node's key is not its certificate's".to_owned()),
        }
        Ok((authorship, cert))
    }

    /// The public key of `owner`'s certificate value, if it chains to the CA and names `owner`
    /// of this cluster; cached by owner and content.
    fn certified(&self, owner: &str, cert: &str) -> Option<Arc<[u8]>> {
        let digest = ring::digest::digest(&ring::digest::SHA256, cert.as_bytes());
        let mut hash = [0u8; 32];
        hash.copy_from_slice(digest.as_ref());
        let slot = (Arc::<str>::from(owner), hash);
        let cached = self
            .certs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&slot)
            .cloned();
        let verified = match cached {
            Some(Verified::Refused { until }) if until <= std::time::Instant::now() => None,
            cached => cached,
        };
        let verified = match verified {
            Some(verified) => verified,
            None => {
                let verified = self.judge(owner, cert);
                let mut certs = self.certs.lock().unwrap_or_else(|p| p.into_inner());
                if certs.len() >= MAX_CERTS {
                    certs.clear();
                }
                certs.insert(slot, verified.clone());
                verified
            }
        };
        match verified {
            Verified::Key { public, not_after } if not_after > self.clock.secs() => Some(public),
            _ => None,
        }
    }

    /// Reads and checks a certificate value (uncached). The cheap checks first: its length,
    /// how many certificates, and the name in the node's own; the chain last.
    fn judge(&self, owner: &str, cert: &str) -> Verified {
        match self.read(owner, cert) {
            Ok((public, not_after)) => Verified::Key { public, not_after },
            Err(why) => {
                self.warn_refused(owner, &why);
                Verified::Refused {
                    until: std::time::Instant::now() + REFUSED_FOR,
                }
            }
        }
    }

    /// The public key of a certificate value and the earliest expiry of its chain, or why it
    /// is refused.
    fn read(&self, owner: &str, cert: &str) -> Result<(Arc<[u8]>, i64), String> {
        if cert.len() > MAX_CERT_LEN || cert.split(',').count() > MAX_CHAIN {
            return Err(format!(
                "its certificate value is past {MAX_CERT_LEN} bytes or {MAX_CHAIN} certificates"
            ));
        }
        let chain = cert
            .split(',')
            .map(|c| STANDARD.decode(c).map(CertificateDer::from))
            .collect::<Result<Vec<CertificateDer<'static>>, _>>()
            .map_err(|_| "its certificate value is not base64".to_owned())?;
        let leaf = chain.first().ok_or("its certificate value is empty")?;
        match names::of_certificate(leaf) {
            Ok((cluster, node)) if cluster == self.cluster && node == owner => {}
            Ok((cluster, node)) => {
                return Err(format!(
                    "its certificate names node `{node}` of cluster `{cluster}`"
                ));
            }
            Err(e) => return Err(format!("its certificate names no node: {e}")),
        }
        let mut not_after = i64::MAX;
        let mut public = None;
        for der in &chain {
            let read = der::read(der).ok_or("a certificate of its chain does not parse")?;
            not_after = not_after.min(read.not_after);
            public.get_or_insert_with(|| Arc::<[u8]>::from(read.public_key));
        }
        tls::verify_chain(&self.ca, &chain).map_err(|e| {
            format!(
                "its certificate does not chain to this cluster's CA (another CA's, expired, or not valid yet): {e}"
            )
        })?;
        Ok((public.ok_or("its certificate value is empty")?, not_after))
    }

    /// One WARN at most every 10 s: a certificate refused is a misconfigured node (another
    /// CA's certificate) far more often than a liar, and its refusals say only "not signed".
    fn warn_refused(&self, owner: &str, why: &str) {
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        if warned.is_none_or(|at| at.elapsed() >= std::time::Duration::from_secs(10)) {
            *warned = Some(std::time::Instant::now());
            tracing::warn!(
                "gossip from node `{owner}` is not taken: {why}; its values are counted in forged_updates (at most one such line every 10 s)"
            );
        }
    }
}

/// The bytes a signature covers.
pub(crate) fn message(cluster: &str, owner: &ChitchatId, kv: SignedKeyValue<'_>) -> Vec<u8> {
    let addr = owner.gossip_advertise_addr.to_string();
    let mut m = Vec::with_capacity(
        DOMAIN.len()
            + cluster.len()
            + owner.node_id.len()
            + addr.len()
            + kv.key.len()
            + kv.value.len()
            + 48,
    );
    m.extend_from_slice(DOMAIN);
    for part in [
        cluster.as_bytes(),
        owner.node_id.as_bytes(),
        addr.as_bytes(),
    ] {
        m.extend_from_slice(&(part.len() as u32).to_be_bytes());
        m.extend_from_slice(part);
    }
    m.extend_from_slice(&owner.generation_id.to_be_bytes());
    m.extend_from_slice(&(kv.key.len() as u32).to_be_bytes());
    m.extend_from_slice(kv.key.as_bytes());
    m.extend_from_slice(&kv.version.to_be_bytes());
    m.push(kv.status);
    m.extend_from_slice(&(kv.value.len() as u32).to_be_bytes());
    m.extend_from_slice(kv.value.as_bytes());
    m
}

/// The wall clock, in nanoseconds since 1970.
fn wall_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Authenticator for Authorship {
    fn sign(&self, own: &ChitchatId, kv: SignedKeyValue<'_>) -> Option<Signature> {
        let signed = self
            .key
            .sign(&self.rng, &message(&self.cluster, own, kv))
            .ok()?;
        Some(Arc::from(signed.as_ref()))
    }

    fn verify(
        &self,
        owner: &ChitchatId,
        kv: SignedKeyValue<'_>,
        signature: Option<&[u8]>,
        held: &NodeState,
    ) -> bool {
        let Some(signature) = signature else {
            return false;
        };
        let cert = if kv.key == CERT {
            // Its own key vouches for it, once the CA has vouched for the key. A certificate is
            // never deleted.
            if kv.status != 0 {
                return false;
            }
            kv.value
        } else {
            match held.get(CERT) {
                Some(cert) => cert,
                None => return false,
            }
        };
        let Some(public) = self.certified(&owner.node_id, cert) else {
            return false;
        };
        UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_ASN1, &*public)
            .verify(&message(&self.cluster, owner, kv), signature)
            .is_ok()
    }

    fn heartbeat_ceiling(&self, node: &ChitchatId) -> Option<Heartbeat> {
        // A node whose generation is ahead of this clock by more than the skew allowed has a
        // ceiling of 0 until this clock catches up.
        let ahead = node.generation_id.saturating_sub(self.clock.nanos()) / 1_000_000 / TICK_MS;
        let ticks = self.clock.ticks_since(node.generation_id)?;
        Some(Heartbeat(
            (ticks + (LEAD_MS + self.skew_ms) / TICK_MS).saturating_sub(ahead),
        ))
    }

    fn own_heartbeat(&self, own: &ChitchatId, current: Heartbeat) -> Heartbeat {
        let Some(ticks) = self.clock.ticks_since(own.generation_id) else {
            return Heartbeat(current.0.saturating_add(1));
        };
        if ticks > current.0 {
            Heartbeat(ticks)
        } else if current.0 < ticks + LEAD_MS / TICK_MS {
            Heartbeat(current.0 + 1)
        } else {
            current
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Instant;

    use super::*;

    const SKEW: std::time::Duration = std::time::Duration::from_millis(MAX_SKEW_MS);

    fn id(name: &str) -> ChitchatId {
        ChitchatId::new(
            name.to_owned(),
            wall_nanos(),
            SocketAddr::from(([127, 0, 0, 1], 7280)),
        )
    }

    fn held_cert(cert: &str) -> NodeState {
        let mut state = NodeState::for_test();
        state.set(CERT, cert);
        state
    }

    fn kv<'a>(key: &'a str, value: &'a str, version: u64) -> SignedKeyValue<'a> {
        SignedKeyValue {
            key,
            value,
            version,
            status: 0,
        }
    }

    #[test]
    fn a_certificate_value_past_its_bounds_is_refused_before_any_chain_is_built() {
        let ca = crate::Authority::new("test").expect("a CA");
        let (_, a_cert) = Authorship::new(&ca.issue("a").expect("a"), SKEW).expect("signs");
        let (b, _) = Authorship::new(&ca.issue("b").expect("b"), SKEW).expect("signs");
        assert!(b.certified("a", &a_cert).is_some());
        let four = [a_cert.as_str(); 4].join(",");
        assert!(b.certified("a", &four).is_none(), "four certificates");
        let long = format!("{a_cert},{}", "A".repeat(MAX_CERT_LEN));
        assert!(
            b.certified("a", &long).is_none(),
            "past {MAX_CERT_LEN} bytes"
        );
        assert!(b.certified("b", &a_cert).is_none(), "names another node");
        assert!(b.certified("a", "not base64!").is_none());
        // What the WARN says.
        let why = |owner, cert| b.read(owner, cert).expect_err("refused");
        assert!(why("b", &a_cert).contains("names node `a` of cluster `test`"));
        let other = crate::Authority::new("test").expect("another CA");
        let (_, stranger) = Authorship::new(&other.issue("a").expect("a"), SKEW).expect("signs");
        assert!(why("a", &stranger).contains("does not chain to this cluster's CA"));
        assert!(why("a", &four).contains("certificates"));
    }

    #[test]
    fn a_value_signed_by_its_node_verifies_and_nothing_else_does() {
        let ca = crate::Authority::new("test").expect("a CA");
        let (a, a_cert) = Authorship::new(&ca.issue("a").expect("a"), SKEW).expect("signs");
        let (b, b_cert) = Authorship::new(&ca.issue("b").expect("b"), SKEW).expect("signs");
        let (a_id, b_id) = (id("a"), id("b"));
        let value = kv("status", "up", 7);
        let signed = a.sign(&a_id, value).expect("signed");
        assert!(b.verify(&a_id, value, Some(&signed), &held_cert(&a_cert)));
        assert!(
            b.verify(
                &a_id,
                kv(CERT, &a_cert, 1),
                a.sign(&a_id, kv(CERT, &a_cert, 1)).as_deref(),
                &NodeState::for_test()
            ),
            "a certificate vouches for itself"
        );
        // Changed value, version, key, owner: refused.
        assert!(!b.verify(
            &a_id,
            kv("status", "leaving", 7),
            Some(&signed),
            &held_cert(&a_cert)
        ));
        assert!(!b.verify(
            &a_id,
            kv("status", "up", 8),
            Some(&signed),
            &held_cert(&a_cert)
        ));
        assert!(!b.verify(
            &a_id,
            kv("rpc", "up", 7),
            Some(&signed),
            &held_cert(&a_cert)
        ));
        assert!(!b.verify(&a_id, value, None, &held_cert(&a_cert)));
        // b signs a's value with its own key: b's certificate does not name a.
        let forged = b.sign(&a_id, value).expect("signed");
        assert!(!a.verify(&a_id, value, Some(&forged), &held_cert(&a_cert)));
        assert!(!a.verify(&a_id, value, Some(&forged), &held_cert(&b_cert)));
        // A certificate of another CA naming `a`.
        let other = crate::Authority::new("test").expect("another CA");
        let (c, c_cert) = Authorship::new(&other.issue("a").expect("a"), SKEW).expect("signs");
        let forged = c.sign(&a_id, value).expect("signed");
        assert!(!b.verify(&a_id, value, Some(&forged), &held_cert(&c_cert)));
        // A certificate is never deleted.
        let mut gone = kv(CERT, "", 9);
        gone.status = 1;
        assert!(!b.verify(
            &a_id,
            gone,
            a.sign(&a_id, gone).as_deref(),
            &held_cert(&a_cert)
        ));
        let _ = b_id;
    }

    #[test]
    fn heartbeats_follow_the_clock_and_are_bounded_by_it() {
        let ca = crate::Authority::new("test").expect("a CA");
        let (a, _) = Authorship::new(&ca.issue("a").expect("a"), SKEW).expect("signs");
        let own = ChitchatId::new(
            "a".to_owned(),
            wall_nanos() - 5_000_000_000,
            SocketAddr::from(([127, 0, 0, 1], 7280)),
        );
        let beat = a.own_heartbeat(&own, Heartbeat(1));
        assert!((500..510).contains(&beat.0), "{beat:?}");
        // A burst runs ahead of the clock by LEAD_MS at most.
        let mut h = beat;
        for _ in 0..1_000 {
            h = a.own_heartbeat(&own, h);
        }
        let ceiling = a.heartbeat_ceiling(&own).expect("bounded");
        assert!(
            h.0 <= beat.0 + (LEAD_MS + 20) / TICK_MS && h < ceiling,
            "{h:?} {ceiling:?}"
        );
        assert!(ceiling.0 < (5_000 + LEAD_MS + MAX_SKEW_MS + 100) / TICK_MS);
        // `clock_skew` moves the ceiling: with none, only the lead is allowed.
        let (strict, _) =
            Authorship::new(&ca.issue("s").expect("s"), std::time::Duration::ZERO).expect("signs");
        let strict = strict.heartbeat_ceiling(&own).expect("bounded");
        assert!(
            strict.0 + MAX_SKEW_MS / TICK_MS <= ceiling.0 + 1,
            "{strict:?} {ceiling:?}"
        );
        assert!(
            h <= strict,
            "a node's own heartbeat is within its lead: {h:?} {strict:?}"
        );
        // A generation that is no start time is not bounded.
        let test_id = ChitchatId::new("t".to_owned(), 1, own.gossip_advertise_addr);
        assert_eq!(a.heartbeat_ceiling(&test_id), None);
        assert_eq!(a.own_heartbeat(&test_id, Heartbeat(3)), Heartbeat(4));
    }

    /// What a signature and a verification cost (`docs/benchmarks.md`, "What signed gossip
    /// costs"): `cargo test -p cluster --release --lib signing_cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn signing_cost() {
        let ca = crate::Authority::new("test").expect("a CA");
        let (a, a_cert) = Authorship::new(&ca.issue("a").expect("a"), SKEW).expect("signs");
        let (b, _) = Authorship::new(&ca.issue("b").expect("b"), SKEW).expect("signs");
        let a_id = id("a");
        let held = held_cert(&a_cert);
        let value = "x".repeat(400);
        const N: u64 = 2_000;
        let start = Instant::now();
        let mut signatures = Vec::new();
        for v in 0..N {
            signatures.push(a.sign(&a_id, kv("svc:search", &value, v)).expect("signed"));
        }
        let sign = start.elapsed() / N as u32;
        let start = Instant::now();
        for (v, s) in signatures.iter().enumerate() {
            assert!(b.verify(&a_id, kv("svc:search", &value, v as u64), Some(s), &held));
        }
        let verify = start.elapsed() / N as u32;
        let start = Instant::now();
        for _ in 0..200 {
            assert!(matches!(b.judge("a", &a_cert), Verified::Key { .. }));
        }
        let judge = start.elapsed() / 200;
        println!(
            "sign {sign:?}, verify {verify:?} (certificate cached), certificate check {judge:?}, signature {} bytes, certificate value {} bytes",
            signatures[0].len(),
            a_cert.len()
        );
    }
}
