//! The live dashboard a node serves at `/` of its admin endpoint (`NodeBuilder::metrics`): the
//! cluster as this node's registry copy holds it, its calls and requests per function, and the
//! registry's recent events. Server-rendered HTML that refreshes itself every few seconds, with
//! no script; behind the endpoint's own authentication (mutual TLS with a certificate of the
//! cluster's CA, or plaintext asked for by name). `docs/operations.md`, "The dashboard".
//!
//! 1. **What it shows** (`html.rs`): nodes (address, generation, wire versions, state),
//!    services (versions, providers, health), calls per second and the share that failed per
//!    function, as a caller and as a provider (`rates.rs`, over the last minute), and the last
//!    [`MAX_EVENTS`] registry events.
//! 2. **Escaping**: every name on the page comes from the registry, which any member of the
//!    cluster writes to; all of it is escaped (`html::escape`), and the page is served with a
//!    content security policy that allows no script at all.
//! 3. **What it keeps**: [`MAX_EVENTS`] events and a minute of per-function counts, sampled at
//!    the metrics' upkeep (every 5 s); nothing a request can grow.

mod html;
pub(crate) mod rates;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::time::Instant;

use crate::registry::{NodeInfo, RegistryEvent, ServiceEntry};

pub(crate) use html::page;

/// Registry events the dashboard keeps.
pub(crate) const MAX_EVENTS: usize = 50;

/// What the dashboard remembers between requests.
#[derive(Default)]
pub(crate) struct Dashboard {
    events: Mutex<VecDeque<(SystemTime, RegistryEvent)>>,
    history: Mutex<rates::History>,
}

impl Dashboard {
    /// Keeps `event`, forgetting the oldest past [`MAX_EVENTS`].
    pub(crate) fn event(&self, event: RegistryEvent) {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if events.len() == MAX_EVENTS {
            events.pop_back();
        }
        events.push_front((SystemTime::now(), event));
    }

    /// Keeps the per-function counts of the metrics text `metrics`, for rates.
    pub(crate) fn sample(&self, metrics: &str) {
        let sample = rates::parse(metrics);
        self.history
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keep(Instant::now(), sample);
    }
}

/// What one page shows: the node's state now.
pub(crate) struct View<'a> {
    /// The node serving the page.
    pub(crate) node: &'a NodeInfo,
    /// The nodes in its registry copy.
    pub(crate) nodes: Vec<NodeInfo>,
    /// The providers in its registry copy.
    pub(crate) services: Vec<Arc<ServiceEntry>>,
    /// Its metrics as text, if it keeps its own.
    pub(crate) metrics: Option<String>,
    /// What the dashboard remembers.
    pub(crate) dashboard: &'a Dashboard,
}
