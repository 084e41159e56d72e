//! The registry server: Eureka's REST API, leases decided at read time, self-preservation,
//! peer forwarding, and the dashboard.

mod clock;
mod config;
mod dashboard;
mod peers;
mod routes;
mod store;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::ServiceExt as _;
use axum::extract::Request;
use tokio::sync::oneshot;
use tower::Layer as _;

pub use clock::Clock;
pub use config::{Dashboard, ServerConfig};
pub use peers::{Action, Item, MARKER, ReplicationStats};
pub use routes::REPLICATION_HEADER;
pub use store::{Health, RegisterError, Renewed};

use peers::Peers;
use store::Store;

/// What the handlers share.
#[derive(Debug)]
pub(crate) struct Shared {
    store: Store,
    peers: Peers,
    dashboard: Dashboard,
    config: ServerConfig,
}

/// A Eureka-compatible registry server, to configure and then [`start`](Self::start) on a port
/// or turn into an in-process [`service`](Self::service).
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct RegistryServer {
    config: ServerConfig,
    clock: Clock,
    peers: Vec<String>,
    dashboard: Dashboard,
}

impl RegistryServer {
    /// A server with Eureka's defaults, no peers, the dashboard behind a token.
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

    fn shared(self, http: &reqwest::Client) -> Arc<Shared> {
        let timeout = self.config.peer_timeout;
        Arc::new_cyclic(|weak| Shared {
            store: Store::new(self.config.clone(), self.clock),
            peers: if self.peers.is_empty() {
                Peers::none()
            } else {
                Peers::start(self.peers, http.clone(), weak.clone(), timeout)
            },
            dashboard: self.dashboard,
            config: self.config,
        })
    }

    /// The server as an in-process service (no socket): for [`crate::client::Transport`]'s
    /// in-process variant and for tests on a paused clock. Peers are not contacted at start.
    pub fn service(self) -> Service {
        let http = reqwest::Client::new();
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
    /// reads answer 503 for one renewal interval, or until an instance registers.
    pub async fn start(self, addr: SocketAddr) -> std::io::Result<RunningServer> {
        self.start_on(tokio::net::TcpListener::bind(addr).await?)
            .await
    }

    /// Like [`RegistryServer::start`], on a listener already bound: servers that name each
    /// other as peers bind first, so that each knows the other's port without a race for it.
    pub async fn start_on(
        self,
        listener: tokio::net::TcpListener,
    ) -> std::io::Result<RunningServer> {
        let addr = listener.local_addr()?;
        let timeout = self.config.peer_timeout;
        let http = reqwest::Client::builder()
            .build()
            .map_err(std::io::Error::other)?;
        let shared = self.shared(&http);
        let synced = peers::sync_from_peers(&shared, &http, timeout).await;
        if synced == 0 && shared.config.warm_up {
            let window = shared.config.renewal_interval;
            let now = shared.store.clock().now_ms();
            shared
                .store
                .begin_warm_up(now.saturating_add(window.as_millis() as u64));
            tracing::info!(
                "the registry is empty: reads answer 503 for {window:?}, or until an instance \
                 registers (warm-up)"
            );
        }
        let router = routes::router(shared.clone());
        let app = axum::middleware::map_request(|r: Request| async move { routes::normalize(r) })
            .layer(router);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let serve =
                axum::serve(listener, app.into_make_service()).with_graceful_shutdown(async move {
                    let _ = stopped.await;
                });
            if let Err(e) = serve.await {
                tracing::error!("the registry server stopped: {e}");
            }
        });
        tracing::info!("registry server on http://{addr}/eureka/ ({synced} instances from peers)");
        Ok(RunningServer {
            addr,
            shared,
            stop: Some(stop),
            task: Some(task),
        })
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
        let req = routes::normalize(req);
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
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl RunningServer {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://addr/eureka/`, as clients and peers name it.
    pub fn url(&self) -> String {
        format!("http://{}/eureka/", self.addr)
    }

    /// The registry's state at a glance.
    pub fn health(&self) -> Health {
        self.shared.store.health()
    }

    /// Replication traffic so far.
    pub fn replication(&self) -> ReplicationStats {
        self.shared.peers.stats()
    }

    /// Stops accepting, finishes the requests in flight, and returns.
    pub async fn shutdown(mut self) {
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
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
