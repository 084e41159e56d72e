//! One lease: an instance with the server's records of when it registered and last renewed;
//! and a change of it, as the delta window keeps it.

use std::sync::Arc;

use crate::model::{ActionType, Instance};

/// One lease. The instance is shared with the delta window's entry of its latest change (a
/// copy is made only when one of them changes), so that a registry of 100,000 instances with
/// 100,000 recent changes holds 100,000 instances, not twice as many.
#[derive(Debug, Clone)]
pub(super) struct Lease {
    pub(super) instance: Arc<Instance>,
    pub(super) registered_ms: u64,
    pub(super) last_seen_ms: u64,
    pub(super) service_up_ms: u64,
    pub(super) duration_ms: u64,
    /// Set when self-preservation ends: a lease kept through it gets one more duration to renew
    /// before it expires.
    pub(super) grace_until_ms: u64,
}

impl Lease {
    /// After when the lease is quiet.
    pub(super) fn deadline(&self) -> u64 {
        self.last_seen_ms
            .saturating_add(self.duration_ms)
            .max(self.grace_until_ms)
    }

    pub(super) fn quiet(&self, now: u64) -> bool {
        now > self.deadline()
    }

    /// The instance, to change: copied first if the delta window still shares it.
    pub(super) fn instance_mut(&mut self) -> &mut Instance {
        Arc::make_mut(&mut self.instance)
    }

    /// Changes the lease through `f`, keeping its deadline counted in `deadlines`: every
    /// change of `last_seen_ms` or `grace_until_ms` goes through here.
    pub(super) fn update<T>(
        &mut self,
        deadlines: &mut super::deadlines::Deadlines,
        f: impl FnOnce(&mut Lease) -> T,
    ) -> T {
        deadlines.remove(self.deadline());
        let out = f(self);
        deadlines.add(self.deadline());
        out
    }

    /// The instance as responses show it: the lease filled in from the server's records.
    pub(super) fn view(&self) -> Instance {
        let mut i = (*self.instance).clone();
        i.lease.registration_timestamp = self.registered_ms;
        i.lease.last_renewal_timestamp = self.last_seen_ms;
        i.lease.service_up_timestamp = self.service_up_ms;
        i.lease.eviction_timestamp = 0;
        i
    }
}

/// A change of an instance as the delta window keeps it: the lease as it was then, and what
/// happened.
#[derive(Debug, Clone)]
pub(super) struct Change {
    lease: Lease,
    action: ActionType,
    evicted_ms: u64,
}

impl Change {
    pub(super) fn new(lease: &Lease, action: ActionType) -> Self {
        Self {
            lease: lease.clone(),
            action,
            evicted_ms: 0,
        }
    }

    /// A cancel, at `at`.
    pub(super) fn evicted(mut self, at: u64) -> Self {
        self.evicted_ms = at;
        self
    }

    pub(super) fn instance(&self) -> &Instance {
        &self.lease.instance
    }

    /// The instance as the delta shows it.
    pub(super) fn view(&self) -> Instance {
        let mut i = self.lease.view();
        i.action_type = Some(self.action);
        i.lease.eviction_timestamp = self.evicted_ms;
        i
    }
}
