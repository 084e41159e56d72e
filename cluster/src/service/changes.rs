//! What changed between two descriptions of a service, and which changes break clients: the
//! check a team runs in CI against the description of the last release
//! (`docs/compatibility.md`, `cluster-node compat OLD.json NEW.json`).

use std::fmt;

use super::shape::Mismatch;
use super::{FunctionDescription, ServiceDescription};

/// One difference between an old and a new description.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// New has a function old lacks: additive (its clients are routed to new providers only).
    Added {
        /// The function.
        function: String,
    },
    /// Old has a function new lacks: clients of old get `NoFunction` once only new providers
    /// are left.
    Removed {
        /// The function.
        function: String,
    },
    /// The shape changed, and each side can still call the other (an optional field added).
    Compatible {
        /// The function.
        function: String,
        /// Old canonical shape (the signature text without one).
        old: String,
        /// New canonical shape (the signature text without one).
        new: String,
    },
    /// Clients of old cannot call providers of new.
    BreaksOldClients {
        /// The function.
        function: String,
        /// Where (client: old, provider: new).
        mismatch: Mismatch,
    },
    /// Clients of new cannot call providers of old: rolling providers back breaks them.
    BreaksRollback {
        /// The function.
        function: String,
        /// Where (client: new, provider: old).
        mismatch: Mismatch,
    },
    /// Old clients' version requirement excludes the new version: they call no new provider.
    Version {
        /// Old clients' requirement.
        requirement: String,
        /// The new version.
        new: String,
    },
    /// The function is no longer idempotent: clients stop retrying it after it may have run.
    /// Not breaking (the provider decides how it wants to be called), but a change of behaviour.
    NoLongerIdempotent {
        /// The function.
        function: String,
    },
}

impl Change {
    /// Whether clients that worked before fail after it (on deploy or on rollback).
    pub fn is_breaking(&self) -> bool {
        matches!(
            self,
            Change::Removed { .. }
                | Change::BreaksOldClients { .. }
                | Change::BreaksRollback { .. }
                | Change::Version { .. }
        )
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let label = if self.is_breaking() {
            "breaking"
        } else {
            "compatible"
        };
        write!(f, "{label}: ")?;
        match self {
            Change::Added { function } => write!(f, "`{function}` added"),
            Change::Removed { function } => write!(f, "`{function}` removed"),
            Change::Compatible { function, old, new } => {
                write!(f, "`{function}` changed compatibly: `{old}` -> `{new}`")
            }
            Change::BreaksOldClients { function, mismatch } => write!(
                f,
                "old clients cannot call `{function}` on new providers: {mismatch}"
            ),
            Change::BreaksRollback { function, mismatch } => write!(
                f,
                "new clients cannot call `{function}` on old providers (rollback): {mismatch}"
            ),
            Change::Version { requirement, new } => write!(
                f,
                "old clients require {requirement}, which excludes version {new}"
            ),
            Change::NoLongerIdempotent { function } => {
                write!(
                    f,
                    "`{function}` is no longer idempotent: no retry once it may have run"
                )
            }
        }
    }
}

/// Every difference between `old` and `new` that matters to callers, breaking or not, in the
/// order of the functions.
pub fn changes(old: &ServiceDescription, new: &ServiceDescription) -> Vec<Change> {
    let mut found = Vec::new();
    let requirement = old.requirement();
    if !requirement.matches(&new.version) {
        found.push(Change::Version {
            requirement: requirement.to_string(),
            new: new.version.to_string(),
        });
    }
    for before in &old.functions {
        let Some(after) = named(new, &before.name) else {
            found.push(Change::Removed {
                function: before.name.clone(),
            });
            continue;
        };
        let function = before.name.clone();
        let upgrade = before.calls(after);
        let rollback = after.calls(before);
        if let Err(mismatch) = &upgrade {
            found.push(Change::BreaksOldClients {
                function: function.clone(),
                mismatch: mismatch.clone(),
            });
        }
        if let Err(mismatch) = &rollback {
            found.push(Change::BreaksRollback {
                function: function.clone(),
                mismatch: mismatch.clone(),
            });
        }
        if upgrade.is_ok() && rollback.is_ok() && before.hash() != after.hash() {
            found.push(Change::Compatible {
                function: function.clone(),
                old: canonical(before),
                new: canonical(after),
            });
        }
        if before.idempotent && !after.idempotent {
            found.push(Change::NoLongerIdempotent { function });
        }
    }
    for after in &new.functions {
        if named(old, &after.name).is_none() {
            found.push(Change::Added {
                function: after.name.clone(),
            });
        }
    }
    found
}

/// The changes from `old` to `new` that break clients: of `old` when providers run `new`, or
/// of `new` when providers are rolled back to `old`.
pub fn breaking_changes(old: &ServiceDescription, new: &ServiceDescription) -> Vec<Change> {
    changes(old, new)
        .into_iter()
        .filter(Change::is_breaking)
        .collect()
}

fn canonical(function: &FunctionDescription) -> String {
    function
        .shape
        .as_ref()
        .map_or_else(|| function.signature.clone(), ToString::to_string)
}

