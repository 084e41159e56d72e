//! Every metric a node records: its name, what it means, its labels. `docs/operations.md`,
//! "Metrics", lists the same; a test reads this list against a scrape
//! (`tests/metrics/`).

/// One metric: its name, Prometheus type and help line.
pub(crate) struct Name {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    pub(crate) help: &'static str,
}

/// The metric's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
}

const fn counter(name: &'static str, help: &'static str) -> Name {
    Name {
        name,
        kind: Kind::Counter,
        help,
    }
}

const fn gauge(name: &'static str, help: &'static str) -> Name {
    Name {
        name,
        kind: Kind::Gauge,
        help,
    }
}

const fn histogram(name: &'static str, help: &'static str) -> Name {
    Name {
        name,
        kind: Kind::Histogram,
        help,
    }
}

// The caller's side, labelled `service` and `function`.
pub(crate) const CALLS: Name = counter(
    "cluster_calls_total",
    "Calls started by this node, per service and function.",
);
pub(crate) const CALL_OUTCOMES: Name = counter(
    "cluster_call_outcomes_total",
    "Calls ended, by outcome: ok, app_error, dropped (the caller dropped the call), or the error's kind.",
);
pub(crate) const ATTEMPTS: Name = counter(
    "cluster_call_attempts_total",
    "Attempts sent by ended calls: first attempts, retries and hedges.",
);
pub(crate) const RETRIES: Name = counter(
    "cluster_call_retries_total",
    "Retries sent by ended calls (to another provider, or to the process an at-most-once call may have run on).",
);
pub(crate) const HEDGES: Name = counter(
    "cluster_call_hedges_total",
    "Hedged copies sent by ended calls.",
);
pub(crate) const BUDGET_EXHAUSTED: Name = counter(
    "cluster_call_budget_exhausted_total",
    "Calls that failed because their budget left no time for another attempt.",
);
pub(crate) const CALLS_IN_FLIGHT: Name = gauge(
    "cluster_calls_in_flight",
    "Calls running now on this node as a caller.",
);
pub(crate) const CALL_DURATION: Name = histogram(
    "cluster_call_duration_seconds",
    "Time from a call's start to its end (every outcome but dropped), all attempts and pauses included.",
);

// The provider's side, labelled `service` and `function`.
pub(crate) const REQUESTS: Name = counter(
    "cluster_requests_total",
    "Requests this node served or refused after finding their function, by outcome.",
);
pub(crate) const HANDLER_DURATION: Name = histogram(
    "cluster_handler_duration_seconds",
    "Time a handler ran, from admission to its reply (or until it was stopped).",
);
pub(crate) const ADMISSION_REFUSALS: Name = counter(
    "cluster_admission_refusals_total",
    "Requests refused before they ran, by reason: overloaded or draining.",
);

// The node's own.
pub(crate) const EJECTIONS: Name = counter(
    "cluster_outlier_ejections_total",
    "Peers this node ejected from its routing (failures in a row, or an unreachable peer).",
);
pub(crate) const CONNECTIONS: Name = gauge(
    "cluster_connections",
    "Open connections: `in` established by callers to this node, `out` pooled to providers.",
);
pub(crate) const REGISTRY_NODES: Name = gauge(
    "cluster_registry_nodes",
    "Nodes in this node's registry copy.",
);
pub(crate) const REGISTRY_SERVICES: Name = gauge(
    "cluster_registry_services",
    "Service names in this node's registry copy.",
);
pub(crate) const REGISTRY_ENTRIES: Name = gauge(
    "cluster_registry_entries",
    "Service entries (one per provider) in this node's registry copy.",
);
pub(crate) const REGISTRY_EVENTS: Name = counter(
    "cluster_registry_events_total",
    "Changes of this node's registry copy, by kind: node_up, node_down, service_up, service_down.",
);
pub(crate) const GOSSIP_BYTES: Name = counter(
    "cluster_gossip_bytes_total",
    "Gossip bytes on the wire, by direction: sent, received (a gossip registry only).",
);
pub(crate) const GOSSIP_DATAGRAMS: Name = counter(
    "cluster_gossip_datagrams_total",
    "Gossip datagrams, by direction: sent, received (a gossip registry only).",
);

pub(crate) const GOSSIP_FORGED: Name = counter(
    "cluster_gossip_forged_updates_total",
    "Gossip updates about a node that it did not sign or could not have sent, refused (a gossip registry only).",
);
pub(crate) const GOSSIP_DEFERRED: Name = counter(
    "cluster_gossip_deferred_updates_total",
    "Gossip updates left for a later round: their sender's budget for checking signatures was spent (a gossip registry only).",
);

/// Every metric, in the order `docs/operations.md` lists them.
pub(crate) const ALL: &[Name] = &[
    CALLS,
    CALL_OUTCOMES,
    ATTEMPTS,
    RETRIES,
    HEDGES,
    BUDGET_EXHAUSTED,
    CALLS_IN_FLIGHT,
    CALL_DURATION,
    REQUESTS,
    HANDLER_DURATION,
    ADMISSION_REFUSALS,
    EJECTIONS,
    CONNECTIONS,
    REGISTRY_NODES,
    REGISTRY_SERVICES,
    REGISTRY_ENTRIES,
    REGISTRY_EVENTS,
    GOSSIP_BYTES,
    GOSSIP_DATAGRAMS,
    GOSSIP_FORGED,
    GOSSIP_DEFERRED,
];
