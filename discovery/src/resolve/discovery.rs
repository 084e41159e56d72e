//! `Discovery`: registry servers, cached. When no server answers it goes on serving what it
//! last read, with no expiry, and says it is stale: an outage of the registry costs changes
//! (a new instance is not noticed, a departed one is still offered), never all traffic.
//!
//! A resolve never waits for the registry once something is cached: when the cache is due it
//! answers from it and starts one read in the background. Reading inline would put a registry
//! round trip (or its timeout, in an outage) on the caller's path, and every caller that found
//! the cache due at once would start its own read.
//!
//! Before anything is cached, a resolve waits for the first read, which also runs detached:
//! a caller that gives up (its route's timeout, a client gone) does not cancel it, so a
//! registry slower than a route's timeout still fills the cache for the next request. A
//! first read that failed is not tried again for [`FIRST_READ_RETRY`]: meanwhile resolves
//! fail at once with its error, not one registry round trip each.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{Endpoint, Resolve, ResolveError, ResolveFuture, is_host};
use crate::client::{ClientError, EurekaClient};
use crate::gateway::error_chain;
use crate::model::{Applications, Status};

/// How long a failed first read stands before a resolve starts another: in an outage at
/// start, the registry gets a read a second from each resolver, not one per request.
pub const FIRST_READ_RETRY: Duration = Duration::from_secs(1);

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
    /// Counts the reads that ended, well or not: what the callers waiting for the first
    /// read wait on.
    reads: watch::Sender<u64>,
    /// The last failed read while nothing was cached yet, and when it ended.
    /// Kept as its message: every resolve until the next read fails with it.
    first_failure: Mutex<Option<(Instant, String)>>,
}

#[derive(Debug, Clone)]
struct Cached {
    services: Index,
    /// When the servers last answered: the age of `services`.
    read_at: Instant,
    /// When a read last ended, well or not: the next is due `refresh` after it.
    tried_at: Instant,
    /// Set while the servers cannot be reached.
    stale_since: Option<Instant>,
    /// When the outage was last logged at WARN: once a minute, not at every read.
    warned_at: Option<Instant>,
}

/// How often an outage of the registry is logged at WARN while it lasts.
const STALE_WARNING_EVERY: Duration = Duration::from_secs(60);

