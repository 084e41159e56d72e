//! The node's side of its metrics (`crate::meters`): how they are set up at start, their
//! endpoint (`crate::admin`), what is read from the node when they are rendered, and the upkeep.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock, Weak};

use tokio::sync::watch;

use super::{Node, NodeInner, StartError};
#[cfg(feature = "admin")]
use crate::admin::Pages;
#[cfg(feature = "admin")]
use crate::admin::dashboard::{Dashboard, View, page};
use crate::meters::{Meters, Sampled, Sink, UPKEEP_EVERY};
use crate::registry::GossipRegistry;
use crate::security::tls::Tls;

/// How long a dashboard page is served again before it is made anew.
#[cfg(feature = "admin")]
const FRESH: std::time::Duration = std::time::Duration::from_secs(2);

/// Without the `admin` feature there is no endpoint, so no dashboard to feed: the code that
/// feeds one stays the same, with none ever made.
#[cfg(not(feature = "admin"))]
enum Dashboard {}

#[cfg(not(feature = "admin"))]
impl Dashboard {
    fn event(&self, _: crate::registry::RegistryEvent) {
        match *self {}
    }
    fn sample(&self, _: &str) {
        match *self {}
    }
}

/// What the builder was asked for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Wanted {
    /// A recorder of the node's own, served at the address: in plaintext if `plaintext`.
    #[cfg(feature = "admin")]
    Serve { addr: SocketAddr, plaintext: bool },
    /// The process's recorder, through the facade; no endpoint.
    Global,
}

