//! A [`cluster::Registry`] on Eureka servers: nodes of our cluster register each service as an
//! instance (its metadata carries the version and call options), heartbeat it, and read their
//! lookups from a local copy of the registry that a background task refreshes.

mod held;
mod mapping;
mod resolver;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use cluster::registry::{
    LocalCopy, NodeInfo, Registry, RegistryError, RegistryFuture, ServiceEntry,
};
use tokio::sync::Mutex as AsyncMutex;

pub use mapping::{NODE_APP, entry_instance, instance_entry, instance_node, keys, node_instance};
pub use resolver::{ResolverRegistry, ResolverRegistryConfig};

use crate::client::{EurekaClient, Heartbeat};
use crate::model::{Instance, Status};

/// When to fetch next: `interval` times a factor drawn between 0.75 and 1.25 from `now`, at
/// least 10 ms, and a year at most (a configured `Duration::MAX` must not overflow a clock).
fn fetch_at(now: tokio::time::Instant, interval: Duration) -> tokio::time::Instant {
    const YEAR: Duration = Duration::from_secs(365 * 86_400);
    let factor = 0.75 + fastrand::f64() / 2.0;
    let wait = Duration::try_from_secs_f64(interval.min(YEAR).as_secs_f64() * factor)
        .unwrap_or(YEAR)
        .max(Duration::from_millis(10));
    now + wait
}

/// How the backend talks to the registry servers.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EurekaRegistryConfig {
    /// How often the local copy is refreshed from the servers: 5 s on average (Eureka's
    /// clients use 30 s; a cluster's calls wait on changes, so shorter is better here). Each
    /// wait is drawn between 0.75 and 1.25 times this, so that nodes started together do not
    /// fetch together; each fetch is a delta (`GET apps/delta`) unless the copy is older than
    /// 90 s or the delta disagrees with the server's hashcode.
    pub fetch_interval: Duration,
    /// How often registered instances heartbeat: 30 s, as Eureka.
    pub renewal_interval: Duration,
    /// The lease duration registered instances ask for: 90 s, as Eureka.
    pub lease_duration: Duration,
}

impl Default for EurekaRegistryConfig {
    fn default() -> Self {
        Self {
            fetch_interval: Duration::from_secs(5),
            renewal_interval: Duration::from_secs(30),
            lease_duration: Duration::from_secs(90),
        }
    }
}

/// A registry backend on Eureka servers. Clones share one local copy.
#[derive(Debug, Clone)]
pub struct EurekaRegistry {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: EurekaClient,
    config: EurekaRegistryConfig,
    copy: LocalCopy,
    /// What this process registered, by instance id: heartbeated and re-registered on 404.
    own: Mutex<BTreeMap<String, Instance>>,
    /// The registry as last read, kept current with deltas; one refresh at a time, so that
    /// events come out in order.
    refreshing: AsyncMutex<held::Held>,
    /// The instances whose cluster metadata could not be read, by (id, lastUpdatedTimestamp):
    /// each is logged once, not at every fetch.
    unreadable: Mutex<HashSet<(String, u64)>>,
    halted: AtomicBool,
}

impl EurekaRegistry {
    /// A backend on these servers; starts its refresh-and-heartbeat task (needs a tokio
    /// runtime) and reads the registry once before returning.
    pub async fn start(client: EurekaClient, config: EurekaRegistryConfig) -> Self {
        let registry = Self::new(client, config);
        registry.inner.refresh().await;
        registry
    }

    /// Like [`EurekaRegistry::start`], without waiting for the first read (the background task
    /// makes it at once). Must be called inside a tokio runtime.
    pub fn new(client: EurekaClient, config: EurekaRegistryConfig) -> Self {
        let inner = Arc::new(Inner {
            client,
            config,
            copy: LocalCopy::new(),
            own: Mutex::new(BTreeMap::new()),
            refreshing: AsyncMutex::new(held::Held::default()),
            unreadable: Mutex::new(HashSet::new()),
            halted: AtomicBool::new(false),
        });
        tokio::spawn(background(Arc::downgrade(&inner)));
        Self { inner }
    }

    /// Reads the registry now (the background task does so every fetch interval).
    pub async fn refresh(&self) {
        self.inner.refresh().await;
    }

    fn lease(&self) -> (u64, u64) {
        (
            self.inner.config.renewal_interval.as_secs().max(1),
            self.inner.config.lease_duration.as_secs().max(1),
        )
    }

    async fn put(&self, instance: Instance) -> Result<(), RegistryError> {
        let mut instance = instance;
        instance.last_dirty_timestamp = self.inner.client.now_ms();
        let id = instance.id().to_owned();
        self.inner
            .own
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, instance.clone());
        if let Err(e) = self.inner.client.register(&instance).await {
            // Kept in `own`: the background task registers it when a server answers.
            tracing::warn!("registering {} failed, will retry: {e}", instance.id());
        }
        self.inner.refresh().await;
        Ok(())
    }

    async fn remove(&self, ids: Vec<(String, String)>) -> Result<(), RegistryError> {
        for (app, id) in ids {
            self.inner
                .own
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            if let Err(e) = self.inner.client.cancel(&app, &id).await {
                tracing::warn!("cancelling {id} failed (its lease will expire): {e}");
            }
        }
        self.inner.refresh().await;
        Ok(())
    }
}

