//! The registry server: Eureka's REST API, leases settled at each request and on a timer,
//! self-preservation, a response cache,
//! peer forwarding, the dashboard, and HTTP Basic credentials and TLS ([`Access`],
//! [`ServerTls`]).

mod access;
mod cache;
mod clock;
mod config;
mod dashboard;
pub(crate) mod limits;
mod peers;
mod routes;
mod serve;
mod store;
mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Request;
use tokio::sync::oneshot;

pub use access::{Access, Credentials};
pub use clock::Clock;
pub use config::{Dashboard, ServerConfig};
pub use limits::Limits;
pub use peers::{Action, Item, MARKER, ReplicationStats};
pub use routes::REPLICATION_HEADER;
pub use store::{Health, RegisterError, Renewed};
pub use tls::ServerTls;

use limits::connections::Places;
use limits::warn::{Source, Throttle};
use peers::Peers;
use store::Store;

/// What the handlers share.
#[derive(Debug)]
pub(crate) struct Shared {
    store: Store,
    /// `GET apps` and `GET apps/delta`, pre-serialised (see [`cache`]).
    cache: cache::ResponseCache,
    peers: Peers,
    dashboard: Dashboard,
    config: ServerConfig,
    access: Access,
    /// The warnings a client can provoke, at most one per source and interval.
    throttle: Arc<Throttle>,
}

/// A Eureka-compatible registry server, to configure and then [`start`](Self::start) on a port
/// or turn into an in-process [`service`](Self::service).
///
/// Who may write is said before it starts: [`access`](Self::access) with credentials
/// ([`Access::new`]), or [`Access::open`] by name. Without either, [`start`](Self::start) and
/// [`start_on`](Self::start_on) refuse (`InvalidInput`), as `cluster-discovery serve` does
/// without `--user`, `--peer-user` or `--open`.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct RegistryServer {
    config: ServerConfig,
    clock: Clock,
    peers: Vec<String>,
    dashboard: Dashboard,
    /// `None` until [`RegistryServer::access`] is called: a server does not start open unless
    /// asked to by name.
    access: Option<Access>,
    tls: Option<ServerTls>,
    peer_ca: Vec<u8>,
}

