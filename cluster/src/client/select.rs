//! Step 1 of the call path: which provider gets this attempt.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use semver::Version;

use super::ClientCore;
use super::peers::{Load, Peer};
use super::route::{Route, Routed};
use crate::error::Reason;
use crate::options::{CallOptions, ResolvedOptions, Source};
use crate::registry::ServiceEntry;

/// A provider chosen for one attempt, with the index of the function in its description.
pub(crate) struct Chosen {
    pub(crate) entry: Arc<ServiceEntry>,
    pub(crate) function: usize,
    /// The peer's state, when the choice came from a kept route (else looked up per attempt).
    pub(crate) peer: Option<Arc<Peer>>,
    /// The options merged for it without the call's overrides, when it came from a route.
    pub(crate) options: Option<ResolvedOptions>,
}

/// Why no provider could be chosen.
pub(crate) struct Miss {
    pub(crate) reason: Reason,
    pub(crate) detail: String,
    pub(crate) available: Vec<Version>,
}

/// At most this share of a service's replicas is passed over for being ejected; past it, those
/// whose ejection ends soonest are called again. Never all of them.
const MAX_EJECTED_SHARE: f64 = 0.5;

/// One provider a call could go to, and what this node has seen of it.
struct Candidate<'e> {
    entry: &'e Arc<ServiceEntry>,
    function: usize,
    load: Load,
    failed_here: bool,
}

/// Picks a provider of the client's service for `function` from the local registry copy.
///
/// Eligible: version within the client's requirement, the function present with the same
/// signature, a wire version in common with this node, not `excluded` in this call (it refused
/// for a wire reason), and, with `newest_only`, the newest such version. Replicas failing their
/// health check are passed over, unless more than half the eligible ones fail (the panic
/// threshold, `NodeBuilder::panic_threshold`: then all are called, and a WARN says so). Among
/// those it prefers, in this order, providers that have neither failed in this call (`avoid`)
/// nor been ejected lately (failure accrual, at most half of them) nor are on a node the
/// registry suspects (silent lately, not yet dead), then those that have not failed in this
/// call, then any.
/// Within the preferred ones it takes two in turn, the turn shared by every client of the
/// service on this node, and sends to the one with fewer requests outstanding (power of two
/// choices; turns rather than random picks, so that a quiet client spreads its calls exactly
/// evenly).
///
/// A call's first attempt takes the client's kept route for the function instead, while the
/// registry and the peers' ejections have not changed since it was kept (`route.rs`); the
/// full choice keeps a new one whenever it finds no replica ejected or failing past the
/// panic threshold.
pub(crate) fn choose(
    client: &ClientCore,
    function: usize,
    avoid: &[Arc<ServiceEntry>],
    excluded: &[String],
    overrides: &CallOptions,
) -> Result<Chosen, Miss> {
    // Read before the lookup and the loads: a change after these reads moves the stamps.
    let registry = client.node.registry.local_copy().generation();
    let routable = avoid.is_empty() && excluded.is_empty() && overrides.newest_only.is_none();
    if routable && let Some(chosen) = client.routes.choose(client, function, registry) {
        return Ok(chosen);
    }
    let ejections = client.node.peers.ejections();
    let wanted = &client.description.functions[function];
    // The local copy itself, whose generation stamps the kept routes (`route.rs`).
    let entries = client
        .node
        .registry
        .local_copy()
        .lookup(&client.description.name);
    let peers = &client.node.peers;
    let mut candidates: Vec<Candidate<'_>> = entries
        .iter()
        .filter(|e| client.requirement.matches(&e.description.version))
        .filter(|e| speaks_with(client, e) && !excluded.contains(&e.node.name))
        .filter_map(|e| {
            let (index, _) = e.description.find_compatible(wanted)?;
            Some(Candidate {
                entry: e,
                function: index,
                load: peers.load(e.node.addr, e.node.generation),
                failed_here: avoid.iter().any(|a| a.node == e.node),
            })
        })
        .collect();
    let newest_only = overrides
        .newest_only
        .or(client.defaults.newest_only)
        .unwrap_or(false);
    if newest_only
        && let Some(newest) = candidates
            .iter()
            .map(|c| c.entry.description.version.clone())
            .max()
    {
        candidates.retain(|c| c.entry.description.version == newest);
    }
    let panicked = pass_over_failing(client, &mut candidates);
    let none_ejected = candidates
        .iter()
        .all(|c| c.load.ejected_until.is_none() && !c.entry.suspect);
    if routable && !panicked && none_ejected {
        keep_route(client, function, &candidates, registry, ejections);
    }
    cap_ejections(&mut candidates);
    // A suspect node (silent lately, not yet dead) ranks with an ejected one: a last resort.
    let rank = |c: &Candidate<'_>| {
        let doubted = c.load.ejected_until.is_some() || c.entry.suspect;
        match (c.failed_here, doubted) {
            (false, false) => 0,
            (false, true) => 1,
            (true, _) => 2,
        }
    };
    let Some(best) = candidates.iter().map(rank).min() else {
        return Err(miss(client, &entries, function, excluded));
    };
    candidates.retain(|c| rank(c) == best);

    let count = candidates.len();
    // A call's first choice takes the next turn; its retries read the turn without moving it,
    // so a replica that refuses every call does not get the next call's first attempt too.
    let turn = if avoid.is_empty() && excluded.is_empty() {
        client.turn.fetch_add(1, Ordering::Relaxed)
    } else {
        client.turn.load(Ordering::Relaxed)
    } % count;
    let first = &candidates[turn];
    let second = &candidates[(turn + 1) % count];
    let chosen = if second.load.outstanding < first.load.outstanding {
        second
    } else {
        first
    };
    Ok(Chosen {
        entry: chosen.entry.clone(),
        function: chosen.function,
        peer: None,
        options: None,
    })
}

