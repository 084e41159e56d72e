//! Settling the registry at a time: trimming the delta window, self-preservation, and expiring
//! the quiet leases (see the parent module for the rules).

use std::collections::BTreeMap;

use super::lease::delta_copy;
use super::{State, Store};
use crate::model::ActionType;

impl Store {
    pub(super) fn settle(&self, state: &mut State, now: u64) {
        let retention = self.config.delta_retention.as_millis() as u64;
        while state
            .deltas
            .front()
            .is_some_and(|(at, _)| now.saturating_sub(*at) > retention)
        {
            state.deltas.pop_front();
        }
        let total: usize = state.apps.values().map(BTreeMap::len).sum();
        let quiet: usize = state
            .apps
            .values()
            .flat_map(BTreeMap::values)
            .filter(|l| l.quiet(now))
            .count();
        let preserving = self.config.self_preservation
            && total >= self.config.self_preservation_min_instances
            && ((total - quiet) as f64) < self.config.renewal_percent_threshold * total as f64;
        if preserving != state.preserving {
            if preserving {
                tracing::warn!(
                    "self-preservation on: {quiet} of {total} instances stopped renewing at once; \
                     they are still served, since a network failure is likelier than so many \
                     instances dying together"
                );
            } else {
                tracing::info!(
                    "self-preservation off: {quiet} of {total} instances are still quiet, and \
                     have one lease duration to renew"
                );
                for lease in state.apps.values_mut().flat_map(BTreeMap::values_mut) {
                    if lease.quiet(now) {
                        lease.grace_until_ms = now.saturating_add(lease.duration_ms);
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
        let mut expired = Vec::new();
        for leases in state.apps.values_mut() {
            leases.retain(|_, l| {
                if l.quiet(now) {
                    expired.push(delta_copy(l, ActionType::Deleted));
                    false
                } else {
                    true
                }
            });
        }
        state.apps.retain(|_, leases| !leases.is_empty());
        for i in expired {
            tracing::info!(
                "instance {} of {} expired: no heartbeat for {} s",
                i.id(),
                i.app,
                i.lease.duration_secs
            );
            state.overrides.remove(i.id());
            state.deltas.push_back((now, i));
            state.version += 1;
        }
    }
}
