//! Step 1 of the call path: which provider gets this attempt.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use semver::Version;

use super::Client;
use crate::error::Reason;
use crate::registry::ServiceEntry;

/// A provider chosen for one attempt, with the index of the function in its description.
pub(crate) struct Chosen {
    pub(crate) entry: Arc<ServiceEntry>,
    pub(crate) function: usize,
}

/// Why no provider could be chosen.
pub(crate) struct Miss {
    pub(crate) reason: Reason,
    pub(crate) detail: String,
    pub(crate) available: Vec<Version>,
}

/// Picks a provider of the client's service for `function` from the local registry: version
/// within the client's requirement, the function present with the same signature; among those,
/// one that has not failed in this call (`avoid`) if there is one, taking turns between equals.
pub(crate) fn choose(
    client: &Client,
    function: usize,
    avoid: &[Arc<ServiceEntry>],
) -> Result<Chosen, Miss> {
    let wanted = &client.description.functions[function];
    let entries = client.node.registry.lookup(&client.description.name);
    let provides = |e: &ServiceEntry| -> Option<usize> {
        if !client.requirement.matches(&e.description.version) {
            return None;
        }
        e.description
            .function(&wanted.name, &wanted.signature)
            .map(|(i, _)| i)
    };
    let fresh =
        |e: &Arc<ServiceEntry>| !avoid.iter().any(|a| Arc::ptr_eq(a, e) || a.node == e.node);

    let eligible = entries.iter().filter(|e| provides(e).is_some());
    let (count, prefer_fresh) = {
        let fresh_count = eligible.clone().filter(|e| fresh(e)).count();
        if fresh_count > 0 {
            (fresh_count, true)
        } else {
            (eligible.clone().count(), false)
        }
    };
    if count == 0 {
        return Err(miss(client, &entries, function));
    }
    let turn = client.turn.fetch_add(1, Ordering::Relaxed) % count;
    let entry = eligible
        .filter(|e| !prefer_fresh || fresh(e))
        .nth(turn)
        .expect("counted above");
    let function = provides(entry).expect("filtered above");
    Ok(Chosen {
        entry: entry.clone(),
        function,
    })
}

fn miss(client: &Client, entries: &[Arc<ServiceEntry>], function: usize) -> Miss {
    let name = &client.description.name;
    let wanted = &client.description.functions[function];
    if entries.is_empty() {
        return Miss {
            reason: Reason::NoService,
            detail: format!("no entry named `{name}` in the registry"),
            available: vec![],
        };
    }
    let mut available: Vec<Version> = entries
        .iter()
        .map(|e| e.description.version.clone())
        .collect();
    available.sort();
    available.dedup();
    if !entries
        .iter()
        .any(|e| client.requirement.matches(&e.description.version))
    {
        return Miss {
            reason: Reason::NoVersion,
            detail: String::new(),
            available,
        };
    }
    Miss {
        reason: Reason::NoFunction,
        detail: format!("wanted `{}`", wanted.signature),
        available,
    }
}
