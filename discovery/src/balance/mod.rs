//! A [`Balancer`] over any [`Resolve`]: which instance of a service the next request goes to.
//!
//! 1. The resolver answers the service's endpoints (`Discovery` answers only instances whose
//!    status is `UP`: one marked `DOWN`, `OUT_OF_SERVICE` or `STARTING` in Eureka is never
//!    offered, so never chosen).
//! 2. Endpoints the caller has already tried for this request are set aside (a retry goes to
//!    another instance), and so are those cooling down after a failed connection
//!    (`state.rs`: 2 s, doubling with each failure in a row up to 32 s, as the cluster's outlier
//!    ejection does).
//! 3. Of what is left, two at random, and the one with fewer requests in flight (power of two
//!    choices: the load of the busiest instance stays within `ln ln n` of the mean, without
//!    the herd a "least loaded of all" pick makes).
//! 4. If every endpoint left is cooling down, they are chosen anyway (Envoy's and Finagle's
//!    "panic" rule): an estate whose instances all blinked at once recovers with them, not
//!    a cool-down later.

mod state;

use std::collections::{HashMap, HashSet};

/// foldhash, seeded per map: looked up on every request (as the core's `fast_map.rs`).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

pub use state::Pick;
use state::Slot;

use crate::resolve::{Endpoint, Resolve, ResolveError};

/// The cool-down after a first failed connection (the cluster's `outlier_cooldown` default).
pub const DEFAULT_COOL_DOWN: Duration = Duration::from_secs(2);

/// Chooses instances of services, through a resolver.
pub struct Balancer {
    resolver: Arc<dyn Resolve>,
    cool_down: Duration,
    /// Per service, per endpoint: requests in flight and cool-down. Only services that
    /// resolved are here, and only their current endpoints (pruned at each pick), so the map
    /// is bounded by what the resolver answers.
    services: Mutex<FastMap<String, FastMap<Endpoint, Arc<Slot>>>>,
}

impl std::fmt::Debug for Balancer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Balancer")
            .field("cool_down", &self.cool_down)
            .finish_non_exhaustive()
    }
}

/// No instance could be chosen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PickError {
    /// The resolver had nothing (or could not be asked).
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// Every instance the resolver answered was already tried for this request.
    #[error("every instance of `{service}` was tried")]
    AllTried {
        /// The service.
        service: String,
    },
}

impl Balancer {
    /// A balancer over `resolver` (`Static`, `Dns`, `Discovery`, or any other).
    pub fn new(resolver: impl Resolve) -> Self {
        Self::from_arc(Arc::new(resolver))
    }

    /// A balancer over a shared resolver (as [`ResolverConfig::build`] makes one).
    ///
    /// [`ResolverConfig::build`]: crate::resolve::ResolverConfig::build
    pub fn from_arc(resolver: Arc<dyn Resolve>) -> Self {
        Self {
            resolver,
            cool_down: DEFAULT_COOL_DOWN,
            services: Mutex::default(),
        }
    }

    /// How long an instance whose connection failed is passed over the first time (2 s by
    /// default); each failure in a row doubles it, up to 16 times as long.
    pub fn cool_down(mut self, first: Duration) -> Self {
        self.cool_down = first;
        self
    }

    /// An instance of `service`, other than those in `tried`. The [`Pick`] counts as a request
    /// in flight to it until dropped.
    pub async fn pick(&self, service: &str, tried: &[Endpoint]) -> Result<Pick, PickError> {
        let endpoints = self.resolver.resolve(service).await?;
        let now = Instant::now();
        let mut services = self.services.lock().unwrap_or_else(|p| p.into_inner());
        if !services.contains_key(service) {
            services.insert(service.to_owned(), FastMap::default());
        }
        let known = services.get_mut(service).expect("inserted above");
        for e in &endpoints {
            if !known.contains_key(e) {
                known.insert(e.clone(), Arc::default());
            }
        }
        // Forget endpoints the resolver no longer answers: a departed instance's record
        // must not outlive it, nor the map grow with every deploy.
        if known.len() > endpoints.len() {
            let current: HashSet<&Endpoint> = endpoints.iter().collect();
            known.retain(|e, _| current.contains(e));
        }
        let open: Vec<(&Endpoint, &Arc<Slot>)> = endpoints
            .iter()
            .filter(|e| !tried.contains(e))
            .filter_map(|e| known.get_key_value(e))
            .collect();
        if open.is_empty() {
            return Err(PickError::AllTried {
                service: service.to_owned(),
            });
        }
        let ready = open.iter().filter(|(_, s)| !s.cooling(now)).count();
        let (endpoint, slot) = if ready == open.len() {
            two_choices(&open)
        } else if ready == 0 {
            tracing::debug!("every instance of {service} left is cooling down: trying one anyway");
            two_choices(&open)
        } else {
            let ready: Vec<_> = open
                .iter()
                .filter(|(_, s)| !s.cooling(now))
                .copied()
                .collect();
            two_choices(&ready)
        };
        Ok(Pick::new(endpoint.clone(), slot.clone(), self.cool_down))
    }
}

/// Two at random, the one with fewer requests in flight (`from` is not empty).
fn two_choices<'a>(from: &[(&'a Endpoint, &'a Arc<Slot>)]) -> (&'a Endpoint, &'a Arc<Slot>) {
    if from.len() == 1 {
        return from[0];
    }
    let a = fastrand::usize(..from.len());
    // A second index different from the first.
    let b = (a + 1 + fastrand::usize(..from.len() - 1)) % from.len();
    let (x, y) = (from[a], from[b]);
    if y.1.in_flight() < x.1.in_flight() {
        y
    } else {
        x
    }
}

#[cfg(test)]
mod tests;