async fn background(inner: Weak<Inner>) {
    let (fetch, renew) = match inner.upgrade() {
        Some(i) => (i.config.fetch_interval, i.config.renewal_interval),
        None => return,
    };
    let mut renew_tick = tokio::time::interval(renew);
    renew_tick.tick().await;
    // The first read at once, the next ones at jittered intervals.
    let mut next_fetch = tokio::time::Instant::now();
    loop {
        let renewing = tokio::select! {
            _ = tokio::time::sleep_until(next_fetch) => false,
            _ = renew_tick.tick() => true,
        };
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if inner.halted.load(Ordering::SeqCst) {
            return;
        }
        if renewing {
            inner.heartbeat().await;
        } else {
            inner.refresh().await;
            next_fetch = fetch_at(tokio::time::Instant::now(), fetch);
        }
    }
}

impl Inner {
    async fn heartbeat(&self) {
        let own: Vec<Instance> = self
            .own
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for i in own {
            match self.client.heartbeat(&i).await {
                Ok(Heartbeat::Renewed) => {}
                Ok(Heartbeat::Unknown) => {
                    tracing::info!("the registry does not know {}: registering again", i.id());
                    if let Err(e) = self.client.register(&i).await {
                        tracing::warn!("registering {} again failed: {e}", i.id());
                    }
                }
                Err(e) => tracing::warn!("heartbeat of {} failed: {e}", i.id()),
            }
        }
    }

    /// Brings the registry up to date (a delta, or the whole of it: `held.rs`) and replaces
    /// the local copy, with an event for each difference. When no server answers, the copy is
    /// kept as it was.
    async fn refresh(&self) {
        let mut held = self.refreshing.lock().await;
        if let Err(e) = held.fetch(&self.client).await {
            tracing::warn!("no registry server answers ({e}): keeping the registry as last read");
            return;
        }
        let mut nodes = Vec::new();
        let mut entries = Vec::new();
        let mut foreign = 0;
        for i in held.instances() {
            if let Some(n) = instance_node(i) {
                nodes.push(n);
            } else if let Some(e) = instance_entry(i) {
                entries.push(Arc::new(e));
            } else {
                foreign += usize::from(!self.skipped(i));
            }
        }
        if foreign > 0 {
            tracing::debug!(
                "{foreign} instances without cluster metadata (other clients' services, or not \
                 UP or DOWN) are not callable through the framework: skipped"
            );
        }
        // The copy tells every difference as an event and a log line.
        self.copy.replace_with(nodes, entries);
    }

    /// Logs an instance that carries a cluster description this build cannot read (once per
    /// version of it); false if it carries none, or is neither UP nor DOWN (not an error).
    fn skipped(&self, i: &Instance) -> bool {
        let up_or_down = matches!(i.status, Status::Up | Status::Down);
        if !up_or_down || !i.metadata.contains_key(keys::DESCRIPTION) {
            return false;
        }
        let key = (i.id().to_owned(), i.last_updated_timestamp);
        let mut seen = self.unreadable.lock().unwrap_or_else(|p| p.into_inner());
        // Bounded: the set is forgotten rather than grown past the registry it describes.
        if seen.len() > 10_000 {
            seen.clear();
        }
        if seen.insert(key) {
            tracing::warn!(
                "entry {} of {} skipped: its `{}` metadata is not a description this build \
                 reads (another version of the framework?), or names another service, or its \
                 node cannot be read",
                i.id(),
                i.app,
                keys::DESCRIPTION
            );
        }
        true
    }
}

impl Registry for EurekaRegistry {
    fn register(&self, entry: ServiceEntry) -> RegistryFuture<'_, Result<(), RegistryError>> {
        Box::pin(async move {
            let node = node_instance(&entry.node, self.lease());
            let known = self
                .inner
                .own
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(node.id());
            if !known {
                self.put(node).await?;
            }
            self.put(entry_instance(&entry, self.lease())).await
        })
    }

    fn deregister(
        &self,
        node: &str,
        service: &str,
    ) -> RegistryFuture<'_, Result<(), RegistryError>> {
        let ids = vec![(service.to_ascii_uppercase(), format!("{node}:{service}"))];
        Box::pin(self.remove(ids))
    }

    fn join(&self, node: NodeInfo) -> RegistryFuture<'_, Result<(), RegistryError>> {
        Box::pin(self.put(node_instance(&node, self.lease())))
    }

    fn leave(&self, node: &str) -> RegistryFuture<'_, Result<(), RegistryError>> {
        let prefix = format!("{node}:");
        let mut ids: Vec<(String, String)> = self
            .inner
            .own
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|i| i.id().starts_with(&prefix))
            .map(|i| (i.app.clone(), i.id().to_owned()))
            .collect();
        // Entries of this node that another process registered are removed too.
        for e in self.services_on(node) {
            let id = format!("{node}:{}", e.description.name);
            if !ids.iter().any(|(_, i)| *i == id) {
                ids.push((e.description.name.to_ascii_uppercase(), id));
            }
        }
        ids.push((NODE_APP.to_owned(), node.to_owned()));
        Box::pin(self.remove(ids))
    }

    fn local_copy(&self) -> &LocalCopy {
        &self.inner.copy
    }

    fn halt(&self) -> RegistryFuture<'_, ()> {
        self.inner.halted.store(true, Ordering::SeqCst);
        Box::pin(std::future::ready(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_fetch_is_jittered_around_the_interval_and_never_overflows() {
        let now = tokio::time::Instant::now();
        let interval = Duration::from_secs(4);
        let waits: Vec<Duration> = (0..200).map(|_| fetch_at(now, interval) - now).collect();
        assert!(
            waits
                .iter()
                .all(|w| *w >= Duration::from_secs(3) && *w <= Duration::from_secs(5))
        );
        let first = waits[0];
        assert!(waits.iter().any(|w| *w != first), "not all the same");
        assert!(fetch_at(now, Duration::MAX) > now, "no panic");
        assert_eq!(
            fetch_at(now, Duration::ZERO) - now,
            Duration::from_millis(10)
        );
    }
}
