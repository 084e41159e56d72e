//! Not upstream's: who wrote a node's state (issue 35). Upstream (and a sealed cluster, whose
//! key every member holds) takes any peer's word for any node's state: one member could delete
//! another's keys with tombstones of higher versions, rewrite its values, or pin its heartbeat
//! at `u64::MAX` so that the node's own heartbeats never count again and it is declared dead.
//!
//! With an [`Authenticator`] given (`Chitchat::with_authenticator`, `spawn_chitchat_with`):
//!
//! 1. Every key-value of this node's own state is signed once per version
//!    (`Chitchat::sign_own_state`, run before any delta is built), and the signature travels
//!    beside it in deltas (`delta.rs`, op `SignedKeyValue`). A relayed key-value keeps its
//!    owner's signature: a node passes on another's values unchanged, with the signature it
//!    received them with (`NodeState::signatures`).
//! 2. A key-value of another node is applied only if [`Authenticator::verify`] accepts it, given
//!    the owner's state held so far (where the owner's certificate is). The first one refused
//!    ends that node's part of the delta: scuttlebutt applies a node's key-values in version
//!    order, and one skipped would be a gap the receiver never asks for again. Refusals are
//!    counted (`Refusal::Unsigned`).
//! 3. A node's max version moves only as far as the key-values applied: a peer's word for it
//!    (a delta's max version, `SetMaxVersion`) would stop this node from asking for the node's
//!    later values. And a delta never resets an authenticated node's state (a forged
//!    `last_gc_version` wiped it): it is applied as any other, from the max version held.
//! 4. **The owner's list.** A node's max version says "I hold all of its values up to here",
//!    and a signature cannot vouch for that: a member could send a node that just joined only
//!    another node's newest signed value, and the joiner would never ask for the older ones.
//!    So a signing node lists the versions of its set values under [`LIVE_KEY`], rewritten
//!    and signed whenever its state changes, at a version above them all
//!    (`NodeState::list_live_versions`, from `Chitchat::sign_own_state`). A receiver that
//!    holds the list at the node's max version checks it (`NodeState::check_owners_list`): a
//!    listed version it lacks takes the max version back to below it (counted,
//!    `Refusal::Withheld`), so that peers send it again, and values below the max version
//!    are taken until it is held; a held value the list leaves out (a deletion missed and
//!    collected) is dropped. A value held at a later version is never replaced by an older
//!    one.
//! 5. A heartbeat past [`Authenticator::heartbeat_ceiling`] is not taken (`Refusal::Heartbeat`),
//!    and this node's own heartbeat follows [`Authenticator::own_heartbeat`]: in `cluster`, the
//!    hundredths of a second since the node's generation (its start time), so that a receiver bounds any
//!    node's heartbeat by its own clock and a forged one can lead the truth by a bound only.

use std::sync::Arc;

use crate::{ChitchatId, Heartbeat, NodeState, VersionedValue};

/// Not upstream's: the key under which a signing node lists the versions of its set values
/// ("the owner's list", above).
pub const LIVE_KEY: &str = "chitchat.live";

/// Not upstream's: the most entries (generations, addresses) one node name holds on an
/// authenticated cluster (`Chitchat::make_room_for`): a node restarted a few times within the
/// time its dead generations are kept has as many.
pub const MAX_GENERATIONS: usize = 4;

/// The most versions refused for a limit remembered per node (`NodeState::over_limits`).
pub(crate) const MAX_OVER_LIMITS: usize = 1_024;

/// The owner's list as written: ascending versions, the first in full and each next as its
/// distance from the one before, in decimal, `,` between them.
pub(crate) fn encode_versions(versions: &[u64]) -> String {
    let mut text = String::new();
    let mut previous = 0;
    for (i, version) in versions.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&(version - previous).to_string());
        previous = *version;
    }
    text
}

