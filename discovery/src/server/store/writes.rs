//! Writes to the instance table: registrations, heartbeats, cancellations, status overrides and
//! metadata, each recorded in the delta window.

use super::deadlines::Deadlines;
use std::sync::Arc;

use super::lease::{Change, Lease};
use super::{RegisterError, Renewed, State, Store};
use crate::model::{self, ActionType, Instance, Status};
use crate::server::Limits;
use crate::server::limits::numbers::{check_dirty, lease_secs};

/// Refuses an instance with more metadata entries or text than the limits allow.
fn check_size(i: &Instance, limits: &Limits) -> Result<(), RegisterError> {
    let entries = i.metadata.len().max(i.data_center.metadata.len());
    if entries > limits.max_metadata_entries {
        return Err(RegisterError::TooLarge {
            what: "metadata entries",
            found: entries,
            limit: limits.max_metadata_entries,
            flag: "--max-metadata-entries",
        });
    }
    let bytes = model::instance_text_len(i);
    if bytes > limits.max_instance_bytes {
        return Err(RegisterError::TooLarge {
            what: "bytes of text (fields and metadata)",
            found: bytes,
            limit: limits.max_instance_bytes,
            flag: "--max-instance-bytes",
        });
    }
    Ok(())
}

/// Refuses a new instance of `app` when the registry, or the application, is full.
fn check_room(state: &State, app: &str, limits: &Limits) -> Result<(), RegisterError> {
    let full = |what, limit, flag| Err(RegisterError::Full { what, limit, flag });
    let total = state.deadlines.len();
    if total >= limits.max_instances {
        return full("instances", limits.max_instances, "--max-instances");
    }
    match state.apps.get(app) {
        Some(leases) if leases.len() >= limits.max_instances_per_app => full(
            "instances of this application",
            limits.max_instances_per_app,
            "--max-instances-per-app",
        ),
        None if state.apps.len() >= limits.max_apps => {
            full("applications", limits.max_apps, "--max-apps")
        }
        _ => Ok(()),
    }
}

impl Store {
    fn changed(state: &mut State, now: u64, lease: &Lease, action: ActionType) {
        state.deltas.push(now, Change::new(lease, action));
        state.version = state.version.wrapping_add(1);
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
        if let Some((map, key)) = model::instance_bad_key(&instance) {
            let key = key.to_owned();
            return Err(RegisterError::MetadataKey { map, key });
        }
        let limits = &self.config.limits;
        check_size(&instance, limits)?;
        // 0 is the server's default; u64::MAX seconds would make an immortal instance.
        instance.lease.duration_secs = lease_secs(
            instance.lease.duration_secs,
            self.config.lease_duration,
            limits.max_lease,
        );
        instance.lease.renewal_interval_secs = lease_secs(
            instance.lease.renewal_interval_secs,
            self.config.renewal_interval,
            limits.max_lease,
        );
        self.settled(|state, now| {
            check_dirty(instance.last_dirty_timestamp, now, limits.max_clock_skew)?;
            let id = instance.id().to_owned();
            let known = state
                .apps
                .get(&instance.app)
                .is_some_and(|leases| leases.contains_key(&id));
            if !known {
                check_room(state, &instance.app, limits)?;
            }
            let leases = state.apps.entry(instance.app.clone()).or_default();
            let previous = leases.get(&id);
            let mut service_up_ms = 0;
            if let Some(old) = previous {
                service_up_ms = old.service_up_ms;
                // The newer copy wins; on a tie the incoming one (as Eureka).
                if old.instance.last_dirty_timestamp > instance.last_dirty_timestamp {
                    instance = (*old.instance).clone();
                }
            }
            let key = (instance.app.clone(), id.clone());
            if instance.overridden_status != Status::Unknown {
                state
                    .overrides
                    .entry(key.clone())
                    .or_insert(instance.overridden_status);
            }
            if let Some(o) = state.overrides.get(&key) {
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
                instance: Arc::new(instance),
                registered_ms: now,
                last_seen_ms: now,
                service_up_ms,
                grace_until_ms: 0,
            };
            let view = lease.view();
            let leases = state.apps.entry(lease.instance.app.clone()).or_default();
            if let Some(old) = leases.insert(id, lease.clone()) {
                state.deadlines.remove(old.deadline());
            }
            state.deadlines.add(lease.deadline());
            Self::changed(state, now, &lease, ActionType::Added);
            Ok(view)
        })
    }