/// A running endpoint (never one without the `admin` feature).
#[cfg_attr(not(feature = "admin"), allow(dead_code))]
pub(super) struct Endpoint {
    pub(super) addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Endpoint {
    pub(super) async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// The metrics of a node being started: its meters, and its endpoint bound (before the node
/// joins the registry, so that an address in use fails the start), which renders the node once
/// it exists (`node`).
pub(super) struct Started {
    pub(super) meters: Arc<Meters>,
    pub(super) endpoint: Option<Endpoint>,
    node: Arc<OnceLock<Weak<NodeInner>>>,
    /// What the endpoint's dashboard remembers, fed by the tasks `attach` starts.
    dashboard: Option<Arc<Dashboard>>,
}

/// Sets up what `wanted` asks for; `tls` is the node's, `insecure` whether the node itself is.
#[cfg_attr(not(feature = "admin"), allow(unused_variables))]
pub(super) async fn start(
    wanted: Option<Wanted>,
    tls: Option<&Arc<Tls>>,
    insecure: bool,
) -> Result<Option<Started>, StartError> {
    let Some(wanted) = wanted else {
        return Ok(None);
    };
    match wanted {
        Wanted::Global => Ok(Some(Started {
            meters: Arc::new(Meters::new(Sink::Global)),
            endpoint: None,
            node: Arc::default(),
            dashboard: None,
        })),
        #[cfg(feature = "admin")]
        Wanted::Serve { addr, plaintext } => serve(addr, plaintext || insecure, tls).await,
    }
}

/// A recorder of the node's own and its endpoint, bound at `addr`: in plaintext if `plaintext`,
/// else over mutual TLS with `tls`.
#[cfg(feature = "admin")]
async fn serve(
    addr: SocketAddr,
    plaintext: bool,
    tls: Option<&Arc<Tls>>,
) -> Result<Option<Started>, StartError> {
    let tls = match (plaintext, tls) {
        (true, _) => None,
        (false, Some(tls)) => Some(tls.clone()),
        (false, None) => {
            return Err(StartError::Setting(
                "metrics(addr) serves over mutual TLS with the node's identity, and this node has none: give it an identity, or ask for metrics_insecure(addr)".to_owned(),
            ));
        }
    };
    let node: Arc<OnceLock<Weak<NodeInner>>> = Arc::default();
    let meters = Arc::new(Meters::new(Sink::own()));
    let dashboard = Arc::new(Dashboard::default());
    let last: std::sync::Mutex<Option<(std::time::Instant, String)>> = Default::default();
    let render = {
        let (node, for_page, dashboard) = (node.clone(), node.clone(), dashboard.clone());
        Arc::new(Pages {
            metrics: Box::new(move || {
                let inner = node.get()?.upgrade()?;
                inner.meters.as_ref()?.render(&sample(&inner))
            }),
            dashboard: Box::new(move || {
                // One page made at a time, and made again at most every `FRESH`: requests
                // (a tab reloading, several operators, a flood) cost one render between them.
                let mut made = last.lock().unwrap_or_else(|p| p.into_inner());
                if let Some((at, page)) = &*made
                    && at.elapsed() < FRESH
                {
                    return Some(page.clone());
                }
                let inner = for_page.get()?.upgrade()?;
                let fresh = page(&View {
                    node: &inner.info,
                    nodes: inner.registry.nodes(),
                    services: inner.registry.services(),
                    metrics: inner
                        .meters
                        .as_ref()
                        .and_then(|m| m.render(&sample(&inner))),
                    dashboard: &dashboard,
                });
                *made = Some((std::time::Instant::now(), fresh.clone()));
                Some(fresh)
            }),
        })
    };
    let (stop, stopped) = watch::channel(false);
    let (addr, task) = crate::admin::serve(addr, tls.clone(), render, stopped)
        .await
        .map_err(|source| StartError::Listen { addr, source })?;
    if tls.is_none() {
        tracing::warn!(
            "metrics are served in PLAINTEXT at {addr}: anyone who reaches it can read them"
        );
    }
    Ok(Some(Started {
        meters,
        endpoint: Some(Endpoint { addr, stop, task }),
        node,
        dashboard: Some(dashboard),
    }))
}

impl Started {
    /// The node exists: its endpoint renders it, and a task keeps its metrics up while it lives.
    pub(super) fn attach(&self, node: &Node) {
        let weak = Arc::downgrade(&node.inner);
        let _ = self.node.set(weak.clone());
        if let Some(dashboard) = &self.dashboard {
            // The dashboard's recent events, for as long as the registry copy sends them.
            let mut events = node.inner.registry.events();
            let dashboard = dashboard.clone();
            crate::background::spawn(async move {
                loop {
                    match events.recv().await {
                        Ok(event) => dashboard.event(event),
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    }
                }
            });
        }
        let dashboard = self.dashboard.clone();
        crate::background::spawn(async move {
            let mut every = tokio::time::interval(UPKEEP_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                if inner.stopped.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                if let Some(meters) = &inner.meters {
                    let sampled = sample(&inner);
                    // With a dashboard, its rates count from the rendered text, and rendering
                    // drains the histograms as the upkeep would: one pass, not both.
                    match dashboard.as_ref().zip(meters.render(&sampled)) {
                        Some((dashboard, text)) => dashboard.sample(&text),
                        None => meters.upkeep(&sampled),
                    }
                }
            }
        });
    }
}

/// What the node's state says now, for its own metrics.
fn sample(inner: &NodeInner) -> Sampled {
    let copy = inner.registry.local_copy();
    let (registry_nodes, registry_services, registry_entries) = copy.sizes();
    Sampled {
        ejections: inner.peers.ejections(),
        connections_in: inner.incoming.as_ref().map_or(0, |i| i.open()),
        connections_out: inner.connector.open(),
        registry_nodes,
        registry_services,
        registry_entries,
        registry_events: copy.counted_events(),
        gossip: inner.gossip.as_ref().map(GossipRegistry::traffic),
    }
}

impl Node {
    /// Where the node serves its metrics (`GET /metrics`), if it does: the address given to
    /// `NodeBuilder::metrics` (the `admin` feature), with the port the OS chose for port 0.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.inner.metrics_addr
    }

    /// The node's metrics in Prometheus's text format, as its endpoint serves them; `None` if it
    /// keeps none of its own (metrics off, recorded into the process's recorder, or a build
    /// without the `admin` feature).
    pub fn render_metrics(&self) -> Option<String> {
        self.inner.meters.as_ref()?.render(&sample(&self.inner))
    }
}