/// Reads [`encode_versions`]' text; `None` for anything else (a version 0, one not above the
/// one before, or past `u64::MAX`).
pub(crate) fn decode_versions(text: &str) -> Option<Vec<u64>> {
    if text.is_empty() {
        return Some(Vec::new());
    }
    let mut versions = Vec::new();
    let mut previous: u64 = 0;
    for step in text.split(',') {
        let step: u64 = step.parse().ok()?;
        if step == 0 {
            return None;
        }
        previous = previous.checked_add(step)?;
        versions.push(previous);
    }
    Some(versions)
}

/// A signature over one key-value of one node, as it travels in deltas.
pub type Signature = Arc<[u8]>;

/// What a key-value's signature covers, besides its owner: `cluster`'s implementation builds
/// the signed bytes from these.
#[derive(Debug, Clone, Copy)]
pub struct SignedKeyValue<'a> {
    /// The key.
    pub key: &'a str,
    /// The value (empty for a tombstone).
    pub value: &'a str,
    /// The owner's version of it.
    pub version: u64,
    /// 0: set, 1: deleted, 2: deleted after a TTL (the code on the wire).
    pub status: u8,
}

impl<'a> SignedKeyValue<'a> {
    pub(crate) fn of(key: &'a str, value: &'a VersionedValue) -> Self {
        Self {
            key,
            value: &value.value,
            version: value.version,
            status: crate::types::DeletionStatusMutation::from(value.status).into(),
        }
    }
}

/// Signs this node's state and judges everyone else's. Called under chitchat's lock: keep it
/// quick (cache what can be cached).
pub trait Authenticator: Send + Sync + 'static {
    /// The signature of a key-value of this node's own state (`own`), or `None` if it cannot
    /// be signed (then it goes unsigned, and authenticated peers refuse it).
    fn sign(&self, own: &ChitchatId, kv: SignedKeyValue<'_>) -> Option<Signature>;

    /// Whether `signature` is `owner`'s over `kv`. `held` is the owner's state as held here,
    /// with the key-values of this delta applied so far (a certificate comes before the values
    /// it signs: its version is lower).
    fn verify(
        &self,
        owner: &ChitchatId,
        kv: SignedKeyValue<'_>,
        signature: Option<&[u8]>,
        held: &NodeState,
    ) -> bool;

    /// The highest heartbeat `node` can have reached by now, if there is a bound.
    fn heartbeat_ceiling(&self, node: &ChitchatId) -> Option<Heartbeat>;

    /// This node's heartbeat after `current`, as it goes up on every message it processes.
    fn own_heartbeat(&self, own: &ChitchatId, current: Heartbeat) -> Heartbeat;
}

/// Test hooks: what a member holding the cluster's key and its own certificate can do with a
/// build of its own. Not for production.
#[doc(hidden)]
pub mod forge {
    use super::*;

