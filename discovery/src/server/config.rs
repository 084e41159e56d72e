//! What a registry server can be told.

use std::time::Duration;

use super::Limits;

/// Leases, the delta window, self-preservation and limits. Every default is Eureka's unless it
/// says otherwise.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The heartbeat interval assumed for an instance that does not say (`leaseInfo`):
    /// 30 s, as Eureka.
    pub renewal_interval: Duration,
    /// How long after its last heartbeat an instance that does not say counts as gone:
    /// 90 s, as Eureka. Unlike Eureka (whose lease bug makes it 2 × the duration), an instance
    /// expires 1 × its duration after its last heartbeat.
    pub lease_duration: Duration,
    /// How long a change stays in `GET apps/delta`: 180 s, as Eureka.
    pub delta_retention: Duration,
    /// Whether to keep serving instances when too many go quiet at once: on, as Eureka.
    pub self_preservation: bool,
    /// The share of instances that must still be heartbeating for expiry to go on: 0.85, as
    /// Eureka (more than 15 % quiet at once is taken for a network failure, not an outage).
    pub renewal_percent_threshold: f64,
    /// The smallest registry self-preservation applies to: 8 (not Eureka's; the seed's). With
    /// fewer, a proportion fires on the first ordinary failure.
    pub self_preservation_min_instances: usize,
    /// How long a peer has to answer a forwarded batch or a start-up fetch: 2 s.
    pub peer_timeout: Duration,
    /// Whether a server that starts on a port with an empty registry (no peer gave it one)
    /// answers reads with 503 for [`warm_up_window`](Self::warm_up_window): on, as Eureka
    /// (`waitTimeInMsWhenSyncEmpty`, whose reads answer 403 for 5 min). A restarted server is
    /// empty until its instances' next heartbeats (404) make them register again; clients that
    /// read it meanwhile would take "nothing is registered", or "only the instances that came
    /// back so far are", for the truth and drop the other addresses, where a 503 makes them
    /// keep their copy or ask another server. Writes are accepted throughout, and rebuild the
    /// registry; none of them ends the window early. An in-process
    /// [`Service`](super::Service) never warms up.
    pub warm_up: bool,
    /// How long the warm-up lasts: `None` (the default) for one `renewal_interval`, within
    /// which each instance that heartbeats at that interval sends its next heartbeat, is
    /// answered 404 and registers again (one round trip past the window at worst). Make it
    /// longer for instances that heartbeat less often. Taken as at most
    /// [`Limits::max_lease`], the longest renewal interval an instance gets: a longer window
    /// would wait for nobody.
    pub warm_up_window: Option<Duration>,
    /// What a client or a peer can make the server hold, and the ranges of numbers from the
    /// wire: see [`Limits`].
    pub limits: Limits,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            renewal_interval: Duration::from_secs(30),
            lease_duration: Duration::from_secs(90),
            delta_retention: Duration::from_secs(180),
            self_preservation: true,
            renewal_percent_threshold: 0.85,
            self_preservation_min_instances: 8,
            peer_timeout: Duration::from_secs(2),
            warm_up: true,
            warm_up_window: None,
            limits: Limits::default(),
        }
    }
}

/// Who may see the dashboard (`/discovery`, `/discovery/registry.json`), which lists every host
/// and port in the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dashboard {
    /// Requests that bring this token (`Authorization: Bearer …`) see it; others get 401. With
    /// the default (`Token(None)`: no token configured) nobody does, and the 401 says how to
    /// configure one.
    Token(Option<String>),
    /// Anyone who reaches the port: only behind an authenticating proxy.
    Open,
    /// No dashboard routes at all (404).
    Off,
}

impl Default for Dashboard {
    /// `Token(None)`: behind authentication, and closed until a token is configured.
    fn default() -> Self {
        Dashboard::Token(None)
    }
}

impl Dashboard {
    /// Behind this token.
    pub fn token(token: impl Into<String>) -> Self {
        Dashboard::Token(Some(token.into()))
    }
}
