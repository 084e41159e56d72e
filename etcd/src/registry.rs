//! [`EtcdRegistry`]: the [`Registry`] trait on etcd. Writes go to etcd and, once it has taken
//! them, to the local copy at once; the watch (`watch.rs`) brings everyone else's.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cluster::registry::{
    LocalCopy, NodeInfo, Registry, RegistryError, RegistryFuture, ServiceEntry,
};
use etcd_client::{Client, DeleteOptions, GetOptions, PutOptions};
use tokio::sync::Mutex as AsyncMutex;
use tokio::task::JoinHandle;

use crate::config::EtcdConfig;
use crate::keys::{self, Key, Keys};
use crate::mirror::{Mirror, Value};
use crate::still::held;

/// A registry backend on etcd. Clones share one connection, one watch and one local copy;
/// each node joined through it has a lease of its own.
#[derive(Debug, Clone)]
pub struct EtcdRegistry {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: EtcdConfig,
    pub(crate) copy: LocalCopy,
    pub(crate) mirror: Mutex<Mirror>,
    /// The cluster a node's certificate named (`bind_cluster`), until the registry starts.
    bound: Mutex<Option<String>>,
    /// Connected, read, watching: from the first join on.
    pub(crate) running: OnceLock<Running>,
    start: AsyncMutex<()>,
    /// One write at a time, so that a node's keys and its lease change together.
    pub(crate) writes: AsyncMutex<()>,
    /// The nodes joined through this registry.
    pub(crate) own: Mutex<BTreeMap<String, Own>>,
    pub(crate) halted: AtomicBool,
    /// Told when a request failed, so that the watch starts again on a fresh connection. Its
    /// own `Arc`: the watch waits on it without holding the registry alive.
    pub(crate) broken: Arc<tokio::sync::Notify>,
}

pub(crate) struct Running {
    pub(crate) client: Client,
    pub(crate) keys: Keys,
    watch: JoinHandle<()>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("root", &self.keys.root())
            .finish_non_exhaustive()
    }
}

/// A node joined through this registry: what it has in etcd, on which lease.
#[derive(Debug)]
pub(crate) struct Own {
    pub(crate) info: NodeInfo,
    /// The lease its keys are on; 0 while it has none (lost, being granted again).
    pub(crate) lease: i64,
    /// Its entries, by service name, as written.
    pub(crate) entries: BTreeMap<String, String>,
    /// A write failed: the keeper writes every key again once etcd answers.
    pub(crate) dirty: bool,
    pub(crate) keeper: Option<JoinHandle<()>>,
}

impl EtcdRegistry {
    /// A registry on the etcd `config` names. It connects when the first node joins.
    pub fn new(config: EtcdConfig) -> Self {
        let mirror = Mirror::new(config.max_keys, config.max_value);
        Self {
            inner: Arc::new(Inner {
                config,
                copy: LocalCopy::new(),
                mirror: Mutex::new(mirror),
                bound: Mutex::new(None),
                running: OnceLock::new(),
                start: AsyncMutex::new(()),
                writes: AsyncMutex::new(()),
                own: Mutex::new(BTreeMap::new()),
                halted: AtomicBool::new(false),
                broken: Arc::default(),
            }),
        }
    }

    /// The lease of a node joined through this registry (0 while it has none): for tests and
    /// for `etcdctl lease timetolive`.
    pub fn lease_of(&self, node: &str) -> Option<i64> {
        lock(&self.inner.own).get(node).map(|o| o.lease)
    }

