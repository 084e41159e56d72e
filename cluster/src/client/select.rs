//! Step 1 of the call path: which provider gets this attempt.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use semver::Version;

use super::Client;
use crate::error::Reason;
use crate::options::CallOptions;
use crate::registry::ServiceEntry;

/// A provider chosen for one attempt, with the index of the function in its description.
pub(crate) struct Chosen {
    pub(crate) entry: Arc<ServiceEntry>,
    pub(crate) function: usize,
}

/// Which candidates to try first: a predicate over entries.
type Tier<'a> = &'a dyn Fn(&Arc<ServiceEntry>) -> bool;

/// Why no provider could be chosen.
pub(crate) struct Miss {
    pub(crate) reason: Reason,
    pub(crate) detail: String,
    pub(crate) available: Vec<Version>,
}

/// Picks a provider of the client's service for `function` from the local registry copy.
///
/// Eligible: version within the client's requirement, the function present with the same
/// signature (and, with `newest_only`, the newest such version). Among those it prefers, in
/// this order, providers that have neither failed in this call (`avoid`) nor lost a connection
/// lately (outlier ejection), then those that have not failed in this call, then any. Within
/// the preferred ones it takes two in turn and sends to the one with fewer requests
/// outstanding (power of two choices; turns rather than random picks, so that a quiet client
/// spreads its calls exactly evenly).
pub(crate) fn choose(
    client: &Client,
    function: usize,
    avoid: &[Arc<ServiceEntry>],
    overrides: &CallOptions,
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
    let newest_only = overrides
        .newest_only
        .or(client.defaults.newest_only)
        .unwrap_or(false);
    let newest = match newest_only {
        true => entries
            .iter()
            .filter(|e| provides(e).is_some())
            .map(|e| &e.description.version)
            .max(),
        false => None,
    };
    let eligible = |e: &&Arc<ServiceEntry>| {
        provides(e).is_some() && newest.is_none_or(|v| &e.description.version == v)
    };
    let fresh = |e: &Arc<ServiceEntry>| !avoid.iter().any(|a| a.node == e.node);
    let healthy = |e: &Arc<ServiceEntry>| !client.node.peers.is_ejected(e.node.addr);

    let tiers: [Tier<'_>; 3] = [&|e| fresh(e) && healthy(e), &fresh, &|_| true];
    for tier in tiers {
        let count = entries.iter().filter(eligible).filter(|e| tier(e)).count();
        if count == 0 {
            continue;
        }
        let mut candidates = entries.iter().filter(eligible).filter(|e| tier(e));
        let turn = client.turn.fetch_add(1, Ordering::Relaxed) % count;
        let first = candidates.clone().nth(turn).expect("counted above");
        let entry = if count > 1 {
            let second = candidates.nth((turn + 1) % count).expect("counted above");
            let peers = &client.node.peers;
            if peers.outstanding(second.node.addr) < peers.outstanding(first.node.addr) {
                second
            } else {
                first
            }
        } else {
            first
        };
        let function = provides(entry).expect("eligible");
        return Ok(Chosen {
            entry: entry.clone(),
            function,
        });
    }
    Err(miss(client, &entries, function))
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
