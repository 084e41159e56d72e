//! `Discovery`: registry servers, cached. When no server answers it goes on serving what it
//! last read, with no expiry, and says it is stale: an outage of the registry costs changes
//! (a new instance is not noticed, a departed one is still offered), never all traffic.
//!
//! A resolve never waits for the registry once something is cached: when the cache is due it
//! answers from it and starts one read in the background. Reading inline would put a registry
//! round trip (or its timeout, in an outage) on the caller's path, and every caller that found
//! the cache due at once would start its own read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{Endpoint, Resolve, ResolveError, ResolveFuture};
use crate::client::EurekaClient;
use crate::model::{Applications, Status};

/// Resolves through registry servers, with a cache that never expires.
///
/// A service's endpoints are its `UP` instances (by application name or VIP), at `ipAddr` and
/// the plain `port`. An instance whose plain port is disabled (`port.@enabled = false`, one
/// that serves TLS on `securePort` only) is not among them: an [`Endpoint`] carries no scheme,
/// and is spoken to in plain HTTP.
#[derive(Debug)]
pub struct Discovery {
    shared: Arc<Shared>,
    refresh: Duration,
    /// Held by the callers that wait for the first read, so that they make one between them.
    first: tokio::sync::Mutex<()>,
    /// The runtime the resolver was made on, where background reads run: not on whichever
    /// gateway worker found the cache due, whose connections would wait for the read and the
    /// parse of the whole registry.
    runtime: Option<tokio::runtime::Handle>,
}

/// What the background reads share with the resolver.
#[derive(Debug)]
struct Shared {
    client: EurekaClient,
    cache: Mutex<Option<Cached>>,
    /// Set while a background read is in flight: at most one at a time.
    refreshing: AtomicBool,
}

#[derive(Debug, Clone)]
struct Cached {
    services: Index,
    read_at: Instant,
    /// Set while the servers cannot be reached.
    stale_since: Option<Instant>,
}

impl Discovery {
    /// A resolver reading from these servers, refreshing at most every 30 s.
    pub fn new(client: EurekaClient) -> Self {
        Self {
            shared: Arc::new(Shared {
                client,
                cache: Mutex::new(None),
                refreshing: AtomicBool::new(false),
            }),
            refresh: Duration::from_secs(30),
            first: tokio::sync::Mutex::new(()),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// How old the cached registry may get before a resolve starts a background read of it
    /// (30 s by default, Eureka's fetch interval). A failed read keeps the cache.
    pub fn refresh(mut self, every: Duration) -> Self {
        self.refresh = every;
        self
    }

    /// Whether the last read failed and the answers come from an older read.
    pub fn is_stale(&self) -> bool {
        self.shared
            .lock()
            .as_ref()
            .is_some_and(|c| c.stale_since.is_some())
    }

    /// Reads the registry now, whatever the age of the cache, and waits for the read.
    pub async fn reload(&self) -> Result<(), crate::client::ClientError> {
        self.shared.reload().await
    }

    /// Starts a read in the background, unless one is in flight already.
    fn refresh_in_background(&self) {
        if self.shared.refreshing.swap(true, Ordering::SeqCst) {
            return;
        }
        // Cleared however the read ends, even if its task is dropped or panics.
        struct Done(Arc<Shared>);
        impl Drop for Done {
            fn drop(&mut self) {
                self.0.refreshing.store(false, Ordering::SeqCst);
            }
        }
        let done = Done(self.shared.clone());
        let read = async move {
            // A failure is logged and kept in the cache's staleness.
            let _ = done.0.reload().await;
        };
        match &self.runtime {
            Some(runtime) => drop(runtime.spawn(read)),
            None => drop(tokio::spawn(read)),
        }
    }

    /// The `UP` instances of `service` (by application or VIP) at their plain port, from the
    /// index of the last read.
    fn lookup(services: &Index, service: &str) -> Vec<Endpoint> {
        let key: std::borrow::Cow<'_, str> = if service.bytes().any(|b| b.is_ascii_uppercase()) {
            service.to_ascii_lowercase().into()
        } else {
            service.into()
        };
        services.get(&*key).cloned().unwrap_or_default()
    }
}

/// The registry as read, by service: each `UP` instance under its application's name and each
/// VIP it serves, lower-cased (names match without regard to ASCII case, as Eureka's), so that
/// a resolve is one lookup, not a scan of every instance: a gateway resolves for every request,
/// and a registry may hold 100,000 instances.
///
/// An instance whose plain port is disabled (`port.@enabled = false`: it serves TLS on
/// `securePort` only, or nothing) is left out: an [`Endpoint`] has no scheme, and its users
/// (the gateway) speak plain HTTP to it, which the port that is enabled would not answer. Each
/// read names them at DEBUG ([`Shared::reload`]).
type Index = HashMap<String, Vec<Endpoint>>;

fn index(apps: &Applications) -> Index {
    let mut index = Index::new();
    for i in apps
        .instances()
        .filter(|i| i.status == Status::Up && i.port.enabled)
    {
        let endpoint = Endpoint::new(i.ip_addr.clone(), i.port.port);
        let vips = i.vip_address.as_deref().unwrap_or_default().split(',');
        let mut names: Vec<String> = std::iter::once(i.app.as_str())
            .chain(vips)
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_ascii_lowercase)
            .collect();
        names.sort();
        names.dedup();
        for name in names {
            index.entry(name).or_default().push(endpoint.clone());
        }
    }
    for endpoints in index.values_mut() {
        endpoints.sort();
        endpoints.dedup();
    }
    index
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Cached>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn reload(&self) -> Result<(), crate::client::ClientError> {
        match self.client.applications().await {
            Ok(apps) => {
                // Built before the lock is taken: every resolve takes it.
                let services = index(&apps);
                for i in apps.instances().filter(|i| !i.port.enabled) {
                    tracing::debug!(
                        "instance {} of {} is not offered: its plain port {} is disabled \
                         (securePort {}, {}), and resolved addresses are spoken to in plain HTTP",
                        i.id(),
                        i.app,
                        i.port.port,
                        i.secure_port.port,
                        if i.secure_port.enabled {
                            "enabled"
                        } else {
                            "disabled too"
                        }
                    );
                }
                let mut cache = self.lock();
                if cache.as_ref().is_some_and(|c| c.stale_since.is_some()) {
                    tracing::info!("the registry answers again: resolving from fresh data");
                }
                *cache = Some(Cached {
                    services,
                    read_at: Instant::now(),
                    stale_since: None,
                });
                Ok(())
            }
            Err(e) => {
                let mut cache = self.lock();
                if let Some(c) = cache.as_mut() {
                    let since = *c.stale_since.get_or_insert_with(Instant::now);
                    tracing::warn!(
                        "no registry server answers ({e}); serving the registry as read {:?} ago \
                         (stale for {:?})",
                        c.read_at.elapsed(),
                        since.elapsed()
                    );
                    // Try again after another refresh interval, not on every call.
                    c.read_at = Instant::now();
                }
                Err(e)
            }
        }
    }
}

