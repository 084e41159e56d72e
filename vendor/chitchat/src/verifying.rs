//! Not upstream's (`auth.rs`): what checking signatures may cost. A verification costs about
//! 0.1 ms, and a member can send datagrams full of values that verify (its own state, a
//! version per value) or that fail: without a bound, a few datagrams a second hold a core and
//! chitchat's lock. So the time spent in [`Authenticator::verify`] is bounded three ways:
//!
//! - per message, [`PER_MESSAGE`]: chitchat's lock is never held longer than that for it;
//! - per sender (the datagram's source address), [`PER_SENDER`] a second, so that a peer that
//!   floods spends its own allowance, not its neighbours';
//! - for the node, [`PER_NODE`] a second, so that many senders together take at most that
//!   share of a core.
//!
//! Time is tokio's, as everywhere in chitchat: on a paused clock (the simulation) checking
//! costs nothing.
//!
//! A value past the budget is not refused: its node's part of the delta stops there (its max
//! version goes only as far as what was applied), so that a peer sends the rest again in a
//! later round. It is counted (`Refusals::deferred`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use crate::auth::{Authenticator, SignedKeyValue};
use crate::{ChitchatId, NodeState};

/// The most verifying one message may cost.
pub const PER_MESSAGE: Duration = Duration::from_millis(20);
/// The most verifying one sender's messages may cost a second (and at once).
pub const PER_SENDER: Duration = Duration::from_millis(100);
/// The most verifying every sender's messages together may cost a second (and at once).
pub const PER_NODE: Duration = Duration::from_millis(400);
/// Senders whose allowance is remembered; past it, the full ones are forgotten first.
const MAX_SENDERS: usize = 4_096;

/// The least allowance a message is given: below it, none. A message given any at all may
/// spend one verification past it; that goes into debt, paid back before the next.
const LEAST: Duration = Duration::from_millis(1);

/// An allowance that refills at `rate` a second, up to `rate`; spending past it is a debt.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Nanoseconds left; below 0, owed.
    left: i64,
    at: Instant,
}

fn nanos(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

impl Bucket {
    fn full(now: Instant, rate: Duration) -> Self {
        Self {
            left: nanos(rate),
            at: now,
        }
    }

    /// What is left once refilled (none while in debt).
    fn refill(&mut self, now: Instant, rate: Duration) -> Duration {
        let elapsed = now.saturating_duration_since(self.at).min(Duration::from_secs(1));
        let earned = nanos(rate.mul_f64(elapsed.as_secs_f64()));
        self.left = self.left.saturating_add(earned).min(nanos(rate));
        self.at = now;
        Duration::from_nanos(u64::try_from(self.left).unwrap_or(0))
    }

    fn spend(&mut self, spent: Duration) {
        self.left = self.left.saturating_sub(nanos(spent));
    }
}

/// The allowances of a node's senders and of the node.
#[derive(Debug)]
pub(crate) struct Budgets {
    node: Bucket,
    senders: HashMap<Option<SocketAddr>, Bucket>,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            node: Bucket::full(Instant::now(), PER_NODE),
            senders: HashMap::new(),
        }
    }
}

impl Budgets {
    /// What a message from `sender` may spend verifying.
    pub(crate) fn allowance(&mut self, sender: Option<SocketAddr>) -> Duration {
        let now = Instant::now();
        if !self.senders.contains_key(&sender) && self.senders.len() >= MAX_SENDERS {
            self.senders
                .retain(|_, bucket| bucket.refill(now, PER_SENDER) < PER_SENDER);
            if self.senders.len() >= MAX_SENDERS {
                self.senders.clear();
            }
        }
        let own = self
            .senders
            .entry(sender)
            .or_insert_with(|| Bucket::full(now, PER_SENDER))
            .refill(now, PER_SENDER);
        let allowance = own.min(self.node.refill(now, PER_NODE)).min(PER_MESSAGE);
        if allowance < LEAST {
            Duration::ZERO
        } else {
            allowance
        }
    }

    /// Takes what a message from `sender` spent.
    pub(crate) fn spend(&mut self, sender: Option<SocketAddr>, spent: Duration) {
        if let Some(bucket) = self.senders.get_mut(&sender) {
            bucket.spend(spent);
        }
        self.node.spend(spent);
    }
}

/// What became of a value checked by a [`Verifier`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Signed,
    Refused,
    /// Not checked: the message's allowance is spent.
    Deferred,
}

/// An [`Authenticator`] with a message's allowance.
pub(crate) struct Verifier<'a> {
    auth: &'a dyn Authenticator,
    allowance: Duration,
    spent: std::cell::Cell<Duration>,
}

impl<'a> Verifier<'a> {
    pub(crate) fn new(auth: &'a dyn Authenticator, allowance: Duration) -> Self {
        Self {
            auth,
            allowance,
            spent: std::cell::Cell::new(Duration::ZERO),
        }
    }

    /// What this message spent verifying.
    pub(crate) fn spent(&self) -> Duration {
        self.spent.get()
    }

    pub(crate) fn verify(
        &self,
        owner: &ChitchatId,
        kv: SignedKeyValue<'_>,
        signature: Option<&[u8]>,
        held: &NodeState,
    ) -> Verdict {
        if self.spent.get() >= self.allowance {
            return Verdict::Deferred;
        }
        let start = Instant::now();
        let signed = self.auth.verify(owner, kv, signature, held);
        self.spent.set(self.spent.get() + start.elapsed());
        if signed {
            Verdict::Signed
        } else {
            Verdict::Refused
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_spends_its_own_allowance_and_the_node_caps_them_all() {
        let mut budgets = Budgets::default();
        let a = Some(SocketAddr::from(([127, 0, 0, 1], 1)));
        assert_eq!(budgets.allowance(a), PER_MESSAGE);
        budgets.spend(a, PER_SENDER);
        assert!(budgets.allowance(a) < Duration::from_millis(5), "a spent its own");
        for port in 2..5 {
            let other = Some(SocketAddr::from(([127, 0, 0, 1], port)));
            assert_eq!(budgets.allowance(other), PER_MESSAGE, "others keep theirs");
            budgets.spend(other, PER_SENDER);
        }
        let late = Some(SocketAddr::from(([127, 0, 0, 1], 9)));
        assert!(
            budgets.allowance(late) < Duration::from_millis(5),
            "the node's is spent"
        );
    }

    #[test]
    fn a_message_that_spent_past_its_allowance_leaves_a_debt() {
        let mut budgets = Budgets::default();
        let a = Some(SocketAddr::from(([127, 0, 0, 1], 1)));
        assert_eq!(budgets.allowance(a), PER_MESSAGE);
        budgets.spend(a, PER_SENDER + Duration::from_millis(50));
        assert_eq!(budgets.allowance(a), Duration::ZERO, "in debt");
        budgets.spend(a, Duration::ZERO);
        assert_eq!(budgets.allowance(a), Duration::ZERO, "a few microseconds earned are not enough");
    }

    #[test]
    fn forgotten_senders_stay_bounded() {
        let mut budgets = Budgets::default();
        for port in 0..(MAX_SENDERS as u16 + 10) {
            budgets.allowance(Some(SocketAddr::from(([127, 0, 0, 1], port))));
        }
        assert!(budgets.senders.len() <= MAX_SENDERS);
    }
}