impl RegistryServer {
    /// A server with Eureka's defaults, no peers, the dashboard behind a token, and no
    /// [`access`](Self::access) yet: give one before it starts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Leases, delta window, self-preservation, limits.
    pub fn config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }

    /// The clock leases are measured with (the system's by default).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The other servers, by base URL (`http://host:port/eureka/`). This server's own URL may
    /// be in the list (one list for every server): pass it to [`RegistryServer::own_url`].
    pub fn peers<I, S>(mut self, peers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.peers = peers.into_iter().map(Into::into).collect();
        self
    }

    /// Removes this server's own URL from the peers.
    pub fn own_url(mut self, url: &str) -> Self {
        let own = peers::base_url(url);
        self.peers.retain(|p| peers::base_url(p) != own);
        self
    }

    /// Who may see the dashboard.
    pub fn dashboard(mut self, dashboard: Dashboard) -> Self {
        self.dashboard = dashboard;
        self
    }

    /// Who may write, replicate and read: [`Access::new`] (credentials) or [`Access::open`]
    /// (anyone who reaches the port). Required before [`start`](Self::start). The peer
    /// credentials are also what this server sends when it replicates to its peers.
    pub fn access(mut self, access: Access) -> Self {
        self.access = Some(access);
        self
    }

    /// The access configured, or why the server does not start without one.
    fn configured_access(&self) -> std::io::Result<&Access> {
        self.access.as_ref().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no access configured: give RegistryServer::access(Access::new(clients, peers)) \
                 for credentials, or RegistryServer::access(Access::open()) to let anyone who \
                 reaches the port write (behind an authenticating proxy, or on a laptop)",
            )
        })
    }

    /// Serves HTTPS with this certificate and key (plaintext by default).
    pub fn tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// A CA (PEM) that the replication client trusts for `https://` peers, besides the usual
    /// web roots. Checked when the server starts.
    pub fn peer_ca(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.peer_ca = pem.into();
        self
    }

    /// The client this server replicates and pulls the registry with.
    fn http(&self) -> std::io::Result<reqwest::Client> {
        let mut builder = reqwest::Client::builder();
        if !self.peer_ca.is_empty() {
            for ca in tls::ca_certificates(&self.peer_ca)? {
                builder = builder.add_root_certificate(ca);
            }
        }
        builder.build().map_err(std::io::Error::other)
    }

    fn shared(self, http: &reqwest::Client) -> Arc<Shared> {
        let timeout = self.config.peer_timeout;
        // In process (`service`), no access means open: there is no port, and whoever holds
        // the service is its only caller. `start_on` has refused by now.
        let access = self.access.unwrap_or_else(Access::open);
        let as_peer = access.peers.clone();
        let throttle = Arc::new(Throttle::new(self.config.limits.warning_interval));
        Arc::new_cyclic(|weak| Shared {
            store: Store::new(self.config.clone(), self.clock),
            cache: cache::ResponseCache::default(),
            peers: if self.peers.is_empty() {
                Peers::none()
            } else {
                Peers::start(
                    self.peers,
                    http.clone(),
                    weak.clone(),
                    peers::Settings {
                        timeout,
                        credentials: as_peer,
                        max_queue: self.config.limits.max_peer_queue,
                        max_answer_bytes: self.config.limits.max_body_bytes.saturating_mul(8),
                        throttle: throttle.clone(),
                    },
                )
            },
            dashboard: self.dashboard,
            config: self.config,
            access,
            throttle,
        })
    }

    /// What an operator should know before trusting `access`, logged at start.
    fn warn_about(&self, access: &Access, addr: SocketAddr) {
        if !access.is_secured() {
            tracing::warn!(
                "no credentials configured: anyone who reaches {addr} can register, cancel, \
                 override statuses and replicate (see --user in docs/discovery.md)"
            );
            return;
        }
        if self.tls.is_none() {
            tracing::warn!(
                "credentials are configured without TLS: the passwords cross the network in \
                 clear (base64 is no encryption); give --tls-cert and --tls-key"
            );
        }
        if !self.peers.is_empty() && access.peers.is_none() {
            tracing::warn!(
                "peers are configured but no peer credentials: peers will refuse this \
                 server's replication, and this server theirs"
            );
        }
        if self
            .peers
            .iter()
            .any(|p| p.starts_with("http://") && access.peers.is_some())
        {
            tracing::warn!(
                "a peer is named by http://: the peer password crosses the network in clear"
            );
        }
    }

    /// The server as an in-process service (no socket): for [`crate::client::Transport`]'s
    /// in-process variant and for tests on a paused clock. Peers are not contacted at start.
    /// With no port there is no one to keep out but the holder's own code, so it needs no
    /// [`access`](Self::access): without one it is open.
    pub fn service(self) -> Service {
        let http = self.http().unwrap_or_default();
        let shared = self.shared(&http);
        Service {
            router: routes::router(shared.clone()),
            shared,
        }
    }

    /// Binds `addr`, pulls the registry from a peer, and serves until
    /// [`RunningServer::shutdown`] (or the handle is dropped).
    ///
    /// When no peer gave it a registry, the server warms up (see [`ServerConfig::warm_up`]):
    /// reads answer 503 for [`ServerConfig::warm_up_window`] (one renewal interval by
    /// default), while registrations and heartbeats rebuild the registry.
    ///
    /// Fails with `InvalidInput`, before binding, when no [`access`](Self::access) was given.
    pub async fn start(self, addr: SocketAddr) -> std::io::Result<RunningServer> {
        self.configured_access()?;
        self.start_on(tokio::net::TcpListener::bind(addr).await?)
            .await
    }

    /// Like [`RegistryServer::start`], on a listener already bound: servers that name each
    /// other as peers bind first, so that each knows the other's port without a race for it.
    pub async fn start_on(
        self,
        listener: tokio::net::TcpListener,
    ) -> std::io::Result<RunningServer> {
        let access = self.configured_access()?;
        let addr = listener.local_addr()?;
        let timeout = self.config.peer_timeout;
        let http = self.http()?;
        self.warn_about(access, addr);
        let tls = self.tls.clone();
        let shared = self.shared(&http);
        let synced = peers::sync_from_peers(&shared, &http, timeout).await;
        if synced == 0 && shared.config.warm_up {
            let window = warm_up_window(&shared.config);
            let now = shared.store.clock().now_ms();
            shared
                .store
                .begin_warm_up(now.saturating_add(limits::numbers::millis(window)));
            tracing::info!(
                "the registry is empty: reads answer 503 for {window:?} while instances \
                 register again (warm-up)"
            );
        }
        let router = routes::router(shared.clone());
        let expiry = tokio::spawn(expiry_timer(Arc::downgrade(&shared))).abort_handle();
        let (stop, stopped) = oneshot::channel::<()>();
        let stopped = async move {
            let _ = stopped.await;
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let places = Places::new(shared.config.limits.max_connections);
        let task = tokio::spawn(serve::serve(
            listener,
            tls.as_ref().map(ServerTls::acceptor),
            router,
            places.clone(),
            (shared.config.limits.clone(), shared.throttle.clone()),
            stopped,
        ));
        tracing::info!(
            "registry server on {scheme}://{addr}/eureka/ ({synced} instances from peers)"
        );
        Ok(RunningServer {
            addr,
            scheme,
            shared,
            places,
            stop: Some(stop),
            task: Some(task),
            expiry,
        })
    }
}

