//! The registry itself: leases keyed by application and instance id, status overrides, the
//! delta window, and expiry decided when the registry is read.
//!
//! Nothing is evicted on a timer. Every operation first *settles* the registry at the current
//! time: an instance whose last heartbeat is older than its lease duration is quiet; if more
//! quiet instances than the threshold allows went quiet together (and there are at least the
//! minimum number of instances), the registry is in self-preservation and keeps serving them;
//! otherwise the quiet ones are expired (a `DELETED` entry in the delta) and forgotten.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use super::{Clock, ServerConfig};
use crate::model::{ActionType, Application, Applications, Instance, Status, hashcode};

/// One lease.
#[derive(Debug, Clone)]
struct Lease {
    instance: Instance,
    registered_ms: u64,
    last_seen_ms: u64,
    service_up_ms: u64,
    duration_ms: u64,
    /// Set when self-preservation ends: a lease kept through it gets one more duration to renew
    /// before it expires.
    grace_until_ms: u64,
}

impl Lease {
    fn quiet(&self, now: u64) -> bool {
        now > self
            .last_seen_ms
            .saturating_add(self.duration_ms)
            .max(self.grace_until_ms)
    }

    /// The instance as responses show it: the lease filled in from the server's records.
    fn view(&self) -> Instance {
        let mut i = self.instance.clone();
        i.lease.registration_timestamp = self.registered_ms;
        i.lease.last_renewal_timestamp = self.last_seen_ms;
        i.lease.service_up_timestamp = self.service_up_ms;
        i.lease.eviction_timestamp = 0;
        i
    }
}

#[derive(Debug, Default)]
struct State {
    apps: BTreeMap<String, BTreeMap<String, Lease>>,
    overrides: HashMap<String, Status>,
    deltas: VecDeque<(u64, Instance)>,
    version: u64,
    preserving: bool,
    renewals: u64,
}

/// Why a registration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// A required field is empty.
    #[error("Missing {0}")]
    Missing(&'static str),
    /// The body names another application than the path.
    #[error("Mismatched appName, expecting {expected} but was {found}")]
    MismatchedApp {
        /// From the path.
        expected: String,
        /// From the body.
        found: String,
    },
}

/// What a heartbeat gets.
#[derive(Debug, Clone, PartialEq)]
pub enum Renewed {
    /// Renewed.
    Ok,
    /// Unknown, or the client holds newer information: it must register again.
    NotFound,
    /// A replicated heartbeat older than this server's copy, which the sender should adopt.
    Conflict(Box<Instance>),
}

/// The registry's state at a glance.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// Instances served.
    pub instances: usize,
    /// Of those, how many have not renewed within their lease.
    pub quiet: usize,
    /// Whether expiry is suspended because too many went quiet at once.
    pub self_preservation: bool,
    /// Heartbeats received since start (replicated ones included).
    pub renewals: u64,
}

/// The registry of one server.
#[derive(Debug)]
pub(crate) struct Store {
    state: Mutex<State>,
    clock: Clock,
    config: ServerConfig,
}

fn delta_copy(lease: &Lease, action: ActionType) -> Instance {
    let mut i = lease.view();
    i.action_type = Some(action);
    i
}

impl Store {
    pub(crate) fn new(config: ServerConfig, clock: Clock) -> Self {
        Self {
            state: Mutex::new(State::default()),
            clock,
            config,
        }
    }

    pub(crate) fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Locks and settles the registry at the current time.
    fn settled<T>(&self, f: impl FnOnce(&mut State, u64) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.clock.now_ms();
        self.settle(&mut state, now);
        f(&mut state, now)
    }

    fn settle(&self, state: &mut State, now: u64) {
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

    fn changed(state: &mut State, now: u64, lease: &Lease, action: ActionType) {
        state.deltas.push_back((now, delta_copy(lease, action)));
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
        if instance.lease.duration_secs == 0 {
            instance.lease.duration_secs = self.config.lease_duration.as_secs();
        }
        if instance.lease.renewal_interval_secs == 0 {
            instance.lease.renewal_interval_secs = self.config.renewal_interval.as_secs();
        }
        Ok(self.settled(|state, now| {
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
            state.deltas.push_back((now, gone));
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
            match set {
                Some(s) => state.overrides.insert(id.to_owned(), s),
                None => state.overrides.remove(id),
            };
            let Some(lease) = Self::lease_mut(state, app, id) else {
                if set.is_some() {
                    state.overrides.remove(id);
                }
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
    /// instance after the change, or `None` if it is unknown.
    pub(crate) fn update_metadata(
        &self,
        app: &str,
        id: &str,
        pairs: Vec<(String, String)>,
    ) -> Option<Instance> {
        self.settled(|state, now| {
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
        })
    }

    fn all(state: &State) -> Vec<Instance> {
        state
            .apps
            .values()
            .flat_map(BTreeMap::values)
            .map(Lease::view)
            .collect()
    }

    /// The whole registry (`GET apps`).
    pub(crate) fn applications(&self) -> Applications {
        self.settled(|state, _| {
            let all = Self::all(state);
            Applications::group("1", hashcode(&all), all)
        })
    }

    /// The changes of the delta window (`GET apps/delta`), with the hashcode of the whole
    /// registry and the change counter as its version.
    pub(crate) fn delta(&self) -> Applications {
        self.settled(|state, _| {
            let all = Self::all(state);
            let changes = state.deltas.iter().map(|(_, i)| i.clone());
            Applications::group(state.version.to_string(), hashcode(&all), changes)
        })
    }

    /// One application, if it has instances.
    pub(crate) fn application(&self, app: &str) -> Option<Application> {
        self.settled(|state, _| {
            let leases = state.apps.get(&app.to_ascii_uppercase())?;
            Some(Application {
                name: app.to_ascii_uppercase(),
                instances: leases.values().map(Lease::view).collect(),
            })
        })
    }

    /// One instance of one application.
    pub(crate) fn instance(&self, app: &str, id: &str) -> Option<Instance> {
        self.settled(|state, _| {
            state
                .apps
                .get(&app.to_ascii_uppercase())?
                .get(id)
                .map(Lease::view)
        })
    }

    /// The first instance with this id in any application.
    pub(crate) fn instance_by_id(&self, id: &str) -> Option<Instance> {
        self.settled(|state, _| {
            state
                .apps
                .values()
                .find_map(|leases| leases.get(id))
                .map(Lease::view)
        })
    }

    /// The instances serving a VIP (`secure`: a secure VIP), version "-1" as Eureka.
    pub(crate) fn vip(&self, vip: &str, secure: bool) -> Applications {
        self.settled(|state, _| {
            let matching: Vec<Instance> = Self::all(state)
                .into_iter()
                .filter(|i| i.serves_vip(vip, secure))
                .collect();
            Applications::group("-1", hashcode(&matching), matching)
        })
    }

    /// The override map (`GET serverinfo/statusoverrides`).
    pub(crate) fn overrides(&self) -> BTreeMap<String, Status> {
        self.settled(|state, _| {
            state
                .overrides
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect()
        })
    }

    /// The registry's state at a glance.
    pub(crate) fn health(&self) -> Health {
        self.settled(|state, now| Health {
            instances: state.apps.values().map(BTreeMap::len).sum(),
            quiet: state
                .apps
                .values()
                .flat_map(BTreeMap::values)
                .filter(|l| l.quiet(now))
                .count(),
            self_preservation: state.preserving,
            renewals: state.renewals,
        })
    }
}