fn named<'a>(description: &'a ServiceDescription, name: &str) -> Option<&'a FunctionDescription> {
    description.functions.iter().find(|f| f.name == name)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;
    use crate::options::CallOptions;
    use crate::service::shape::{FunctionShape, trace};
    use crate::service::version;

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct HitV20 {
        id: u64,
        title: String,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct HitV21 {
        id: u64,
        title: String,
        score: Option<f32>,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct HitRenamed {
        id: u64,
        name: String,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct HitRetyped {
        id: u32,
        title: String,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct HitTextId {
        id: String,
        title: String,
    }

    fn function<T: serde::de::DeserializeOwned>(name: &str, written: &str) -> FunctionDescription {
        FunctionDescription::new(name, &format!("{name}(String) -> {written}"), true, {
            CallOptions::new()
        })
        .with_shape(FunctionShape::new(
            vec![trace::<String>("String")],
            trace::<Vec<T>>(written),
        ))
    }

    fn service(minor: u64, functions: Vec<FunctionDescription>) -> ServiceDescription {
        ServiceDescription::new(
            "search",
            version(2, minor, 0, "", ""),
            None,
            CallOptions::new(),
            functions,
        )
    }

    #[test]
    fn an_added_option_field_is_compatible_both_ways() {
        let old = function::<HitV20>("search", "Vec<Hit>");
        let new = function::<HitV21>("search", "Vec<Hit>");
        assert_eq!(old.calls(&new), Ok(()));
        assert_eq!(new.calls(&old), Ok(()));
        assert_ne!(old.hash(), new.hash());
        let found = changes(&service(0, vec![old]), &service(1, vec![new]));
        assert_eq!(
            found.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "compatible: `search` changed compatibly: `(str) -> [{id: u64, title: str}]` -> \
              `(str) -> [{id: u64, title: str, score?: option<f32>}]`"
            ]
        );
    }

    #[test]
    fn a_renamed_field_is_incompatible() {
        let old = function::<HitV20>("search", "Vec<Hit>");
        let new = function::<HitRenamed>("search", "Vec<Hit>");
        let mismatch = old.calls(&new).unwrap_err();
        assert_eq!(
            mismatch.to_string(),
            "the result, the items, field `title`: the client has str (required), the provider none"
        );
        let found = breaking_changes(&service(0, vec![old]), &service(1, vec![new]));
        assert_eq!(found.len(), 2, "{found:?}");
    }

    #[test]
    fn a_changed_field_type_is_incompatible_and_named() {
        let old = function::<HitV20>("search", "Vec<Hit>");
        let new = function::<HitTextId>("search", "Vec<Hit>");
        let mismatch = old.calls(&new).unwrap_err();
        assert_eq!(mismatch.at, "the result, the items, field `id`");
        assert_eq!(
            (mismatch.client.as_str(), mismatch.provider.as_str()),
            ("u64", "str")
        );
    }

    #[test]
    fn a_wider_integer_reads_a_narrower_one_not_the_reverse() {
        let narrow = function::<HitRetyped>("search", "Vec<Hit>");
        let wide = function::<HitV20>("search", "Vec<Hit>");
        // The provider writes u32 ids, the client reads u64: every value fits.
        assert_eq!(wide.calls(&narrow), Ok(()));
        let found = breaking_changes(&service(0, vec![narrow]), &service(1, vec![wide]));
        // Old clients read u32 and new providers write u64: a large id would not fit.
        assert!(
            matches!(found.as_slice(), [Change::BreaksOldClients { .. }]),
            "{found:?}"
        );
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    enum StateV1 {
        Idle,
        Busy,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    enum StateV2 {
        Idle,
        Busy,
        Draining,
    }

    #[test]
    fn a_variant_added_to_a_result_breaks_old_clients_not_a_rollback() {
        let old = function::<StateV1>("state", "Vec<State>");
        let new = function::<StateV2>("state", "Vec<State>");
        let found = breaking_changes(&service(0, vec![old]), &service(1, vec![new]));
        let [Change::BreaksOldClients { mismatch, .. }] = found.as_slice() else {
            panic!("{found:?}");
        };
        assert_eq!(
            mismatch.to_string(),
            "the result, the items, variant `Draining`: the client has none, the provider it"
        );
    }

    #[test]
    fn removed_and_added_functions_and_the_version() {
        let old = service(0, vec![function::<HitV20>("search", "Vec<Hit>")]);
        let mut new = service(1, vec![function::<HitV20>("find", "Vec<Hit>")]);
        let found: Vec<String> = changes(&old, &new).iter().map(|c| c.to_string()).collect();
        assert_eq!(
            found,
            ["breaking: `search` removed", "compatible: `find` added"]
        );
        new.version = version(3, 0, 0, "", "");
        assert!(matches!(
            breaking_changes(&old, &new).first(),
            Some(Change::Version { .. })
        ));
    }

    #[test]
    fn a_description_survives_json() {
        let old = service(0, vec![function::<HitV21>("search", "Vec<Hit>")]);
        assert_eq!(ServiceDescription::from_json(&old.to_json()).unwrap(), old);
    }
}
