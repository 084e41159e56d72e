//! Metrics through the `metrics` facade: what a node records, per service and function on both
//! sides of a call and for the node itself, and where it goes. `docs/operations.md`, "Metrics".
//!
//! 1. **Off by default, and then free**: a node without metrics holds `None` where the handles
//!    would be, and the call path and the dispatcher pay one branch on it.
//! 2. **Handles resolved once**: a client resolves its functions' counters, gauge and histogram
//!    when it is made (cached per service description, `calls.rs`), a provider when it hosts a
//!    service (`served.rs`): a call never builds a `Key` nor looks one up. The outcome counters
//!    are registered on their first use, so a scrape shows only the outcomes that happened.
//! 3. **Per node** by default: each node records into a Prometheus recorder of its own, so that
//!    several nodes in one process (tests, simulations) keep separate figures, and renders it at
//!    its endpoint (`admin/`). Or, asked for, into whatever recorder the process installed
//!    (`metrics::set_global_recorder`): the same handles, registered there.
//! 4. **What the node knows anyway is read when rendered** (`node.rs`): connections, ejections,
//!    the registry copy, gossip traffic; nothing on the gossip loop or the connection paths.

mod calls;
mod names;
mod node;
mod outcome;
mod served;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString};
#[cfg(feature = "admin")]
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

pub(crate) use calls::{ClientMeters, Tally};
pub(crate) use node::{NodeMeters, Sampled};
pub(crate) use outcome::{Outcome, Served};
pub(crate) use served::{ServedMeters, ServiceMeters};

use crate::fast_map::FastMap;
use crate::service::ServiceDescription;
use names::{Kind, Name};

/// Upper bounds of the latency histograms' buckets, in seconds: 100 µs to a minute.
#[cfg(feature = "admin")]
const BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    10.0, 60.0,
];

/// How often a node's own recorder drains its histograms' samples into their buckets when no
/// scrape does: samples wait in a queue until then, so without it a node nobody scrapes would
/// grow with every call.
pub(crate) const UPKEEP_EVERY: Duration = Duration::from_secs(5);

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// Where a node's metrics go.
pub(crate) enum Sink {
    /// A recorder of the node's own, rendered by its endpoint (the `admin` feature).
    #[cfg(feature = "admin")]
    Own {
        recorder: PrometheusRecorder,
        handle: PrometheusHandle,
    },
    /// The recorder the process installed through the facade, if any (else nothing is kept).
    Global,
}

impl Sink {
    /// A recorder of the node's own, its latencies as histograms.
    #[cfg(feature = "admin")]
    pub(crate) fn own() -> Self {
        let recorder = PrometheusBuilder::new()
            .set_buckets(&BUCKETS)
            .map(PrometheusBuilder::build_recorder)
            .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
        let handle = recorder.handle();
        Self::Own { recorder, handle }
    }

    fn with<T>(&self, f: impl FnOnce(&dyn Recorder) -> T) -> T {
        match self {
            #[cfg(feature = "admin")]
            Sink::Own { recorder, .. } => f(recorder),
            Sink::Global => metrics::with_recorder(f),
        }
    }

    fn describe(&self, name: &Name) {
        let key = KeyName::from_const_str(name.name);
        let help = SharedString::const_str(name.help);
        self.with(|r| match name.kind {
            Kind::Counter => r.describe_counter(key, None, help),
            Kind::Gauge => r.describe_gauge(key, None, help),
            Kind::Histogram => r.describe_histogram(key, None, help),
        });
    }

    pub(crate) fn counter(&self, name: &Name, labels: &[(&'static str, &'static str)]) -> Counter {
        debug_assert_eq!(name.kind, Kind::Counter);
        self.with(|r| r.register_counter(&key(name, labels), &METADATA))
    }

    pub(crate) fn gauge(&self, name: &Name, labels: &[(&'static str, &'static str)]) -> Gauge {
        debug_assert_eq!(name.kind, Kind::Gauge);
        self.with(|r| r.register_gauge(&key(name, labels), &METADATA))
    }

    pub(crate) fn histogram(
        &self,
        name: &Name,
        labels: &[(&'static str, &'static str)],
    ) -> Histogram {
        debug_assert_eq!(name.kind, Kind::Histogram);
        self.with(|r| r.register_histogram(&key(name, labels), &METADATA))
    }
}

/// The key of `name` with `labels`, all borrowed from static text: no allocation.
fn key(name: &Name, labels: &[(&'static str, &'static str)]) -> Key {
    let labels: Vec<Label> = labels
        .iter()
        .map(|(k, v)| Label::from_static_parts(k, v))
        .collect();
    Key::from_parts(name.name, labels)
}

/// A node's metrics: where they go, and the handles resolved so far.
pub(crate) struct Meters {
    pub(crate) sink: Arc<Sink>,
    /// Each client's handles, by the address of its (static) service description: clients made
    /// per request share them.
    clients: Mutex<FastMap<usize, Arc<ClientMeters>>>,
    pub(crate) node: NodeMeters,
}

impl Meters {
    pub(crate) fn new(sink: Sink) -> Self {
        for name in names::ALL {
            sink.describe(name);
        }
        let sink = Arc::new(sink);
        Self {
            node: NodeMeters::new(&sink),
            sink,
            clients: Mutex::default(),
        }
    }

    /// The handles of a client of `description`'s service.
    pub(crate) fn client(&self, description: &'static ServiceDescription) -> Arc<ClientMeters> {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        // Descriptions are static, so this is bounded by the program's code.
        clients
            .entry(std::ptr::from_ref(description) as usize)
            .or_insert_with(|| Arc::new(ClientMeters::new(&self.sink, description)))
            .clone()
    }

    /// The handles of a hosted service.
    pub(crate) fn service(&self, description: &'static ServiceDescription) -> ServiceMeters {
        ServiceMeters::new(&self.sink, description)
    }

    /// The Prometheus text of the node's own recorder, after `sampled` is written into it; `None`
    /// when the node records into the process's recorder.
    pub(crate) fn render(&self, sampled: &Sampled) -> Option<String> {
        self.node.write(sampled);
        match &*self.sink {
            #[cfg(feature = "admin")]
            Sink::Own { handle, .. } => Some(handle.render()),
            Sink::Global => None,
        }
    }

    /// Drains the histograms' waiting samples (own recorder), writes `sampled` (any).
    pub(crate) fn upkeep(&self, sampled: &Sampled) {
        self.node.write(sampled);
        #[cfg(feature = "admin")]
        if let Sink::Own { handle, .. } = &*self.sink {
            handle.run_upkeep();
        }
    }
}
