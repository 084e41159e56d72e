//! Writes to the instance table: registrations, heartbeats, cancellations, status overrides and
//! metadata, each recorded in the delta window.

use super::lease::{Lease, delta_copy};
use super::{RegisterError, Renewed, State, Store};
use crate::model::{self, ActionType, Instance, Status};

impl Store {
    fn changed(state: &mut State, now: u64, lease: &Lease, action: ActionType) {
        state.deltas.push(now, delta_copy(lease, action));
        state.version += 1;
    }

    /// Registers (or re-registers) an instance; `path_app` is the application of the URL.
    pub(crate) fn register(
        &self,
        path_app: &str,
        mut instance: Instance,
    ) -> Result<Instance, RegisterError> {
        let path_app = path_app.to_ascii_uppercase();
        if instance.app.is_empty() {
            instance.app = path_app.clone();
        }
        if instance.host_name.is_empty() {
            return Err(RegisterError::Missing("hostname"));
        }
        if instance.ip_addr.is_empty() {
            return Err(RegisterError::Missing("ip address"));
        }
        if instance.id().is_empty() {
            return Err(RegisterError::Missing("instanceId"));
        }
        if instance.app != path_app {
            return Err(RegisterError::MismatchedApp {
                expected: path_app,
                found: instance.app,
            });
        }
        if let Some((field, found)) = model::instance_unrepresentable(&instance) {
            return Err(RegisterError::Unrepresentable { field, found });
        }
        if instance.lease.duration_secs == 0 {
            instance.lease.duration_secs = self.config.lease_duration.as_secs();
        }
        if instance.lease.renewal_interval_secs == 0 {
            instance.lease.renewal_interval_secs = self.config.renewal_interval.as_secs();
        }
        Ok(self.settled(|state, now| {
            // The registry is being rebuilt: it no longer needs to hide that it is empty.
            state.warm_until = 0;
            let id = instance.id().to_owned();
            let leases = state.apps.entry(instance.app.clone()).or_default();
            let previous = leases.get(&id);
            let mut service_up_ms = 0;
            if let Some(old) = previous {
                service_up_ms = old.service_up_ms;
                // The newer copy wins; on a tie the incoming one (as Eureka).
                if old.instance.last_dirty_timestamp > instance.last_dirty_timestamp {
                    instance = old.instance.clone();
                }
            }
            if instance.overridden_status != Status::Unknown {
                state
                    .overrides
                    .entry(id.clone())
                    .or_insert(instance.overridden_status);
            }
            if let Some(o) = state.overrides.get(&id) {
                instance.overridden_status = *o;
                instance.status = *o;
            }
            if service_up_ms == 0 && instance.status == Status::Up {
                service_up_ms = now;
            }
            instance.action_type = Some(ActionType::Added);
            instance.last_updated_timestamp = now;
            let lease = Lease {
                duration_ms: instance.lease.duration_secs.saturating_mul(1000),
                instance,
                registered_ms: now,
                last_seen_ms: now,
                service_up_ms,
                grace_until_ms: 0,
            };
            let view = lease.view();
            let leases = state.apps.entry(lease.instance.app.clone()).or_default();
            leases.insert(id, lease.clone());
            Self::changed(state, now, &lease, ActionType::Added);
            view
        }))
    }

