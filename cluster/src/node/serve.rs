//! Serving a provider: hosting it, registering it, and supervising its health.

use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use tokio::sync::watch;

use super::health::{Health, Probe, ServiceStatus};
use super::{Node, NodeInner};
use crate::registry::{RegistryError, ServiceEntry};
use crate::server::Provide;

/// A service served by a node. Dropping it keeps the service served and registered; call
/// [`Registration::deregister`] to withdraw it.
#[derive(Debug)]
#[must_use = "dropping a Registration keeps the service up; keep it to deregister later"]
pub struct Registration {
    node: Node,
    service: String,
    status: watch::Receiver<ServiceStatus>,
    supervisor: Option<Supervisor>,
}

/// A running supervisor task, and a way to know it has stopped: it owns the status sender, so
/// the status channel closes when the task is gone.
#[derive(Debug, Clone)]
pub(super) struct Supervisor {
    task: tokio::task::AbortHandle,
    status: watch::Receiver<ServiceStatus>,
}

impl Supervisor {
    /// Aborts the task and waits until it is gone, so that a registration it was making cannot
    /// land after the caller's deregistration.
    pub(super) async fn stop(mut self) {
        self.task.abort();
        while self.status.changed().await.is_ok() {}
    }
}

impl Registration {
    /// The service's name.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// Where the service stands now.
    pub fn status(&self) -> ServiceStatus {
        *self.status.borrow()
    }

    /// Waits until the service stands at `status` (e.g. [`ServiceStatus::Up`] once its startup
    /// probe passed).
    pub async fn wait_for(&mut self, status: ServiceStatus) {
        let _ = self.status.wait_for(|s| *s == status).await;
    }

    /// Removes the service from the registry (every node stops routing to it), then stops
    /// serving it here. Calls already running finish.
    pub async fn deregister(self) -> Result<(), RegistryError> {
        if let Some(supervisor) = self.supervisor {
            supervisor.stop().await;
        }
        let inner = &self.node.inner;
        let result = inner
            .registry
            .deregister(&inner.info.name, &self.service)
            .await;
        inner.dispatcher.unhost(&self.service);
        result
    }
}

impl Node {
    /// Serves a provider here and registers it, so that every node can route calls to it.
    pub async fn serve<P: Provide>(&self, provider: P) -> Result<Registration, RegistryError> {
        let (service, entry) = self.host(provider);
        if let Err(e) = self.inner.registry.register(entry).await {
            self.inner.dispatcher.unhost(&service);
            return Err(e);
        }
        let (_, status) = watch::channel(ServiceStatus::Up);
        Ok(Registration {
            node: self.clone(),
            service,
            status,
            supervisor: None,
        })
    }

    /// Serves a provider under `health`: registered once its startup probe passes, marked
    /// failing while its check fails (clients pass it over, unless too many replicas fail:
    /// `NodeBuilder::panic_threshold`), withdrawn for good when a task it is bound to ends. Returns at
    /// once; [`Registration::wait_for`] waits for a status.
    pub fn serve_with<P: Provide>(&self, provider: P, health: Health) -> Registration {
        let (service, entry) = self.host(provider);
        let (status_tx, status) = watch::channel(ServiceStatus::Starting);
        let task =
            crate::background::spawn(supervise(self.inner.clone(), entry, health, status_tx))
                .abort_handle();
        let supervisor = Supervisor {
            task,
            status: status.clone(),
        };
        self.inner
            .supervisors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(supervisor.clone());
        Registration {
            node: self.clone(),
            service,
            status,
            supervisor: Some(supervisor),
        }
    }

    fn host<P: Provide>(&self, provider: P) -> (String, ServiceEntry) {
        let description = provider.description();
        self.inner.dispatcher.host(Arc::new(provider));
        let mut published = description.clone();
        // What a client of the first release reads (it ignores the node's range).
        published.wire = *self.inner.wire.end();
        let entry = ServiceEntry::new(self.inner.info.clone(), Arc::new(published));
        (description.name.clone(), entry)
    }
}

/// Runs a served service's health for as long as it is served.
async fn supervise(
    node: Arc<NodeInner>,
    entry: ServiceEntry,
    health: Health,
    status: watch::Sender<ServiceStatus>,
) {
    let name = format!("{} {}", entry.description.name, entry.description.version);
    let Health {
        startup,
        check,
        every,
        down_after,
        bound_to,
    } = health;
    let bound = async move {
        match bound_to {
            Some(task) => {
                let _ = task.await;
            }
            None => std::future::pending().await,
        }
    };
    let run = async {
        if let Some(probe) = &startup {
            wait_for_startup(&node, &name, probe).await;
        }
        register(&node, &name, &entry, &status, ServiceStatus::Up).await;
        let Some(check) = check else {
            return std::future::pending().await;
        };
        let mut failures = 0u32;
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            match tokio::time::timeout(every, check()).await {
                Ok(Ok(())) => {
                    failures = 0;
                    if *status.borrow() == ServiceStatus::Down {
                        tracing::info!(
                            "service {name} on node {} passes its health check again",
                            node.info
                        );
                        register(&node, &name, &entry, &status, ServiceStatus::Up).await;
                    }
                }
                outcome => {
                    failures += 1;
                    let why = match outcome {
                        Ok(Err(why)) => why,
                        _ => format!("no answer within {every:?}"),
                    };
                    tracing::warn!(
                        "service {name} on node {}: health check failed ({failures} in a row): {why}",
                        node.info
                    );
                    if failures >= down_after && *status.borrow() == ServiceStatus::Up {
                        // Marked failing rather than deregistered: clients pass it over, unless
                        // so many replicas fail at once that the panic threshold has them
                        // called anyway (`client/select.rs`).
                        tracing::warn!(
                            "service {name} on node {} is down: marked failing in the registry",
                            node.info
                        );
                        let failing = entry.clone().with_failing(true);
                        register(&node, &name, &failing, &status, ServiceStatus::Down).await;
                    }
                }
            }
        }
    };
    tokio::select! {
        () = run => {}
        () = bound => {
            tracing::warn!("the task serving {name} on node {} ended: withdrawn from the registry", node.info);
            let _ = node.registry.deregister(&node.info.name, &entry.description.name).await;
            node.dispatcher.unhost(&entry.description.name);
            status.send_replace(ServiceStatus::Stopped);
        }
    }
}

async fn wait_for_startup(node: &NodeInner, name: &str, probe: &Probe) {
    let mut pauses = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(5))
        .without_max_times()
        .build();
    loop {
        match probe().await {
            Ok(()) => return,
            Err(why) => {
                let pause = pauses.next().unwrap_or(Duration::from_secs(5));
                tracing::info!(
                    "service {name} on node {} waits to register: its startup probe failed: {why}; next try in {pause:?}",
                    node.info
                );
                tokio::time::sleep(pause).await;
            }
        }
    }
}

async fn register(
    node: &NodeInner,
    name: &str,
    entry: &ServiceEntry,
    status: &watch::Sender<ServiceStatus>,
    then: ServiceStatus,
) {
    let mut pauses = ExponentialBuilder::default()
        .with_max_delay(Duration::from_secs(5))
        .without_max_times()
        .build();
    loop {
        match node.registry.register(entry.clone()).await {
            Ok(()) => {
                status.send_replace(then);
                return;
            }
            Err(e) => {
                let pause = pauses.next().unwrap_or(Duration::from_secs(5));
                tracing::error!(
                    "service {name} on node {} cannot register: {e}; next try in {pause:?}",
                    node.info
                );
                tokio::time::sleep(pause).await;
            }
        }
    }
}