    /// Connects, reads the registry once and starts the watch, unless already done.
    async fn running(&self) -> Result<&Running, RegistryError> {
        if self.inner.halted.load(Ordering::SeqCst) {
            return Err(RegistryError::Stopped);
        }
        if let Some(running) = self.inner.running.get() {
            return Ok(running);
        }
        let _one = self.inner.start.lock().await;
        if let Some(running) = self.inner.running.get() {
            return Ok(running);
        }
        let config = &self.inner.config;
        let cluster = lock(&self.inner.bound)
            .clone()
            .or_else(|| config.cluster.clone())
            .unwrap_or_else(|| "default".to_owned());
        let keys = Keys::new(&config.prefix, &cluster);
        let (endpoints, options) = config.connection().map_err(RegistryError::Unavailable)?;
        let client = self
            .inner
            .ask("connecting", Client::connect(endpoints, Some(options)))
            .await?;
        let revision = self.inner.read_all(&client, &keys).await?;
        let watch = tokio::spawn(crate::watch::run(
            Arc::downgrade(&self.inner),
            client.clone(),
            keys.clone(),
            revision + 1,
        ));
        let _ = self.inner.running.set(Running {
            client,
            keys,
            watch,
        });
        Ok(self.inner.running.get().expect("just set"))
    }

    /// This registry's node `node`, or `NotLocal`.
    fn own_lease(&self, node: &str) -> Result<i64, RegistryError> {
        let own = lock(&self.inner.own);
        match own.get(node) {
            Some(o) => Ok(o.lease),
            None => Err(RegistryError::NotLocal {
                node: node.to_owned(),
                own: own.keys().cloned().collect::<Vec<_>>().join(", "),
            }),
        }
    }
}

impl Inner {
    /// Runs a request to etcd within `request_timeout`, on a held clock (`still.rs`).
    pub(crate) async fn ask<T>(
        &self,
        what: &str,
        request: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, RegistryError> {
        let answer = held(tokio::time::timeout(self.config.request_timeout, request)).await;
        let failed = match answer {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => format!("{what}: {e}"),
            Err(_) => format!(
                "{what}: etcd did not answer within {:?}",
                self.config.request_timeout
            ),
        };
        self.broken.notify_waiters();
        Err(RegistryError::Unavailable(failed))
    }

    /// Reads every key of the cluster into the mirror and the local copy, in pages of one
    /// snapshot (the first page's revision); returns that revision.
    pub(crate) async fn read_all(
        &self,
        client: &Client,
        keys: &Keys,
    ) -> Result<i64, RegistryError> {
        let root = keys.root().as_bytes().to_vec();
        let end = prefix_end(&root);
        let mut kv = client.kv_client().max_decoding_message_size(MAX_MESSAGE);
        let mut start = root;
        let mut revision = 0;
        let mut read = Vec::new();
        loop {
            let mut options = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
            if revision > 0 {
                options = options.with_revision(revision);
            }
            let page = self
                .ask("reading the registry", kv.get(start.clone(), Some(options)))
                .await?;
            if revision == 0 {
                revision = page.header().map_or(0, |h| h.revision());
            }
            {
                let mirror = lock(&self.mirror);
                for kv in page.kvs() {
                    if let Some((key, value)) = mirror.parse(keys, kv.key(), kv.value()) {
                        read.push((key, kv.mod_revision(), value));
                    }
                }
            }
            let Some(last) = page.kvs().last() else { break };
            if !page.more() {
                break;
            }
            if read.len() >= self.config.max_keys {
                tracing::warn!(
                    "the registry holds more than EtcdConfig::max_keys = {} keys: the rest are skipped",
                    self.config.max_keys
                );
                break;
            }
            // The next page starts just after the last key read.
            start = last.key().to_vec();
            start.push(0);
        }
        lock(&self.mirror).reset(read, revision);
        self.publish();
        Ok(revision)
    }

    /// Applies changes this process made at `revision`, then shows them.
    pub(crate) fn applied(&self, revision: i64, changes: Vec<(Key, Option<Value>)>) {
        {
            let mut mirror = lock(&self.mirror);
            for (key, value) in changes {
                mirror.apply(key, revision, value);
            }
        }
        self.publish();
    }

    /// Turns the mirror into the local copy (which tells each difference as an event).
    pub(crate) fn publish(&self) {
        let (nodes, entries) = lock(&self.mirror).contents();
        self.copy.replace_with(nodes, entries);
    }
}

/// Keys per page of a full read.
const PAGE: i64 = 1000;
/// The largest answer read from etcd: a page of large entries, or a watch response with every
/// key of a revoked lease. tonic's default is 4 MiB.
pub(crate) const MAX_MESSAGE: usize = 64 << 20;

/// The first key after every key that starts with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Registry for EtcdRegistry {
    fn bind_cluster(&self, cluster: &str) -> Result<(), RegistryError> {
        let configured = self.inner.config.cluster.as_deref();
        let started = self.inner.running.get().map(|r| r.keys.root().to_owned());
        if configured.is_some_and(|c| c != cluster)
            || started
                .is_some_and(|root| root != Keys::new(&self.inner.config.prefix, cluster).root())
        {
            return Err(RegistryError::Unavailable(format!(
                "the registry is for cluster `{}`, the node's certificate is for `{cluster}`",
                configured.unwrap_or("(another)")
            )));
        }
        *lock(&self.inner.bound) = Some(cluster.to_owned());
        Ok(())
    }