    fn lease_mut<'a>(state: &'a mut State, app: &str, id: &str) -> Option<&'a mut Lease> {
        state.apps.get_mut(&app.to_ascii_uppercase())?.get_mut(id)
    }

    /// A heartbeat. `last_dirty` is the client's `lastDirtyTimestamp`, if it sent one.
    pub(crate) fn renew(
        &self,
        app: &str,
        id: &str,
        last_dirty: Option<u64>,
        replication: bool,
    ) -> Renewed {
        self.settled(|state, now| {
            let override_status = state.overrides.get(id).copied();
            let Some(lease) = Self::lease_mut(state, app, id) else {
                return Renewed::NotFound;
            };
            let effective = override_status.unwrap_or(lease.instance.status);
            if effective == Status::Unknown {
                return Renewed::NotFound;
            }
            lease.instance.status = effective;
            lease.last_seen_ms = now;
            let stored = lease.instance.last_dirty_timestamp;
            let view = lease.view();
            state.renewals += 1;
            match last_dirty {
                Some(theirs) if theirs > stored => Renewed::NotFound,
                Some(theirs) if theirs < stored && replication => Renewed::Conflict(Box::new(view)),
                _ => Renewed::Ok,
            }
        })
    }

    /// Cancels a lease; false if there was none.
    pub(crate) fn cancel(&self, app: &str, id: &str) -> bool {
        self.settled(|state, now| {
            let app = app.to_ascii_uppercase();
            let Some(leases) = state.apps.get_mut(&app) else {
                return false;
            };
            let Some(lease) = leases.remove(id) else {
                return false;
            };
            if leases.is_empty() {
                state.apps.remove(&app);
            }
            state.overrides.remove(id);
            let mut gone = delta_copy(&lease, ActionType::Deleted);
            gone.lease.eviction_timestamp = now;
            state.deltas.push(now, gone);
            state.version += 1;
            true
        })
    }

    /// Sets (`Some`) or removes (`None`, falling back to `fallback`) a status override; false
    /// if the instance is unknown.
    pub(crate) fn override_status(
        &self,
        app: &str,
        id: &str,
        set: Option<Status>,
        fallback: Status,
        last_dirty: Option<u64>,
    ) -> bool {
        self.settled(|state, now| {
            // The override map is keyed by id alone: a 404 (say, a typo in the application)
            // must not touch the override of the instance that does have this id.
            if Self::lease_mut(state, app, id).is_none() {
                return false;
            }
            match set {
                Some(s) => state.overrides.insert(id.to_owned(), s),
                None => state.overrides.remove(id),
            };
            let Some(lease) = Self::lease_mut(state, app, id) else {
                return false;
            };
            lease.last_seen_ms = now;
            lease.instance.overridden_status = set.unwrap_or(Status::Unknown);
            lease.instance.status = set.unwrap_or(fallback);
            lease.instance.action_type = Some(ActionType::Modified);
            lease.instance.last_updated_timestamp = now;
            if let Some(d) = last_dirty.filter(|d| *d > lease.instance.last_dirty_timestamp) {
                lease.instance.last_dirty_timestamp = d;
            }
            let lease = lease.clone();
            Self::changed(state, now, &lease, ActionType::Modified);
            true
        })
    }

    /// Merges metadata into an instance, which Eureka treats as a new registration; the
    /// instance after the change, `Ok(None)` if it is unknown, or why the pairs were refused
    /// (nothing changed then).
    pub(crate) fn update_metadata(
        &self,
        app: &str,
        id: &str,
        pairs: Vec<(String, String)>,
    ) -> Result<Option<Instance>, RegisterError> {
        for (k, v) in &pairs {
            let bad = match model::unrepresentable(k) {
                Some(c) => Some((format!("metadata key {k:?}"), c)),
                None => model::unrepresentable(v).map(|c| (format!("metadata.{k}"), c)),
            };
            if let Some((field, found)) = bad {
                return Err(RegisterError::Unrepresentable { field, found });
            }
        }
        Ok(self.settled(|state, now| {
            let lease = Self::lease_mut(state, app, id)?;
            for (k, v) in pairs {
                lease.instance.metadata.insert(k, v);
            }
            lease.registered_ms = now;
            lease.last_seen_ms = now;
            lease.instance.action_type = Some(ActionType::Added);
            lease.instance.last_updated_timestamp = now;
            let lease = lease.clone();
            Self::changed(state, now, &lease, ActionType::Added);
            Some(lease.view())
        }))
    }
}
