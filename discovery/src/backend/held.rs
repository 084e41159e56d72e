//! The backend's copy of the registry, kept current with deltas, as Eureka's clients keep
//! theirs.
//!
//! Fetching the whole registry every few seconds, and on every write, from every node, made a
//! cold start of many nodes a herd, each reading a registry that grows with the herd. A delta
//! holds only the changes of the last few minutes. Applied to the copy, the result is checked
//! against the hashcode the server sends with it (its counts of instances by status); if they
//! differ (a change missed, a server that is not the one read before), the whole registry is
//! read again. So is it when the copy is older than [`MAX_DELTA_GAP`], half the delta's
//! retention, after which a delta could have lost changes.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::{ClientError, EurekaClient};
use crate::model::{ActionType, Applications, Instance, hashcode};

/// How old the copy may be for a delta to bring it up to date: half the 180 s a delta
/// covers on Eureka's servers and ours.
pub(super) const MAX_DELTA_GAP: Duration = Duration::from_secs(90);

/// Every instance read, by (application, instance id).
#[derive(Debug, Default)]
pub(super) struct Held {
    instances: BTreeMap<(String, String), Instance>,
    fetched_at: Option<Instant>,
}

/// How the copy was brought up to date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fetched {
    Delta,
    Full,
}

impl Held {
    pub(super) fn instances(&self) -> impl Iterator<Item = &Instance> {
        self.instances.values()
    }

    fn key(i: &Instance) -> (String, String) {
        (i.app.clone(), i.id().to_owned())
    }

    fn replace(&mut self, full: Applications) {
        self.instances = full
            .applications
            .into_iter()
            .flat_map(|a| a.instances)
            .map(|i| (Self::key(&i), i))
            .collect();
    }

    /// Applies a delta; false if the result disagrees with the server's hashcode.
    fn apply(&mut self, delta: Applications) -> bool {
        let hash = delta.apps_hashcode.clone();
        for i in delta.applications.into_iter().flat_map(|a| a.instances) {
            match i.action_type {
                Some(ActionType::Deleted) => {
                    self.instances.remove(&Self::key(&i));
                }
                _ => {
                    self.instances.insert(Self::key(&i), i);
                }
            }
        }
        hashcode(self.instances.values()) == hash
    }

    /// Brings the copy up to date: by a delta when it is recent enough and the delta agrees,
    /// else by reading the whole registry. On an error the copy is as it was (or half
    /// updated by a delta that disagreed, which the next fetch reads whole).
    pub(super) async fn fetch(&mut self, client: &EurekaClient) -> Result<Fetched, ClientError> {
        let now = Instant::now();
        let recent = self
            .fetched_at
            .is_some_and(|t| now.saturating_duration_since(t) < MAX_DELTA_GAP);
        if recent {
            if self.apply(client.delta().await?) {
                self.fetched_at = Some(now);
                return Ok(Fetched::Delta);
            }
            tracing::debug!("the delta disagrees with the server's hashcode: reading it whole");
            self.fetched_at = None;
        }
        self.replace(client.applications().await?);
        self.fetched_at = Some(now);
        Ok(Fetched::Full)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(id: &str, action: ActionType) -> Instance {
        let mut i = Instance::new("a", "h", 1).with_id(id);
        i.action_type = Some(action);
        i
    }

    #[test]
    fn a_delta_adds_replaces_and_removes_and_is_checked_against_the_hashcode() {
        let mut held = Held::default();
        held.replace(Applications::group(
            "1",
            "",
            [change("x", ActionType::Added)],
        ));
        let mut down = change("x", ActionType::Modified);
        down.status = crate::model::Status::Down;
        let delta =
            Applications::group("2", "DOWN_1_UP_1_", [down, change("y", ActionType::Added)]);
        assert!(held.apply(delta));
        let gone = Applications::group("3", "DOWN_1_", [change("y", ActionType::Deleted)]);
        assert!(held.apply(gone));
        assert_eq!(
            held.instances().map(Instance::id).collect::<Vec<_>>(),
            ["x"]
        );
        let missed = Applications::group("4", "DOWN_1_UP_1_", []);
        assert!(!held.apply(missed), "a change this copy missed");
    }
}
