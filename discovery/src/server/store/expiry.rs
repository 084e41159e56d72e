//! Settling the registry at a time: trimming the delta window, self-preservation, and expiring
//! the quiet leases (see the parent module for the rules).

use std::collections::BTreeMap;

use super::lease::Change;
use super::{State, Store};
use crate::model::ActionType;

impl Store {
    pub(super) fn settle(&self, state: &mut State, now: u64) {
        let retention = crate::server::limits::numbers::millis(self.config.delta_retention);
        state.deltas.trim(now, retention);
        while state
            .expired_until
            .front()
            .is_some_and(|until| *until < now)
        {
            state.expired_until.pop_front();
        }
        // Counted, not visited: a settle costs the deadlines already past (see `deadlines`).
        let live = state.deadlines.len();
        let quiet = state.deadlines.quiet(now);
        // The registry as it was a lease duration ago: a partition's victims go quiet one by
        // one (their heartbeats are staggered), so those already expired still count.
        let expired = state.expired_until.len();
        let total = live + expired;
        let renewing = live - quiet;
        let preserving = self.config.self_preservation
            && total >= self.config.self_preservation_min_instances
            && (renewing as f64) < self.config.renewal_percent_threshold * total as f64;
        if preserving != state.preserving {
            if preserving {
                tracing::warn!(
                    "self-preservation on: {quiet} instances are quiet and {expired} expired \
                     within their lease, of {total}; the quiet ones are still served, since a \
                     network failure is likelier than so many instances dying together"
                );
            } else {
                tracing::info!(
                    "self-preservation off: {quiet} of {live} instances are still quiet, and \
                     have one lease duration to renew"
                );
                // Rare (once per episode): the one settle that visits every lease.
                let deadlines = &mut state.deadlines;
                for lease in state.apps.values_mut().flat_map(BTreeMap::values_mut) {
                    if lease.quiet(now) {
                        let grace = now.saturating_add(lease.duration_ms);
                        lease.update(deadlines, |l| l.grace_until_ms = grace);
                    }
                }
            }
            state.preserving = preserving;
            if !preserving {
                return;
            }
        }
        if preserving || quiet == 0 {
            return;
        }
        // Something is due to expire: only now are the leases visited.
        let mut gone = Vec::new();
        let deadlines = &mut state.deadlines;
        for leases in state.apps.values_mut() {
            leases.retain(|_, l| {
                if l.quiet(now) {
                    deadlines.remove(l.deadline());
                    gone.push((Change::new(l, ActionType::Deleted), l.duration_ms));
                    false
                } else {
                    true
                }
            });
        }
        state.apps.retain(|_, leases| !leases.is_empty());
        for (change, duration_ms) in gone {
            let i = change.instance();
            tracing::info!(
                "instance {} of {} expired: no heartbeat for {} s",
                i.id(),
                i.app,
                i.lease.duration_secs
            );
            state.overrides.remove(&(i.app.clone(), i.id().to_owned()));
            state.deltas.push(now, change);
            state.version = state.version.wrapping_add(1);
            state
                .expired_until
                .push_back(now.saturating_add(duration_ms));
        }
        // Kept in order of expiry end, so that the front is always the first to lapse.
        state.expired_until.make_contiguous().sort_unstable();
    }
}
