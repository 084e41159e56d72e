//! Reads of the instance table: the registry, its delta, one application or instance, a VIP,
//! the overrides, and the health summary.

use std::collections::BTreeMap;

use super::lease::Lease;
use super::{Document, Health, State, Store};
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

    /// Which version of `doc` the registry holds now: it changes with every registration,
    /// cancel, expiry, status and metadata change (not with heartbeats, which change only
    /// the renewal timestamps, as in Eureka's response cache), and for the delta also when its
    /// window drops old changes.
    pub(crate) fn version_of(&self, doc: Document) -> (u64, u64) {
        self.settled(|state, _| Self::key(state, doc))
    }

    pub(super) fn key(state: &State, doc: Document) -> (u64, u64) {
        match doc {
            Document::Apps => (state.version, 0),
            Document::Delta => (state.version, state.deltas.len() as u64),
        }
    }

    /// The whole registry (the dashboard's; clients' reads go through the response cache).
    pub(crate) fn applications(&self) -> Applications {
        self.snapshot(Document::Apps).to_applications()
    }

    /// Whether self-preservation is on (the registry settled now).
    pub(crate) fn preserving(&self) -> bool {
        self.settled(|state, _| state.preserving)
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
            instances: state.deadlines.len(),
            quiet: state.deadlines.quiet(now),
            recently_expired: state.expired_until.len(),
            self_preservation: state.preserving,
            renewals: state.renewals,
        })
    }
}