    fn lease_mut<'a>(state: &'a mut State, app: &str, id: &str) -> Option<&'a mut Lease> {
        state.apps.get_mut(&app.to_ascii_uppercase())?.get_mut(id)
    }

    /// The lease and the deadlines it is counted in, borrowed together.
    fn lease_and_deadlines<'a>(
        state: &'a mut State,
        app: &str,
        id: &str,
    ) -> Option<(&'a mut Lease, &'a mut Deadlines)> {
        let lease = state.apps.get_mut(&app.to_ascii_uppercase())?.get_mut(id)?;
        Some((lease, &mut state.deadlines))
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
            let key = (app.to_ascii_uppercase(), id.to_owned());
            let override_status = state.overrides.get(&key).copied();
            let Some((lease, deadlines)) = Self::lease_and_deadlines(state, app, id) else {
                return Renewed::NotFound;
            };
            let effective = override_status.unwrap_or(lease.instance.status);
            if effective == Status::Unknown {
                return Renewed::NotFound;
            }
            if lease.instance.status != effective {
                lease.instance_mut().status = effective;
            }
            lease.update(deadlines, |l| l.last_seen_ms = now);
            let stored = lease.instance.last_dirty_timestamp;
            let outcome = match last_dirty {
                Some(theirs) if theirs > stored => Renewed::NotFound,
                Some(theirs) if theirs < stored && replication => {
                    Renewed::Conflict(Box::new(lease.view()))
                }
                _ => Renewed::Ok,
            };
            state.renewals = state.renewals.saturating_add(1);
            outcome
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
            state.deadlines.remove(lease.deadline());
            if leases.is_empty() {
                state.apps.remove(&app);
            }
            state.overrides.remove(&(app, id.to_owned()));
            let gone = Change::new(&lease, ActionType::Deleted).evicted(now);
            state.deltas.push(now, gone);
            state.version = state.version.wrapping_add(1);
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
            // An unknown instance (say, a typo in the application) gets no override.
            if Self::lease_mut(state, app, id).is_none() {
                return false;
            }
            let key = (app.to_ascii_uppercase(), id.to_owned());
            match set {
                Some(s) => state.overrides.insert(key, s),
                None => state.overrides.remove(&key),
            };
            let Some((lease, deadlines)) = Self::lease_and_deadlines(state, app, id) else {
                return false;
            };
            lease.update(deadlines, |l| l.last_seen_ms = now);
            let i = lease.instance_mut();
            i.overridden_status = set.unwrap_or(Status::Unknown);
            i.status = set.unwrap_or(fallback);
            i.action_type = Some(ActionType::Modified);
            i.last_updated_timestamp = now;
            if let Some(d) = last_dirty.filter(|d| *d > i.last_dirty_timestamp) {
                i.last_dirty_timestamp = d;
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
            if !crate::model::xml::valid_name(k) {
                let key = k.clone();
                return Err(RegisterError::MetadataKey {
                    map: "metadata",
                    key,
                });
            }
        }
        let limits = &self.config.limits;
        self.settled(|state, now| {
            let Some((lease, deadlines)) = Self::lease_and_deadlines(state, app, id) else {
                return Ok(None);
            };
            // Checked on a copy: a refused update changes nothing.
            let mut updated = (*lease.instance).clone();
            updated.metadata.extend(pairs);
            check_size(&updated, limits)?;
            updated.action_type = Some(ActionType::Added);
            updated.last_updated_timestamp = now;
            lease.instance = Arc::new(updated);
            lease.registered_ms = now;
            lease.update(deadlines, |l| l.last_seen_ms = now);
            let lease = lease.clone();
            Self::changed(state, now, &lease, ActionType::Added);
            Ok(Some(lease.view()))
        })
    }
}
