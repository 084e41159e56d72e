//! Reads of the instance table: the registry, its delta, one application or instance, a VIP,
//! the overrides, and the health summary.

use std::collections::BTreeMap;

use super::lease::Lease;
use super::{Health, State, Store};
use crate::model::{Application, Applications, Instance, Status, hashcode};

impl Store {
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
            let changes = state.deltas.iter().cloned();
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

    /// The override map (`GET serverinfo/statusoverrides`), by instance id as Eureka shows
    /// it; of two applications' instances under one id, the later application's is shown.
    pub(crate) fn overrides(&self) -> BTreeMap<String, Status> {
        self.settled(|state, _| {
            let mut by_key: Vec<_> = state.overrides.iter().collect();
            by_key.sort();
            by_key
                .into_iter()
                .map(|((_, id), v)| (id.clone(), *v))
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
            recently_expired: state.expired_until.len(),
            self_preservation: state.preserving,
            renewals: state.renewals,
        })
    }
}
