//! The registry as Eureka returns it: applications, each with its instances, plus the
//! version and hashcode clients reconcile deltas with.

use std::collections::BTreeMap;

use super::{Instance, Status};

/// Eureka's `applications` document.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Applications {
    /// `versions__delta`: "1" for a full fetch, "-1" for VIP reads, a counter for deltas.
    pub versions_delta: String,
    /// `apps__hashcode`: see [`hashcode`].
    pub apps_hashcode: String,
    /// The applications, by name.
    pub applications: Vec<Application>,
}

/// One application and its instances.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Application {
    /// Its name, upper-cased.
    pub name: String,
    /// Its instances.
    pub instances: Vec<Instance>,
}

impl Applications {
    /// Groups instances by application (sorted by name, instances in the given order).
    pub fn group(
        versions_delta: impl Into<String>,
        apps_hashcode: impl Into<String>,
        instances: impl IntoIterator<Item = Instance>,
    ) -> Self {
        let mut by_app: BTreeMap<String, Vec<Instance>> = BTreeMap::new();
        for i in instances {
            by_app.entry(i.app.clone()).or_default().push(i);
        }
        Self {
            versions_delta: versions_delta.into(),
            apps_hashcode: apps_hashcode.into(),
            applications: by_app
                .into_iter()
                .map(|(name, instances)| Application { name, instances })
                .collect(),
        }
    }

    /// Every instance of every application.
    pub fn instances(&self) -> impl Iterator<Item = &Instance> {
        self.applications.iter().flat_map(|a| a.instances.iter())
    }
}

/// Eureka's reconcile hashcode: `STATUS_count_` for each status present, statuses in
/// alphabetical order (`DOWN_1_UP_3_`), over every instance whatever its status; empty for none.
pub fn hashcode<'a>(instances: impl IntoIterator<Item = &'a Instance>) -> String {
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    for i in instances {
        *counts.entry(i.status.as_str()).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(status, n)| format!("{status}_{n}_"))
        .collect()
}

/// The status counts of a hashcode, for tests and dashboards.
pub fn parse_hashcode(code: &str) -> BTreeMap<Status, usize> {
    let parts: Vec<&str> = code.split('_').collect();
    let mut out = BTreeMap::new();
    // Status names contain underscores (OUT_OF_SERVICE): read tokens until a number.
    let mut name = Vec::new();
    for p in parts {
        if let Ok(n) = p.parse::<usize>() {
            out.insert(Status::lenient(&name.join("_")), n);
            name.clear();
        } else if !p.is_empty() {
            name.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(status: Status) -> Instance {
        let mut i = Instance::new("a", "h", 1);
        i.status = status;
        i
    }

    #[test]
    fn the_hashcode_orders_statuses_as_eureka_does() {
        let all = [
            with(Status::Up),
            with(Status::Up),
            with(Status::Down),
            with(Status::Up),
            with(Status::OutOfService),
        ];
        assert_eq!(hashcode(&all), "DOWN_1_OUT_OF_SERVICE_1_UP_3_");
        assert_eq!(hashcode(&[]), "");
        let counts = parse_hashcode("DOWN_1_OUT_OF_SERVICE_1_UP_3_");
        assert_eq!(counts[&Status::OutOfService], 1);
        assert_eq!(counts[&Status::Up], 3);
    }
}
