//! A registry document taken under the lock and written outside it.
//!
//! Taking it copies leases, not instances: a lease shares its instance (an `Arc`), so the
//! copy of 100,000 leases is 100,000 reference counts and a few integers each, and the lock
//! is held for that only. The instances as responses show them are made while writing, one
//! application at a time, off the lock.

use std::collections::BTreeMap;

use super::lease::{Change, Lease};
use super::{Document, Store};
use crate::model::{Application, Applications, Format, Instance, hashcode};

enum Entry {
    Lease(Lease),
    Change(Change),
}

impl Entry {
    fn view(&self) -> Instance {
        match self {
            Entry::Lease(l) => l.view(),
            Entry::Change(c) => c.view(),
        }
    }
}

/// `GET apps` or `GET apps/delta` as the registry held it.
pub(crate) struct Snapshot {
    version: (u64, u64),
    versions_delta: String,
    apps_hashcode: String,
    /// By application name, in order.
    apps: Vec<(String, Vec<Entry>)>,
    instances: usize,
}

impl Snapshot {
    /// The version it is of (see `Store::version_of`).
    pub(crate) fn version(&self) -> (u64, u64) {
        self.version
    }

    /// How many instances it holds.
    pub(crate) fn instances(&self) -> usize {
        self.instances
    }

    fn applications(&self) -> impl Iterator<Item = Application> + '_ {
        self.apps.iter().map(|(name, entries)| Application {
            name: name.clone(),
            instances: entries.iter().map(Entry::view).collect(),
        })
    }

    /// The document in `format`, into `out`, an instance at a time.
    pub(crate) fn write(
        &self,
        format: Format,
        out: &mut impl std::io::Write,
    ) -> std::io::Result<()> {
        format.applications_into(
            out,
            &self.versions_delta,
            &self.apps_hashcode,
            self.applications(),
        )
    }

    /// The document in `format`, whole.
    pub(crate) fn text(&self, format: Format) -> Vec<u8> {
        // About 1 KiB of text per instance; what is not written is never touched.
        let mut out = Vec::with_capacity(self.instances.saturating_mul(1024).saturating_add(256));
        // Into a Vec: cannot fail.
        let _ = self.write(format, &mut out);
        out
    }

    /// The document as a value.
    pub(crate) fn to_applications(&self) -> Applications {
        Applications {
            versions_delta: self.versions_delta.clone(),
            apps_hashcode: self.apps_hashcode.clone(),
            applications: self.applications().collect(),
        }
    }
}

impl Store {
    /// `doc` as the registry holds it now.
    pub(crate) fn snapshot(&self, doc: Document) -> Snapshot {
        self.settled(|state, _| {
            let leases = state.apps.values().flat_map(BTreeMap::values);
            let apps_hashcode = hashcode(leases.map(|l| &*l.instance));
            let (versions_delta, apps): (String, Vec<(String, Vec<Entry>)>) = match doc {
                Document::Apps => {
                    let apps = state
                        .apps
                        .iter()
                        .map(|(name, leases)| {
                            let entries = leases.values().cloned().map(Entry::Lease).collect();
                            (name.clone(), entries)
                        })
                        .collect();
                    ("1".to_owned(), apps)
                }
                Document::Delta => {
                    let mut by_app: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
                    for c in state.deltas.changes() {
                        let app = c.instance().app.clone();
                        by_app
                            .entry(app)
                            .or_default()
                            .push(Entry::Change(c.clone()));
                    }
                    (state.version.to_string(), by_app.into_iter().collect())
                }
            };
            let instances = apps
                .iter()
                .map(|(_, e): &(String, Vec<Entry>)| e.len())
                .sum();
            Snapshot {
                version: Self::key(state, doc),
                versions_delta,
                apps_hashcode,
                apps,
                instances,
            }
        })
    }
}
