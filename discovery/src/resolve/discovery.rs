//! `Discovery`: registry servers, cached. When no server answers it goes on serving what it
//! last read, with no expiry, and says it is stale: an outage of the registry costs changes
//! (a new instance is not noticed, a departed one is still offered), never all traffic.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::{Endpoint, Resolve, ResolveError, ResolveFuture};
use crate::client::EurekaClient;
use crate::model::{Applications, Status};

/// Resolves through registry servers, with a cache that never expires.
#[derive(Debug)]
pub struct Discovery {
    client: EurekaClient,
    refresh: Duration,
    cache: Mutex<Option<Cached>>,
}

#[derive(Debug, Clone)]
struct Cached {
    apps: Applications,
    read_at: Instant,
    /// Set while the servers cannot be reached.
    stale_since: Option<Instant>,
}

impl Discovery {
    /// A resolver reading from these servers, refreshing at most every 30 s.
    pub fn new(client: EurekaClient) -> Self {
        Self {
            client,
            refresh: Duration::from_secs(30),
            cache: Mutex::new(None),
        }
    }

    /// How old the cached registry may get before a resolve reads it again (30 s by
    /// default, Eureka's fetch interval). A failed read keeps the cache.
    pub fn refresh(mut self, every: Duration) -> Self {
        self.refresh = every;
        self
    }

    /// Whether the last read failed and the answers come from an older read.
    pub fn is_stale(&self) -> bool {
        self.lock()
            .as_ref()
            .is_some_and(|c| c.stale_since.is_some())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Cached>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the registry now, whatever the age of the cache.
    pub async fn reload(&self) -> Result<(), crate::client::ClientError> {
        match self.client.applications().await {
            Ok(apps) => {
                let mut cache = self.lock();
                if cache.as_ref().is_some_and(|c| c.stale_since.is_some()) {
                    tracing::info!("the registry answers again: resolving from fresh data");
                }
                *cache = Some(Cached {
                    apps,
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

    fn lookup(apps: &Applications, service: &str) -> Vec<Endpoint> {
        let mut out: Vec<Endpoint> = apps
            .instances()
            .filter(|i| i.status == Status::Up)
            .filter(|i| i.app.eq_ignore_ascii_case(service) || i.serves_vip(service, false))
            .map(|i| Endpoint::new(i.ip_addr.clone(), i.port.port))
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

impl Resolve for Discovery {
    fn resolve<'a>(&'a self, service: &'a str) -> ResolveFuture<'a> {
        Box::pin(async move {
            let due = self
                .lock()
                .as_ref()
                .is_none_or(|c| c.read_at.elapsed() >= self.refresh);
            if due && let Err(e) = self.reload().await {
                let never_read = self.lock().is_none();
                if never_read {
                    return Err(ResolveError::Unavailable {
                        service: service.to_owned(),
                        source: Box::new(e),
                    });
                }
            }
            let cache = self.lock();
            let apps = &cache.as_ref().expect("read above").apps;
            let found = Self::lookup(apps, service);
            if found.is_empty() {
                Err(ResolveError::no_service(service))
            } else {
                Ok(found)
            }
        })
    }
}
