//! One lease: an instance with the server's records of when it registered and last renewed.

use crate::model::{ActionType, Instance};

/// One lease.
#[derive(Debug, Clone)]
pub(super) struct Lease {
    pub(super) instance: Instance,
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
        let mut i = self.instance.clone();
        i.lease.registration_timestamp = self.registered_ms;
        i.lease.last_renewal_timestamp = self.last_seen_ms;
        i.lease.service_up_timestamp = self.service_up_ms;
        i.lease.eviction_timestamp = 0;
        i
    }
}

pub(super) fn delta_copy(lease: &Lease, action: ActionType) -> Instance {
    let mut i = lease.view();
    i.action_type = Some(action);
    i
}
