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

/// Why no provider could be chosen.
pub(crate) struct Miss {
    pub(crate) reason: Reason,
    pub(crate) detail: String,
    pub(crate) available: Vec<Version>,
}

/// Picks a provider of the client's service for `function` from the local registry copy.
///
/// Eligible: version within the client's requirement, the function present with the same
/// signature, a wire version in common with this node, not `excluded` in this call (it refused
/// for a wire reason), and, with `newest_only`, the newest such version. Among those it prefers, in
/// this order, providers that have neither failed in this call (`avoid`) nor lost a connection
/// lately (outlier ejection), then those that have not failed in this call, then any. Within
/// the preferred ones it takes two in turn and sends to the one with fewer requests
/// outstanding (power of two choices; turns rather than random picks, so that a quiet client
/// spreads its calls exactly evenly).
pub(crate) fn choose(
    client: &Client,
    function: usize,
    avoid: &[Arc<ServiceEntry>],
    excluded: &[String],
    overrides: &CallOptions,
) -> Result<Chosen, Miss> {
    let wanted = &client.description.functions[function];
    let entries = client.node.registry.lookup(&client.description.name);
    // Each entry is judged once: (entry, its index of the function, preference rank 0..=2).
    let mut eligible: Vec<(&Arc<ServiceEntry>, usize, u8)> = entries
        .iter()
        .filter(|e| client.requirement.matches(&e.description.version))
        .filter(|e| speaks_with(client, e) && !excluded.contains(&e.node.name))
        .filter_map(|e| {
            let (index, _) = e.description.find_compatible(wanted)?;
            let failed_here = avoid.iter().any(|a| a.node == e.node);
            let rank = match (failed_here, client.node.peers.is_ejected(e.node.addr)) {
                (false, false) => 0,
                (false, true) => 1,
                (true, _) => 2,
            };
            Some((e, index, rank))
        })
        .collect();
    let newest_only = overrides
        .newest_only
        .or(client.defaults.newest_only)
        .unwrap_or(false);
    if newest_only
        && let Some(newest) = eligible
            .iter()
            .map(|(e, ..)| e.description.version.clone())
            .max()
    {
        eligible.retain(|(e, ..)| e.description.version == newest);
    }
    let Some(best) = eligible.iter().map(|(.., rank)| *rank).min() else {
        return Err(miss(client, &entries, function, excluded));
    };
    eligible.retain(|(.., rank)| *rank == best);

    let count = eligible.len();
    let turn = client.turn.fetch_add(1, Ordering::Relaxed) % count;
    let first = eligible[turn];
    let second = eligible[(turn + 1) % count];
    let peers = &client.node.peers;
    let (entry, index, _) = if count > 1
        && peers.outstanding(second.0.node.addr) < peers.outstanding(first.0.node.addr)
    {
        second
    } else {
        first
    };
    Ok(Chosen {
        entry: entry.clone(),
        function: index,
    })
}

/// Whether the entry's node and this one have a wire version in common.
fn speaks_with(client: &Client, entry: &ServiceEntry) -> bool {
    crate::transport::wire::common(&client.node.wire, &entry.node.wire_versions()).is_some()
}

fn miss(
    client: &Client,
    entries: &[Arc<ServiceEntry>],
    function: usize,
    excluded: &[String],
) -> Miss {
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
    let serving: Vec<&Arc<ServiceEntry>> = entries
        .iter()
        .filter(|e| client.requirement.matches(&e.description.version))
        .filter(|e| e.description.find_compatible(wanted).is_some())
        .collect();
    if serving.is_empty() {
        return Miss {
            reason: Reason::NoFunction,
            detail: super::report::function_miss(wanted, entries, &client.requirement),
            available,
        };
    }
    // Providers of the function exist, but none this node can talk to.
    let spoken: Vec<String> = serving
        .iter()
        .map(|e| {
            let v = e.node.wire_versions();
            let refused = if excluded.contains(&e.node.name) {
                ", refused this call's wire"
            } else {
                ""
            };
            format!(
                "{} speaks {}..={}{refused}",
                e.node.name,
                v.start(),
                v.end()
            )
        })
        .collect();
    Miss {
        reason: Reason::WireVersion,
        detail: format!(
            "this node speaks wire versions {}..={}; {}",
            client.node.wire.start(),
            client.node.wire.end(),
            spoken.join(", ")
        ),
        available,
    }
}