    /// Rewrites this node's copy of `victim`'s state as `edit` says, and signs what changed with
    /// this node's own key (the best forgery a member can make), so that its gossip spreads it.
    /// Returns false if the victim is not known here.
    pub fn rewrite(
        chitchat: &mut crate::Chitchat,
        victim: &ChitchatId,
        heartbeat: Option<Heartbeat>,
        edit: impl FnOnce(&mut NodeState),
    ) -> bool {
        let auth = chitchat.cluster_state.auth.clone();
        let own = chitchat.self_chitchat_id().clone();
        let Some(state) = chitchat.cluster_state.node_state_mut(victim) else {
            return false;
        };
        let before = state.max_version();
        edit(state);
        if let Some(heartbeat) = heartbeat {
            state.set_own_heartbeat(heartbeat);
        }
        let changed: Vec<(String, VersionedValue)> = state
            .key_values_including_deleted()
            .filter(|(_, v)| v.version > before)
            .map(|(k, v)| (k.to_owned(), v.clone()))
            .collect();
        for (key, value) in changed {
            let signature = auth
                .as_ref()
                .and_then(|a| a.sign(&own, SignedKeyValue::of(&key, &value)));
            state.set_signature(&key, value.version, signature);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use tokio::sync::watch;

    use super::*;
    use crate::message::{ChitchatEnvelope, ProtocolVersion};
    use crate::{Chitchat, ChitchatConfig, ChitchatMessage, VersionedValue};

    /// A stand-in for `cluster`'s: a node's "signature" is its name and what it signs, so a
    /// node can sign only as itself; heartbeats past 1,000 are lies.
    struct Names;

    fn mark(signer: &str, owner: &ChitchatId, kv: SignedKeyValue<'_>) -> Signature {
        let text = format!(
            "{signer}|{}|{}|{}|{}|{}",
            owner.node_id, kv.key, kv.value, kv.version, kv.status
        );
        Arc::from(text.as_bytes())
    }

    impl Authenticator for Names {
        fn sign(&self, own: &ChitchatId, kv: SignedKeyValue<'_>) -> Option<Signature> {
            Some(mark(&own.node_id, own, kv))
        }

        fn verify(
            &self,
            owner: &ChitchatId,
            kv: SignedKeyValue<'_>,
            signature: Option<&[u8]>,
            _held: &NodeState,
        ) -> bool {
            signature == Some(&*mark(&owner.node_id, owner, kv))
        }

        fn heartbeat_ceiling(&self, _node: &ChitchatId) -> Option<Heartbeat> {
            Some(Heartbeat(1_000))
        }

        fn own_heartbeat(&self, _own: &ChitchatId, current: Heartbeat) -> Heartbeat {
            Heartbeat(current.0 + 1)
        }
    }

    fn node(port: u16, keys: &[(&str, &str)]) -> Chitchat {
        let mut config = ChitchatConfig::for_test(port);
        config.protocol_version = ProtocolVersion::V2;
        let keys = keys
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Chitchat::with_chitchat_id_and_seeds(config, watch::channel(HashSet::new()).1, keys)
            .with_authenticator(Arc::new(Names))
    }

    /// Through the bytes on the wire, as a datagram would carry it.
    fn wire(message: ChitchatMessage) -> ChitchatMessage {
        let envelope = ChitchatEnvelope {
            version: ProtocolVersion::V2,
            message,
        };
        let bytes = envelope.serialize_to_vec();
        ChitchatEnvelope::deserialize(&mut &bytes[..])
            .expect("reads back")
            .message
    }

    /// A full exchange, `from` starting it, every message through the wire.
    fn exchange(from: &mut Chitchat, to: &mut Chitchat) {
        let from_addr = Some(from.self_chitchat_id().gossip_advertise_addr);
        let to_addr = Some(to.self_chitchat_id().gossip_advertise_addr);
        for syn in from.create_syn_messages(ProtocolVersion::V2) {
            let Some(syn_ack) = to.process_message_from(from_addr, ProtocolVersion::V2, wire(syn))
            else {
                continue;
            };
            if let Some(ack) = from.process_message_from(to_addr, ProtocolVersion::V2, wire(syn_ack))
            {
                to.process_message_from(from_addr, ProtocolVersion::V2, wire(ack));
            }
        }
    }

    fn value(cc: &Chitchat, of: &ChitchatId, key: &str) -> Option<String> {
        cc.node_state(of)?.get(key).map(str::to_owned)
    }

    #[test]
    fn signed_values_spread_and_are_relayed_with_their_signature() {
        let mut a = node(20_001, &[("rpc", "a:1"), ("svc:x", "1")]);
        let mut b = node(20_002, &[]);
        let mut c = node(20_003, &[]);
        let a_id = a.self_chitchat_id().clone();
        exchange(&mut a, &mut b);
        exchange(&mut a, &mut b);
        assert_eq!(value(&b, &a_id, "svc:x").as_deref(), Some("1"));
        // c hears of a only through b: b passes a's values on, signed by a.
        exchange(&mut b, &mut c);
        exchange(&mut b, &mut c);
        assert_eq!(value(&c, &a_id, "svc:x").as_deref(), Some("1"));
        assert_eq!(value(&c, &a_id, "rpc").as_deref(), Some("a:1"));
        assert_eq!(c.refusals().forged(), 0);
        // A change is signed once, when it is first sent.
        a.self_node_state().set("svc:x", "2");
        exchange(&mut a, &mut b);
        exchange(&mut b, &mut c);
        assert_eq!(value(&c, &a_id, "svc:x").as_deref(), Some("2"));
        assert_eq!(
            a.self_node_state().signature("svc:x").map(|s| s.to_vec()),
            b.node_state(&a_id)
                .and_then(|s| s.signature("svc:x"))
                .map(|s| s.to_vec())
        );
    }

    #[test]
    fn a_member_cannot_rewrite_another_members_state() {
        let mut victim = node(20_011, &[("rpc", "v:1"), ("status", "up"), ("svc:x", "1")]);
        let mut liar = node(20_012, &[]);
        let mut other = node(20_013, &[]);
        let victim_id = victim.self_chitchat_id().clone();
        for _ in 0..2 {
            exchange(&mut victim, &mut liar);
            exchange(&mut victim, &mut other);
        }
        let held = other.node_state(&victim_id).expect("held").clone();
        // The liar's own build: the victim's entry deleted, its status and address changed,
        // versions far ahead, each signed by the liar.
        assert!(forge::rewrite(&mut liar, &victim_id, None, |state| {
            state.delete("svc:x");
            state.set("status", "leaving");
            state.set("rpc", "liar:1");
        }));
        exchange(&mut liar, &mut other);
        exchange(&mut other, &mut liar);
        let now = other.node_state(&victim_id).expect("held");
        assert_eq!(now.get("svc:x"), Some("1"));
        assert_eq!(now.get("status"), Some("up"));
        assert_eq!(now.get("rpc"), Some("v:1"));
        assert_eq!(now.max_version(), held.max_version(), "nothing skipped ahead");
        assert!(other.refusals().unsigned() > 0);
        // The victim's true changes still arrive.
        victim.self_node_state().set("svc:y", "1");
        exchange(&mut victim, &mut other);
        assert_eq!(value(&other, &victim_id, "svc:y").as_deref(), Some("1"));
    }

    #[test]
    fn unsigned_values_and_a_peers_word_for_versions_are_not_taken() {
        let mut victim = node(20_021, &[("svc:x", "1")]);
        let mut other = node(20_022, &[]);
        let victim_id = victim.self_chitchat_id().clone();
        exchange(&mut victim, &mut other);
        exchange(&mut victim, &mut other);
        let max = other.node_state(&victim_id).expect("held").max_version();
        // An ACK with a tombstone without a signature, and one with only a max version and a
        // GC version far ahead (upstream reset the node's state on that).
        let mut delta = crate::delta::Delta::default();
        delta.add_node(victim_id.clone(), 0, max);
        delta.add_kv(&victim_id, "svc:x", "", max + 100, true);
        other.process_message(ChitchatMessage::Ack { delta });
        let mut delta = crate::delta::Delta::default();
        delta.add_node(victim_id.clone(), 1_000_000, 0);
        delta.set_max_version(&victim_id, 1_000_000);
        other.process_message(ChitchatMessage::Ack { delta });
        let now = other.node_state(&victim_id).expect("held");
        assert_eq!(now.get("svc:x"), Some("1"), "neither deleted nor reset");
        assert_eq!(now.max_version(), max);
        assert_eq!(other.refusals().unsigned(), 1);
    }

    /// [`Names`], taking 5 ms a verification: what a message may cost shows.
    /// Verifies in 5 ms (spinning), and counts its verifications.
    struct Slow(Arc<std::sync::atomic::AtomicUsize>);

    impl Authenticator for Slow {
        fn sign(&self, own: &ChitchatId, kv: SignedKeyValue<'_>) -> Option<Signature> {
            Names.sign(own, kv)
        }

        fn verify(
            &self,
            owner: &ChitchatId,
            kv: SignedKeyValue<'_>,
            signature: Option<&[u8]>,
            held: &NodeState,
        ) -> bool {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let start = std::time::Instant::now();
            while start.elapsed() < std::time::Duration::from_millis(5) {
                std::hint::spin_loop();
            }
            Names.verify(owner, kv, signature, held)
        }

        fn heartbeat_ceiling(&self, node: &ChitchatId) -> Option<Heartbeat> {
            Names.heartbeat_ceiling(node)
        }

        fn own_heartbeat(&self, own: &ChitchatId, current: Heartbeat) -> Heartbeat {
            Names.own_heartbeat(own, current)
        }
    }

    /// A node whose every verification takes 5 ms, and the count of its verifications.
    fn slow_node(port: u16) -> (Chitchat, Arc<std::sync::atomic::AtomicUsize>) {
        let mut config = ChitchatConfig::for_test(port);
        config.protocol_version = ProtocolVersion::V2;
        let verified = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let node =
            Chitchat::with_chitchat_id_and_seeds(config, watch::channel(HashSet::new()).1, Vec::new())
                .with_authenticator(Arc::new(Slow(verified.clone())));
        (node, verified)
    }

    /// Verifications one message may cost at 5 ms each: its budget's worth, and the one that
    /// was under way when the budget ran out. Counted, not timed: on a loaded machine a 5 ms
    /// check takes longer by the wall clock, and then fewer fit.
    const AT_MOST: usize = (crate::verifying::PER_MESSAGE.as_millis() / 5) as usize + 1;

    fn verifications(verified: &std::sync::atomic::AtomicUsize) -> usize {
        verified.swap(0, std::sync::atomic::Ordering::Relaxed)
    }

    #[test]
    fn a_message_costs_its_budget_of_verifying_at_most_and_the_rest_comes_later() {
        let (mut other, verified) = slow_node(20_041);
        let mut relay = node(20_042, &[]);
        let mut victims = Vec::new();
        for port in 0..12 {
            let mut victim = node(20_100 + port, &[("svc:x", "1")]);
            exchange(&mut victim, &mut relay);
            exchange(&mut victim, &mut relay);
            victims.push(victim);
        }
        // One message from the relay carries twelve nodes' values: more than 20 ms of checks.
        verifications(&verified);
        exchange(&mut relay, &mut other);
        assert!(other.refusals().deferred() > 0, "some left for later");
        let done = verifications(&verified);
        assert!((1..=AT_MOST).contains(&done), "{done} checks for one message");
        // Forgeries: each costs a verification, within the budget.
        let mut delta = crate::delta::Delta::default();
        for victim in &victims {
            let id = victim.self_chitchat_id();
            let max = other.node_state(id).expect("held").max_version();
            delta.add_node(id.clone(), 0, max);
            delta.add_kv(id, "svc:x", "", max + 1, true);
        }
        other.process_message(ChitchatMessage::Ack { delta });
        let refused = other.refusals().unsigned();
        assert!((1..=AT_MOST as u64).contains(&refused), "{refused} verified at 5 ms each");
        let done = verifications(&verified);
        assert!(done <= AT_MOST, "{done} checks for one message");
        // What was left for later comes, as the senders' budgets refill.
        let start = std::time::Instant::now();
        while !victims
            .iter()
            .all(|v| value(&other, v.self_chitchat_id(), "svc:x").is_some())
        {
            assert!(start.elapsed() < std::time::Duration::from_secs(20), "all arrive");
            exchange(&mut relay, &mut other);
        }
    }

    /// The victim's values as `holder` holds them, with their signatures, from `from` up: what
    /// a member can send of them.
    fn genuine(holder: &Chitchat, victim: &ChitchatId, keys: &[&str]) -> crate::delta::Delta {
        signed_values(holder.node_state(victim).expect("held"), keys)
    }

    fn signed_values(state: &NodeState, keys: &[&str]) -> crate::delta::Delta {
        let mut values: Vec<(&str, &VersionedValue)> = state
            .key_values_including_deleted()
            .filter(|(key, _)| keys.contains(key))
            .collect();
        values.sort_by_key(|(_, value)| value.version);
        let mut delta = crate::delta::DeltaSerializer::with_mtu(60_000);
        assert!(delta.try_add_node(state.chitchat_id().clone(), 0, 0));
        for (key, value) in values {
            let signature = state.signature(key).expect("signed");
            assert!(delta.try_add_signed_kv(key, value.clone(), Some(signature)));
        }
        delta.finish()
    }

    #[test]
    fn a_joiner_sent_only_a_nodes_newest_values_asks_again_for_the_rest() {
        let mut victim = node(20_051, &[("rpc", "v:1"), ("svc:a", "1"), ("svc:b", "1")]);
        let mut liar = node(20_052, &[]);
        let mut joiner = node(20_053, &[]);
        let victim_id = victim.self_chitchat_id().clone();
        victim.self_node_state().set("svc:c", "1");
        exchange(&mut victim, &mut liar);
        exchange(&mut victim, &mut liar);
        // The liar sends the joiner the victim's newest values only: `svc:c` and the list,
        // genuinely signed; its older ones withheld.
        let copy = liar.node_state(&victim_id).expect("held").clone();
        let lie = || signed_values(&copy, &["svc:c", LIVE_KEY]);
        // The joiner has heard of the victim (a digest lists it), nothing more.
        assert!(joiner.cluster_state.admit_node(&victim_id).is_some());
        joiner.process_message(wire(ChitchatMessage::Ack { delta: lie() }));
        let held = joiner.node_state(&victim_id).expect("admitted");
        assert_eq!(held.get("svc:c"), Some("1"));
        assert_eq!(held.get("svc:a"), None);
        assert_eq!(held.max_version(), 0, "asks again from the first listed version it lacks");
        assert_eq!(joiner.refusals().withheld(), 1);
        // The same again, and once more after an honest peer's digest exchange began: each
        // time the joiner goes back to asking.
        joiner.process_message(wire(ChitchatMessage::Ack { delta: lie() }));
        assert_eq!(joiner.node_state(&victim_id).expect("held").max_version(), 0);
        exchange(&mut joiner, &mut liar);
        let now = joiner.node_state(&victim_id).expect("held");
        for key in ["rpc", "svc:a", "svc:b", "svc:c"] {
            assert!(now.get(key).is_some(), "{key} arrived");
        }
        let victims = victim.self_node_state().max_version();
        assert_eq!(now.max_version(), victims);
        // Once whole, the lie changes nothing.
        joiner.process_message(wire(ChitchatMessage::Ack { delta: lie() }));
        assert_eq!(joiner.node_state(&victim_id).expect("held").max_version(), victims);
        assert_eq!(joiner.refusals().unsigned(), 0);
    }

    #[test]
    fn a_withheld_value_is_taken_below_the_max_version_and_never_over_a_later_one() {
        let mut victim = node(20_061, &[("svc:a", "1"), ("svc:b", "1")]);
        let mut liar = node(20_062, &[]);
        let mut other = node(20_063, &[]);
        let victim_id = victim.self_chitchat_id().clone();
        exchange(&mut victim, &mut liar);
        let old_b = genuine(&liar, &victim_id, &["svc:b"]);
        victim.self_node_state().set("svc:b", "2");
        victim.self_node_state().set("svc:c", "1");
        exchange(&mut victim, &mut liar);
        // Newest values only (svc:b at 2, svc:c, the list): svc:a withheld.
        let delta = genuine(&liar, &victim_id, &["svc:b", "svc:c", LIVE_KEY]);
        assert!(other.cluster_state.admit_node(&victim_id).is_some());
        other.process_message(wire(ChitchatMessage::Ack { delta }));
        assert!(other.refusals().withheld() > 0);
        // While it asks again, an older signed svc:b is not taken over the later one.
        other.process_message(wire(ChitchatMessage::Ack { delta: old_b }));
        assert_eq!(value(&other, &victim_id, "svc:b").as_deref(), Some("2"));
        exchange(&mut other, &mut victim);
        assert_eq!(value(&other, &victim_id, "svc:a").as_deref(), Some("1"));
        assert_eq!(value(&other, &victim_id, "svc:b").as_deref(), Some("2"));
    }

    #[test]
    fn values_newer_than_the_list_held_are_not_taken_for_a_gap() {
        let mut victim = node(20_065, &[("svc:a", "1"), ("svc:b", "1")]);
        let mut other = node(20_066, &[]);
        let victim_id = victim.self_chitchat_id().clone();
        exchange(&mut victim, &mut other);
        exchange(&mut victim, &mut other);
        // svc:a changes; a delta cut short brings its new version without the new list.
        victim.self_node_state().set("svc:a", "2");
        victim.sign_own_state();
        let cut = signed_values(victim.self_node_state(), &["svc:a"]);
        other.process_message(wire(ChitchatMessage::Ack { delta: cut }));
        assert_eq!(value(&other, &victim_id, "svc:a").as_deref(), Some("2"));
        assert_eq!(other.refusals().withheld(), 0, "the old list's svc:a was overwritten");
        exchange(&mut other, &mut victim);
        assert_eq!(
            other.node_state(&victim_id).expect("held").max_version(),
            victim.self_node_state().max_version()
        );
        assert_eq!(other.refusals().forged(), 0);
    }

    #[test]
    fn a_deletion_missed_and_collected_is_dropped_by_the_owners_list() {
        let mut victim = node(20_071, &[("svc:a", "1"), ("svc:gone", "1")]);
        let mut other = node(20_072, &[]);
        let victim_id = victim.self_chitchat_id().clone();
        exchange(&mut victim, &mut other);
        exchange(&mut victim, &mut other);
        assert_eq!(value(&other, &victim_id, "svc:gone").as_deref(), Some("1"));
        // Deleted, and the tombstone collected, before `other` hears of it.
        victim.self_node_state().delete("svc:gone");
        victim.self_node_state().set("svc:b", "1");
        victim
            .cluster_state
            .gc_keys_marked_for_deletion(std::time::Duration::ZERO);
        exchange(&mut other, &mut victim);
        exchange(&mut other, &mut victim);
        assert_eq!(value(&other, &victim_id, "svc:b").as_deref(), Some("1"));
        assert_eq!(value(&other, &victim_id, "svc:gone"), None);
        assert_eq!(other.refusals().forged(), 0);
    }

    #[test]
    fn made_up_names_filling_the_table_give_way_to_a_node_that_signs() {
        let mut target = node(20_081, &[]);
        let mut liar = node(20_082, &[]);
        target.cluster_state.limits.max_nodes = 16;
        let liar_addr = Some(liar.self_chitchat_id().gossip_advertise_addr);
        // Digests naming made-up nodes, their heartbeats kept going: they fill the table.
        let flood = |round: u64| {
            let mut digest = crate::digest::Digest::default();
            for i in 0..64u16 {
                let id = ChitchatId::for_local_test(30_000 + i);
                digest.add_node(id, Heartbeat(round + 1), 0, 0);
            }
            ChitchatMessage::Syn {
                cluster_id: liar.cluster_id().to_owned(),
                digest,
            }
        };
        for round in 0..3 {
            target.process_message_from(liar_addr, ProtocolVersion::V2, wire(flood(round)));
        }
        assert_eq!(target.node_states().len(), 16, "full of made-up names");
        // A node that signs its state joins, while the flood goes on.
        let mut newcomer = node(20_083, &[("svc:x", "1")]);
        let newcomer_id = newcomer.self_chitchat_id().clone();
        for round in 3..8 {
            exchange(&mut newcomer, &mut target);
            target.process_message_from(liar_addr, ProtocolVersion::V2, wire(flood(round)));
        }
        assert_eq!(value(&target, &newcomer_id, "svc:x").as_deref(), Some("1"));
        assert_eq!(target.node_states().len(), 16);
    }

    #[test]
    fn a_member_holds_a_few_entries_under_its_own_name_however_many_it_signs_for() {
        let mut target = node(20_095, &[]);
        let liar = node(20_096, &[]);
        target.cluster_state.limits.max_nodes = 16;
        let liar_name = liar.self_chitchat_id().node_id.to_string();
        let liar_addr = Some(liar.self_chitchat_id().gossip_advertise_addr);
        // Made-up generations of the liar's own name, each with a value the liar signs.
        let fakes: Vec<ChitchatId> = (0..64u64)
            .map(|i| {
                ChitchatId::new(
                    liar_name.clone(),
                    1_000 + i,
                    std::net::SocketAddr::from(([127, 0, 0, 9], 40_000 + i as u16)),
                )
            })
            .collect();
        let flood = |round: u64| {
            let mut digest = crate::digest::Digest::default();
            for id in &fakes {
                digest.add_node(id.clone(), Heartbeat(round + 1), 0, 0);
            }
            ChitchatMessage::Syn {
                cluster_id: liar.cluster_id().to_owned(),
                digest,
            }
        };
        let proofs = || {
            let mut delta = crate::delta::DeltaSerializer::with_mtu(60_000);
            for id in &fakes {
                let value = VersionedValue::new("1".to_owned(), 1, false);
                let signature = Names.sign(id, SignedKeyValue::of("svc:x", &value));
                assert!(delta.try_add_node(id.clone(), 0, 0));
                assert!(delta.try_add_signed_kv("svc:x", value, signature.as_ref()));
            }
            ChitchatMessage::Ack {
                delta: delta.finish(),
            }
        };
        for round in 0..3 {
            target.process_message_from(liar_addr, ProtocolVersion::V2, wire(flood(round)));
            target.process_message_from(liar_addr, ProtocolVersion::V2, wire(proofs()));
        }
        let held = target
            .node_states()
            .keys()
            .filter(|id| *id.node_id == *liar_name)
            .count();
        assert!(held <= MAX_GENERATIONS, "{held} entries of the liar's name");
        let mut newcomer = node(20_097, &[("svc:x", "1")]);
        let newcomer_id = newcomer.self_chitchat_id().clone();
        exchange(&mut newcomer, &mut target);
        exchange(&mut newcomer, &mut target);
        assert_eq!(value(&target, &newcomer_id, "svc:x").as_deref(), Some("1"));
    }

    #[test]
    fn a_purged_node_comes_back_on_its_own_word_only() {
        let mut victim = node(20_091, &[("svc:x", "1")]);
        let mut other = node(20_092, &[]);
        let liar = node(20_093, &[]);
        let victim_id = victim.self_chitchat_id().clone();
        exchange(&mut victim, &mut other);
        // The victim left and was purged here.
        other.cluster_state.remove_node(&victim_id, true);
        let relay = |heartbeat: u64| {
            let mut digest = crate::digest::Digest::default();
            digest.add_node(victim_id.clone(), Heartbeat(heartbeat), 0, 0);
            ChitchatMessage::Syn {
                cluster_id: liar.cluster_id().to_owned(),
                digest,
            }
        };
        let liar_addr = Some(liar.self_chitchat_id().gossip_advertise_addr);
        other.process_message_from(liar_addr, ProtocolVersion::V2, wire(relay(900)));
        assert!(other.node_state(&victim_id).is_none(), "not on a relayed heartbeat");
        let victim_addr = Some(victim_id.gossip_advertise_addr);
        other.process_message_from(victim_addr, ProtocolVersion::V2, wire(relay(901)));
        assert!(other.node_state(&victim_id).is_some(), "on its own");
    }

    #[test]
    fn the_owners_list_reads_back_and_refuses_what_it_never_writes() {
        for versions in [vec![], vec![1], vec![1, 2, 9, 700, u64::MAX]] {
            assert_eq!(decode_versions(&encode_versions(&versions)), Some(versions));
        }
        for bad in ["0", "1,0", "x", "1,,2", "18446744073709551615,1", "-1"] {
            assert_eq!(decode_versions(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_heartbeat_past_the_ceiling_is_not_taken() {
        let mut victim = node(20_031, &[]);
        let mut liar = node(20_032, &[]);
        let mut other = node(20_033, &[]);
        let victim_id = victim.self_chitchat_id().clone();
        exchange(&mut victim, &mut liar);
        exchange(&mut victim, &mut other);
        let before = other.node_state(&victim_id).expect("held").heartbeat();
        assert!(forge::rewrite(
            &mut liar,
            &victim_id,
            Some(Heartbeat(u64::MAX)),
            |_| {}
        ));
        exchange(&mut liar, &mut other);
        assert_eq!(
            other.node_state(&victim_id).expect("held").heartbeat(),
            before
        );
        assert!(other.refusals().heartbeats() > 0);
        // The victim's own next heartbeat counts.
        exchange(&mut victim, &mut other);
        assert!(other.node_state(&victim_id).expect("held").heartbeat() > before);
    }
}