    fn join(&self, node: NodeInfo) -> RegistryFuture<'_, Result<(), RegistryError>> {
        Box::pin(async move {
            let running = self.running().await?;
            let _write = self.inner.writes.lock().await;
            let lease = crate::lease::grant(&self.inner, &running.client).await?;
            let revision = match crate::claim::claim(
                &self.inner,
                &running.client,
                &running.keys,
                &node,
                lease,
                &BTreeMap::new(),
            )
            .await
            {
                Ok(revision) => revision,
                Err(e) => {
                    let mut leases = running.client.lease_client();
                    let _ = self.inner.ask("revoking", leases.revoke(lease)).await;
                    return Err(e);
                }
            };
            let earlier = lock(&self.inner.mirror).keys_of(&node.name);
            let mut changes: Vec<_> = earlier
                .into_iter()
                .filter(|k| matches!(k, Key::Service { .. }))
                .map(|k| (k, None))
                .collect();
            changes.push((
                Key::Node(node.name.clone()),
                Some(Value::Node(node.clone())),
            ));
            self.inner.applied(revision, changes);
            let keeper = tokio::spawn(crate::lease::keep(
                Arc::downgrade(&self.inner),
                running.client.clone(),
                running.keys.clone(),
                node.name.clone(),
            ));
            let replaced = lock(&self.inner.own).insert(
                node.name.clone(),
                Own {
                    info: node,
                    lease,
                    entries: BTreeMap::new(),
                    dirty: false,
                    keeper: Some(keeper),
                },
            );
            if let Some(earlier) = replaced.and_then(|o| o.keeper) {
                earlier.abort();
            }
            Ok(())
        })
    }

    fn register(&self, entry: ServiceEntry) -> RegistryFuture<'_, Result<(), RegistryError>> {
        Box::pin(async move {
            let running = self.running().await?;
            let _write = self.inner.writes.lock().await;
            let node = entry.node.name.clone();
            let service = entry.description.name.clone();
            let lease = self.own_lease(&node)?;
            let value = keys::entry_value(&entry);
            if value.len() > self.inner.config.max_value {
                return Err(RegistryError::TooLarge {
                    service,
                    size: value.len(),
                    limit: self.inner.config.max_value,
                });
            }
            if let Some(own) = lock(&self.inner.own).get_mut(&node) {
                own.entries.insert(service.clone(), value.clone());
            }
            if lease == 0 {
                // Its lease is being granted again: the keeper writes the entry on the new one
                // (a put without a lease would outlive the node).
                if let Some(own) = lock(&self.inner.own).get_mut(&node) {
                    own.dirty = true;
                }
                return Ok(());
            }
            let key = running.keys.service(&node, &service);
            let mut kv = running.client.kv_client();
            let put = kv.put(key, value, Some(PutOptions::new().with_lease(lease)));
            match self.inner.ask("registering", put).await {
                Ok(done) => {
                    let revision = done.header().map_or(0, |h| h.revision());
                    let key = Key::Service { node, service };
                    self.inner
                        .applied(revision, vec![(key, Some(Value::Entry(Arc::new(entry))))]);
                }
                Err(e) => {
                    // Kept: the keeper writes it once etcd answers again.
                    tracing::warn!("registering `{service}` of node `{node}` waits for etcd: {e}");
                    if let Some(own) = lock(&self.inner.own).get_mut(&node) {
                        own.dirty = true;
                    }
                }
            }
            Ok(())
        })
    }

    fn deregister(
        &self,
        node: &str,
        service: &str,
    ) -> RegistryFuture<'_, Result<(), RegistryError>> {
        let (node, service) = (node.to_owned(), service.to_owned());
        Box::pin(async move {
            let running = self.running().await?;
            let _write = self.inner.writes.lock().await;
            if let Some(own) = lock(&self.inner.own).get_mut(&node) {
                own.entries.remove(&service);
            }
            let mut kv = running.client.kv_client();
            let delete = kv.delete(running.keys.service(&node, &service), None);
            match self.inner.ask("deregistering", delete).await {
                Ok(done) => {
                    let revision = done.header().map_or(0, |h| h.revision());
                    self.inner
                        .applied(revision, vec![(Key::Service { node, service }, None)]);
                }
                Err(e) => {
                    tracing::warn!(
                        "deregistering `{service}` of node `{node}` waits for etcd: {e}"
                    );
                    if let Some(own) = lock(&self.inner.own).get_mut(&node) {
                        own.dirty = true;
                    }
                }
            }
            Ok(())
        })
    }

    fn leave(&self, node: &str) -> RegistryFuture<'_, Result<(), RegistryError>> {
        let node = node.to_owned();
        Box::pin(async move {
            let running = self.running().await?;
            let _write = self.inner.writes.lock().await;
            let own = lock(&self.inner.own).remove(&node);
            let revision = match own {
                Some(own) => {
                    if let Some(keeper) = own.keeper {
                        keeper.abort();
                    }
                    // Revoking the lease deletes every key on it, in one revision.
                    let mut leases = running.client.lease_client();
                    match self.inner.ask("leaving", leases.revoke(own.lease)).await {
                        Ok(done) => done.header().map(|h| h.revision()),
                        Err(e) => {
                            tracing::warn!(
                                "node `{node}` left, but etcd did not take it ({e}): its entries go when its lease expires"
                            );
                            None
                        }
                    }
                }
                // Another process's node: its keys are deleted, its lease left to expire.
                None => {
                    let mut kv = running.client.kv_client();
                    let services = kv.delete(
                        running.keys.services_of(&node),
                        Some(DeleteOptions::new().with_prefix()),
                    );
                    self.inner
                        .ask("removing a node's services", services)
                        .await?;
                    let node_key = kv.delete(running.keys.node(&node), None);
                    let done = self.inner.ask("removing a node", node_key).await?;
                    done.header().map(|h| h.revision())
                }
            };
            if let Some(revision) = revision {
                let gone = lock(&self.inner.mirror).keys_of(&node);
                self.inner
                    .applied(revision, gone.into_iter().map(|k| (k, None)).collect());
            }
            Ok(())
        })
    }

    fn local_copy(&self) -> &LocalCopy {
        &self.inner.copy
    }

    fn halt(&self) -> RegistryFuture<'_, ()> {
        self.inner.halt();
        Box::pin(std::future::ready(()))
    }

    fn halt_node(&self, node: &str) -> RegistryFuture<'_, ()> {
        // Its keep-alives stop and its lease runs out, as if its process had crashed; the
        // other nodes of this process go on.
        if let Some(own) = lock(&self.inner.own).remove(node)
            && let Some(keeper) = own.keeper
        {
            keeper.abort();
        }
        Box::pin(std::future::ready(()))
    }
}

impl Inner {
    /// Stops keeping leases alive and watching, without telling etcd: as a crash would.
    fn halt(&self) {
        self.halted.store(true, Ordering::SeqCst);
        for own in lock(&self.own).values_mut() {
            if let Some(keeper) = own.keeper.take() {
                keeper.abort();
            }
        }
        if let Some(running) = self.running.get() {
            running.watch.abort();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.halt();
    }
}