impl Resolve for Discovery {
    fn resolve<'a>(&'a self, service: &'a str) -> ResolveFuture<'a> {
        Box::pin(async move {
            let due = self
                .shared
                .lock()
                .as_ref()
                .map(|c| c.read_at.elapsed() >= self.refresh);
            match due {
                Some(true) => self.refresh_in_background(),
                Some(false) => {}
                None => {
                    // Nothing to answer from yet: wait for the first read (one for all callers).
                    let _one = self.first.lock().await;
                    let never_read = self.shared.lock().is_none();
                    if never_read && let Err(e) = self.shared.reload().await {
                        return Err(ResolveError::Unavailable {
                            service: service.to_owned(),
                            source: Box::new(e),
                        });
                    }
                }
            }
            let cache = self.shared.lock();
            let services = &cache.as_ref().expect("read above").services;
            let found = Self::lookup(services, service);
            if found.is_empty() {
                Err(ResolveError::no_service(service))
            } else {
                Ok(found)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Instance;

    #[test]
    fn the_index_answers_by_application_and_vip_whatever_the_case() {
        let mut a = Instance::new("ORDERS", "10.0.0.1", 8080).with_id("a");
        a.vip_address = Some("orders.internal, Shop ,,orders".into());
        let mut b = Instance::new("orders", "10.0.0.2", 8080).with_id("b");
        b.vip_address = Some("shop".into());
        let mut down = Instance::new("orders", "10.0.0.3", 8080).with_id("c");
        down.status = Status::Down;
        let apps = Applications::group("1", "", [a, b, down]);
        let services = index(&apps);
        let both = [
            Endpoint::new("10.0.0.1", 8080),
            Endpoint::new("10.0.0.2", 8080),
        ];
        assert_eq!(Discovery::lookup(&services, "orders"), both);
        assert_eq!(Discovery::lookup(&services, "Orders"), both);
        assert_eq!(Discovery::lookup(&services, "SHOP"), both);
        assert_eq!(Discovery::lookup(&services, "orders.internal"), both[..1]);
        assert!(Discovery::lookup(&services, "").is_empty());
        assert!(Discovery::lookup(&services, "billing").is_empty());
    }
}