/// Keeps the eligible `candidates` as the client's route for `function`, each with its peer and
/// its options merged, under the stamps read before they were found.
fn keep_route(
    client: &ClientCore,
    function: usize,
    candidates: &[Candidate<'_>],
    registry: u64,
    ejections: u64,
) {
    let routed = candidates
        .iter()
        .map(|c| Routed {
            entry: c.entry.clone(),
            function: c.function,
            peer: client
                .node
                .peers
                .get(c.entry.node.addr, c.entry.node.generation),
            options: ResolvedOptions::merge(&[
                (Source::ProviderService, &c.entry.description.options),
                (
                    Source::ProviderFunction,
                    &c.entry.description.functions[c.function].options,
                ),
                (Source::Client, &client.defaults),
            ]),
        })
        .collect();
    client.routes.keep(
        function,
        Route {
            registry,
            ejections,
            candidates: routed,
        },
    );
}

/// Drops the replicas that fail their health check, unless more than the panic threshold's
/// share of them do (`NodeBuilder::panic_threshold`, half by default): then keeps them all and
/// says so (true).
fn pass_over_failing(client: &ClientCore, candidates: &mut Vec<Candidate<'_>>) -> bool {
    let failing = candidates.iter().filter(|c| c.entry.failing).count();
    if failing == 0 {
        return false;
    }
    let threshold = client.node.peers.panic_threshold;
    if failing as f64 <= candidates.len() as f64 * threshold {
        candidates.retain(|c| !c.entry.failing);
        return false;
    }
    let service = &client.description.name;
    if client.node.peers.panic_line_due(service) {
        tracing::warn!(
            "{failing} of {} replicas of {service} fail their health check: more than the panic \
             threshold ({:.0} %), so all are called; a check that fails everywhere at once is \
             more often a shared dependency or the check itself than every replica",
            candidates.len(),
            threshold * 100.0
        );
    }
    true
}

/// Calls again, as if not ejected, the replicas ejected past [`MAX_EJECTED_SHARE`] whose
/// ejection ends soonest.
fn cap_ejections(candidates: &mut [Candidate<'_>]) {
    let allowed = (candidates.len() as f64 * MAX_EJECTED_SHARE).floor() as usize;
    let mut ejected: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].load.ejected_until.is_some())
        .collect();
    if ejected.len() <= allowed {
        return;
    }
    ejected.sort_by_key(|&i| candidates[i].load.ejected_until);
    for &i in &ejected[..ejected.len() - allowed] {
        candidates[i].load.ejected_until = None;
    }
}

/// Whether the entry's node and this one have a wire version in common.
fn speaks_with(client: &ClientCore, entry: &ServiceEntry) -> bool {
    crate::transport::wire::common(&client.node.wire, &entry.node.wire_versions()).is_some()
}

fn miss(
    client: &ClientCore,
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
    if serving.iter().all(|e| e.failing) {
        return Miss {
            reason: Reason::NoService,
            detail: format!(
                "every provider of `{}` ({} in all) fails its health check, and this node's \
                 panic_threshold passes every one over",
                wanted.name,
                serving.len()
            ),
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