impl Discovery {
    /// A resolver reading from these servers, refreshing at most every 30 s.
    pub fn new(client: EurekaClient) -> Self {
        Self {
            shared: Arc::new(Shared {
                client,
                cache: Mutex::new(None),
                refreshing: AtomicBool::new(false),
                reads: watch::Sender::new(0),
                first_failure: Mutex::new(None),
            }),
            refresh: Duration::from_secs(30),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// How old the cached registry may get before a resolve starts a background read of it
    /// (30 s by default, Eureka's fetch interval; zero starts one for every resolve that finds
    /// none in flight, which tests use). A failed read keeps the cache.
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

    /// Waits for a first read (the one in flight, or one started now) and answers from it; or
    /// fails at once with the error of a first read that failed less than
    /// [`FIRST_READ_RETRY`] ago.
    async fn first_read(&self, service: &str) -> Result<Vec<Endpoint>, ResolveError> {
        // Subscribed before the cache is looked at again, so that a read ending in between is
        // seen either in the cache or as a change.
        let mut reads = self.shared.reads.subscribe();
        if let Some(answer) = self.cached(service) {
            return answer;
        }
        let failed = self.shared.first_failure();
        match failed {
            Some((at, e)) if at.elapsed() < FIRST_READ_RETRY => {
                return Err(unavailable(service, e));
            }
            _ => self.refresh_in_background(),
        }
        // The read runs detached: if this caller gives up, the read goes on for the next one.
        let _ = reads.changed().await;
        match self.cached(service) {
            Some(answer) => answer,
            None => Err(match self.shared.first_failure() {
                Some((_, e)) => unavailable(service, e),
                None => ResolveError::no_service(service),
            }),
        }
    }

    /// The answer from the cache, if anything was read.
    fn cached(&self, service: &str) -> Option<Result<Vec<Endpoint>, ResolveError>> {
        let found = Self::lookup(&self.shared.lock().as_ref()?.services, service);
        Some(found_or_none(service, found))
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
        .filter(|i| i.status == Status::Up && i.port.enabled && is_host(&i.ip_addr))
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

/// An answer: the endpoints, or none of the service.
fn found_or_none(service: &str, found: Vec<Endpoint>) -> Result<Vec<Endpoint>, ResolveError> {
    if found.is_empty() {
        Err(ResolveError::no_service(service))
    } else {
        Ok(found)
    }
}

fn unavailable(service: &str, why: String) -> ResolveError {
    ResolveError::Unavailable {
        service: service.to_owned(),
        source: why.into(),
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Cached>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn first_failure(&self) -> Option<(Instant, String)> {
        let failure = self.first_failure.lock().unwrap_or_else(|p| p.into_inner());
        failure.clone()
    }

    /// Reads the registry into the cache; then tells whoever waits for a read.
    async fn reload(&self) -> Result<(), ClientError> {
        let result = self.read().await;
        self.reads.send_modify(|n| *n += 1);
        result
    }

    async fn read(&self) -> Result<(), ClientError> {
        match self.client.applications().await {
            Ok(apps) => {
                // Built before the lock is taken: every resolve takes it.
                let services = index(&apps);
                for i in apps.instances().filter(|i| !is_host(&i.ip_addr)) {
                    tracing::debug!(
                        "instance {:?} of {:?} is not offered: its ipAddr {:?} is not an address",
                        i.id(),
                        i.app,
                        i.ip_addr
                    );
                }
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
                let now = Instant::now();
                *cache = Some(Cached {
                    services,
                    read_at: now,
                    tried_at: now,
                    stale_since: None,
                    warned_at: None,
                });
                drop(cache);
                *self.first_failure.lock().unwrap_or_else(|p| p.into_inner()) = None;
                Ok(())
            }
            Err(e) => {
                let mut cache = self.lock();
                match cache.as_mut() {
                    Some(c) => {
                        let since = *c.stale_since.get_or_insert_with(Instant::now);
                        let said = format!(
                            "no registry server answers ({}); serving the registry as read \
                             {:.0?} ago (stale for {:.0?}) until a read succeeds",
                            error_chain(&e),
                            c.read_at.elapsed(),
                            since.elapsed(),
                        );
                        if c.warned_at
                            .is_none_or(|at| at.elapsed() >= STALE_WARNING_EVERY)
                        {
                            c.warned_at = Some(Instant::now());
                            tracing::warn!("{said}");
                        } else {
                            tracing::debug!("{said}");
                        }
                        // Try again after another refresh interval, not on every call.
                        c.tried_at = Instant::now();
                        Err(e)
                    }
                    None => {
                        drop(cache);
                        let why = error_chain(&e);
                        tracing::warn!(
                            "{why}, and nothing was read yet: the services resolved through \
                             {} fail (a gateway answers 503) until a read succeeds; next read \
                             in {FIRST_READ_RETRY:?} at the earliest",
                            self.client
                                .servers()
                                .iter()
                                .map(|s| crate::client::redacted(s))
                                .collect::<Vec<_>>()
                                .join(", "),
                        );
                        *self.first_failure.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some((Instant::now(), why));
                        Err(e)
                    }
                }
            }
        }
    }
}

impl Resolve for Discovery {
    fn resolve<'a>(&'a self, service: &'a str) -> ResolveFuture<'a> {
        Box::pin(async move {
            // One lock per resolve (a gateway resolves for every request).
            let (found, due) = match self.shared.lock().as_ref() {
                None => (None, false),
                Some(c) => (
                    Some(Self::lookup(&c.services, service)),
                    c.tried_at.elapsed() >= self.refresh,
                ),
            };
            let Some(found) = found else {
                // Nothing to answer from yet.
                return self.first_read(service).await;
            };
            if due {
                self.refresh_in_background();
            }
            found_or_none(service, found)
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

    #[test]
    fn an_ip_addr_that_is_no_address_is_not_offered() {
        let apps = Applications::group(
            "1",
            "",
            [
                "10.0.0.9\r\nX-Injected: 1",
                "u@evil",
                "a b",
                "",
                "orders-1.svc.local",
                "::1",
            ]
            .into_iter()
            .enumerate()
            .map(|(n, ip)| Instance::new("orders", ip, 8080).with_id(n.to_string())),
        );
        assert_eq!(
            Discovery::lookup(&index(&apps), "orders"),
            [
                Endpoint::new("::1", 8080),
                Endpoint::new("orders-1.svc.local", 8080)
            ]
        );
    }
}