/// How long a server that starts empty answers reads with 503: the configured window, or one
/// renewal interval, and never longer than the longest renewal interval an instance gets.
fn warm_up_window(config: &ServerConfig) -> std::time::Duration {
    config
        .warm_up_window
        .unwrap_or(config.renewal_interval)
        .min(config.limits.max_lease)
}

/// How often a running server settles its registry with no request to do it: expiry and
/// self-preservation are also decided at every request (at the cost of counting the deadlines
/// past, `store/deadlines.rs`), so this only bounds how late a lease expires on an idle
/// server. Eureka's eviction timer runs every 60 s.
const EXPIRY_TICK: std::time::Duration = std::time::Duration::from_secs(1);

async fn expiry_timer(shared: std::sync::Weak<Shared>) {
    let mut tick = tokio::time::interval(EXPIRY_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        shared.store.tick();
    }
}

/// A server as an in-process service: requests go through the same routes, without a socket.
#[derive(Debug, Clone)]
pub struct Service {
    router: axum::Router,
    shared: Arc<Shared>,
}

impl Service {
    /// Answers one request.
    pub async fn call(&self, req: Request) -> axum::response::Response {
        use tower::ServiceExt as _;
        let mut req = routes::normalize(req);
        req.extensions_mut().insert(Source(None));
        match self.router.clone().oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        }
    }

    /// The registry's state at a glance.
    pub fn health(&self) -> Health {
        self.shared.store.health()
    }
}

/// A running server. Dropping it stops it.
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    scheme: &'static str,
    shared: Arc<Shared>,
    places: Places,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    expiry: tokio::task::AbortHandle,
}

impl RunningServer {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://addr/eureka/` (`https://` with TLS), as clients and peers name
    /// it.
    pub fn url(&self) -> String {
        format!("{}://{}/eureka/", self.scheme, self.addr)
    }

    /// The registry's state at a glance.
    pub fn health(&self) -> Health {
        self.shared.store.health()
    }

    /// Replication traffic so far.
    pub fn replication(&self) -> ReplicationStats {
        self.shared.peers.stats()
    }

    /// The connections open now (at most [`Limits::max_connections`]).
    pub fn connections(&self) -> usize {
        self.places.open()
    }

    /// Stops accepting, finishes the requests in flight, and returns.
    pub async fn shutdown(mut self) {
        self.expiry.abort();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.expiry.abort();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Instance;

    #[tokio::test(start_paused = true)]
    async fn the_timer_expires_a_quiet_lease_with_no_request_and_ends_with_the_server() {
        let clock = Clock::manual(1_000_000);
        let shared = RegistryServer::new()
            .clock(clock.clone())
            .shared(&reqwest::Client::new());
        let x = Instance::new("a", "h", 1).with_id("x");
        shared.store.register("A", x).unwrap();
        let timer = tokio::spawn(expiry_timer(Arc::downgrade(&shared)));
        clock.advance(std::time::Duration::from_secs(91));
        assert_eq!(shared.store.held(), 1, "not settled yet");
        tokio::time::sleep(EXPIRY_TICK * 2).await;
        assert_eq!(shared.store.held(), 0, "expired by the timer alone");
        drop(shared);
        tokio::time::sleep(EXPIRY_TICK * 2).await;
        assert!(timer.is_finished(), "the timer ends with the server");
    }
}
