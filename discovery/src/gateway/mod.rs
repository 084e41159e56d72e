//! The gateway: HTTP routed by path to a service *by name*, through a [`Balancer`] over any
//! resolver, honest about what it cannot reach (the seed's "Routing a gateway by name").
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use std::sync::Arc;
//! use cluster_discovery::balance::Balancer;
//! use cluster_discovery::client::EurekaClient;
//! use cluster_discovery::gateway::{Gateway, Upstream};
//! use cluster_discovery::resolve::Discovery;
//!
//! let registries = EurekaClient::new(["http://10.0.0.5:8761/eureka/"]);
//! let balancer = Arc::new(Balancer::new(Discovery::new(registries)));
//! let gateway = Gateway::new()
//!     .route("/api/orders/*", Upstream::service("orders", balancer.clone()).strip("/api"))
//!     .route("/api/billing/*", Upstream::service("billing", balancer).strip("/api"))
//!     .start(([0, 0, 0, 0], 8080).into())
//!     .await?;
//! // … on SIGTERM:
//! gateway.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! - `route.rs`: patterns, `strip`, the `Host` header, timeouts and attempts per route;
//! - `proxy.rs`: one request, step by step: `503` when the service resolves to nothing, `502`
//!   when the instance refused or broke the connection, `504` past the route's timeout, and
//!   which failures are retried on another instance;
//! - `headers.rs`: hop-by-hop headers removed, forwarded headers added;
//! - `body.rs`: bodies streamed both ways, with a limit;
//! - `upgrade.rs`: WebSocket (any upgrade) passed through;
//! - `serve.rs`: the accept loop, its limits, and the drain on shutdown;
//! - `config.rs`: the same, from a file (`cluster-discovery gateway --config FILE`);
//! - `functions/`: routes to the cluster's typed functions, called by name with JSON
//!   ([`Gateway::functions`], `docs/gateway-calls.md`).
//!
//! [`Balancer`]: crate::balance::Balancer

mod body;
mod config;
mod functions;
mod headers;
mod pool;
mod proxy;
mod route;
mod serve;
mod upgrade;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tower::retry::budget::TpsBudget;

pub use config::{ConfigError, GatewayConfig, RouteConfig};
pub use functions::{
    BODY_READ_TIMEOUT, DEFAULT_CALL_BUDGET, DEFAULT_MAX_CALL_BUDGET, DEFAULT_MAX_JSON_BYTES,
    EDGE_CALLER_KEY, EdgeCallers, FunctionRoute, FunctionsConfig, GATEWAY_REQUEST_KEY, KeyConfig,
    MAX_EDGE_NAME, MAX_META_BYTES, MAX_META_HEADERS, MAX_META_VALUE, NodeConfig, PARSED_AT_ONCE,
    TrustedHeaderConfig,
};
pub use route::{DEFAULT_ATTEMPTS, DEFAULT_TIMEOUT, Host, Upstream};

use crate::server::ServerTls;

/// The most worker threads a gateway takes.
const MAX_WORKERS: usize = 1024;

/// What a client (or an instance) can make the gateway hold, each with its default.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GatewayLimits {
    /// Client connections open at once: 1,024 (WebSocket tunnels included). One past it is
    /// answered 503 and closed.
    pub max_connections: usize,
    /// How long a client has to send a request's head, and how long an idle keep-alive
    /// connection stays open: 10 s (slow-loris).
    pub header_read_timeout: Duration,
    /// The largest request head, in bytes: 64 KiB (hyper's floor is 8 KiB). More is `431`.
    pub max_header_bytes: usize,
    /// The most header fields in a request head: 100 (hyper's default). More is `431`.
    pub max_headers: usize,
    /// The largest request body, in bytes: 1 GiB. It is streamed, never held, so this bounds
    /// what a client can push through, not memory. More is `413`.
    pub max_body_bytes: usize,
    /// The largest request body kept, while it is sent, so that an idempotent request whose
    /// connection broke can be sent to another instance: 64 KiB (as Linkerd). A larger body is
    /// streamed without a copy, and its request is not retried once an instance may have seen
    /// it. At most this much per request in flight.
    pub max_replay_bytes: usize,
    /// How long a response may wait for a client that does not read it: 30 s; then the
    /// connection is closed.
    pub write_timeout: Duration,
    /// How long a connection to an instance may take: 2 s. Past it, the instance is treated as
    /// refusing (cooled down, the request sent to another).
    pub connect_timeout: Duration,
    /// Idle keep-alive connections kept per instance by each worker: 32, each closed after 90 s
    /// idle (nginx's `keepalive` is per worker too).
    pub max_idle_per_instance: usize,
    /// How long [`RunningGateway::shutdown`] waits for requests in flight (and tunnels) to
    /// finish: 30 s.
    pub drain_timeout: Duration,
    /// How long an upgraded connection (a WebSocket tunnel) may carry no byte either way
    /// before it is closed: 5 min (nginx's `proxy_read_timeout` is 60 s). A tunnel holds a
    /// connection's place, so idle ones would otherwise fill `max_connections` for good.
    pub tunnel_idle_timeout: Duration,
}

impl Default for GatewayLimits {
    fn default() -> Self {
        Self {
            max_connections: 1_024,
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 64 * 1024,
            max_headers: 100,
            max_body_bytes: 1 << 30,
            max_replay_bytes: 64 * 1024,
            write_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(2),
            max_idle_per_instance: 32,
            drain_timeout: Duration::from_secs(30),
            tunnel_idle_timeout: Duration::from_secs(300),
        }
    }
}

/// The longest duration a limit takes: a year. Past it a deadline could overflow an `Instant`.
const LONGEST_LIMIT: Duration = Duration::from_secs(365 * 24 * 3600);

impl GatewayLimits {
    /// The first limit outside its range, and the range: [`Gateway::start`] refuses such
    /// limits, and a configuration file says so at start. A value past these would make
    /// every request fail (a zero timeout), or make hyper allocate without bound (a header
    /// count of billions: it reserves a slot for each, per request).
    pub fn check(&self) -> Result<(), (&'static str, &'static str)> {
        let within = |d: Duration| !d.is_zero() && d <= LONGEST_LIMIT;
        let failed = [
            (
                (1..=1_000_000).contains(&self.max_connections),
                "max_connections",
                "is 1 to 1,000,000",
            ),
            (
                within(self.header_read_timeout),
                "header_read_timeout",
                "is more than zero and at most a year",
            ),
            (
                (1..=16 << 20).contains(&self.max_header_bytes),
                "max_header_bytes",
                "is 1 to 16 MiB",
            ),
            (
                (1..=10_000).contains(&self.max_headers),
                "max_headers",
                "is 1 to 10,000",
            ),
            (
                within(self.write_timeout),
                "write_timeout",
                "is more than zero and at most a year",
            ),
            (
                within(self.connect_timeout),
                "connect_timeout",
                "is more than zero and at most a year",
            ),
            (
                self.max_idle_per_instance <= 100_000,
                "max_idle_per_instance",
                "is 0 to 100,000",
            ),
            (
                self.drain_timeout <= LONGEST_LIMIT,
                "drain_timeout",
                "is at most a year",
            ),
            (
                within(self.tunnel_idle_timeout),
                "tunnel_idle_timeout",
                "is more than zero and at most a year",
            ),
        ]
        .into_iter()
        .find(|(ok, _, _)| !ok);
        match failed {
            Some((_, setting, why)) => Err((setting, why)),
            None => Ok(()),
        }
    }
}

/// A gateway being configured: routes, limits, TLS. [`Gateway::start`] runs it.
#[derive(Debug, Default)]
#[must_use]
pub struct Gateway {
    routes: route::Routes,
    limits: GatewayLimits,
    tls: Option<ServerTls>,
    workers: Option<usize>,
    trust_forwarded: bool,
}

impl Gateway {
    /// No routes yet: every path is `404`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requests whose path matches `pattern` go to `upstream`. `/api/orders/*` matches
    /// `/api/orders` and every path under it; a pattern without `*` matches its path only. The
    /// most specific pattern wins, whatever the order of the calls.
    ///
    /// # Panics
    ///
    /// If `pattern` does not start with `/`, or has a `*` anywhere but as its last segment
    /// (`/api/*`): such a route would not match what it seems to, and a program that builds it
    /// is wrong from the start, as with axum's routes. A configuration file's routes are
    /// checked with an error instead ([`GatewayConfig::from_toml`]).
    pub fn route(mut self, pattern: &str, upstream: Upstream) -> Self {
        if let Err(why) = route::Pattern::check(pattern) {
            panic!("route `{pattern}`: {why}");
        }
        self.routes.add(pattern, upstream);
        self
    }

    /// Requests whose path matches `pattern` (`/api/*`) are calls of the cluster's functions:
    /// `POST /api/SERVICE/FUNCTION` with JSON arguments, `GET /api/_describe`
    /// ([`FunctionRoute`]). Patterns are as [`Gateway::route`]'s, and compete with them by
    /// specificity the same way.
    ///
    /// # Panics
    ///
    /// As [`Gateway::route`], for a pattern that would not match what it seems to.
    pub fn functions(mut self, pattern: &str, route: FunctionRoute) -> Self {
        if let Err(why) = route::Pattern::check(pattern) {
            panic!("route `{pattern}`: {why}");
        }
        self.routes.add_functions(pattern, route);
        self
    }

    /// The limits ([`GatewayLimits::default`] otherwise).
    pub fn limits(mut self, limits: GatewayLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Keeps the client's `X-Forwarded-For` and `Forwarded` and appends to them, for a gateway
    /// behind a proxy of your own that sets them. By default (`false`) the gateway is the edge:
    /// it replaces them with its own, naming the connection's peer, because an instance
    /// believes them (Spring's `ForwardedHeaderFilter` takes the first `Forwarded` element's
    /// `host` and `proto`), and anyone can send them.
    pub fn trust_forwarded(mut self, trust: bool) -> Self {
        self.trust_forwarded = trust;
        self
    }

    /// Serves HTTPS with this certificate (rustls on ring), instead of plain HTTP.
    pub fn tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// How many threads serve (one per core by default; 1 to 1,024): each accepts connections
    /// and serves them whole, with its own connections to instances (`serve.rs`).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = Some(workers.clamp(1, MAX_WORKERS));
        self
    }

    /// Listens on `addr` (port 0: one the OS picks) and serves.
    pub async fn start(self, addr: SocketAddr) -> std::io::Result<RunningGateway> {
        let listeners = serve::listeners(addr, self.worker_count()).await?;
        self.start_listening(listeners)
    }

    /// Serves on a listener already bound, shared by the workers (which then take connections
    /// as they wake, less evenly than the sockets of their own [`Gateway::start`] binds).
    pub fn start_on(self, listener: TcpListener) -> std::io::Result<RunningGateway> {
        let listeners = serve::shared(listener.into_std()?, self.worker_count())?;
        self.start_listening(listeners)
    }

    fn worker_count(&self) -> usize {
        self.workers.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
        })
    }

    fn start_listening(
        self,
        listeners: Vec<std::net::TcpListener>,
    ) -> std::io::Result<RunningGateway> {
        if let Err((setting, why)) = self.limits.check() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("the gateway's limit `{setting}` {why}"),
            ));
        }
        if let Some(why) = self.routes.functions().find_map(|f| f.check().err()) {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, why));
        }
        let addr = listeners[0].local_addr()?;
        let limits = self.limits;
        let shared = Arc::new(proxy::Shared {
            routes: self.routes,
            budget: TpsBudget::default(),
            max_body_bytes: limits.max_body_bytes,
            max_replay_bytes: limits.max_replay_bytes,
            tunnel_idle_timeout: limits.tunnel_idle_timeout,
            proto: if self.tls.is_some() { "https" } else { "http" },
            trust_forwarded: self.trust_forwarded,
            warn: crate::server::limits::warn::Throttle::new(Duration::from_secs(10)),
        });
        let tls = self.tls.as_ref().map(ServerTls::acceptor);
        let scheme = if tls.is_some() { "https" } else { "http" };
        let workers = serve::Workers::start(listeners, tls, shared, &limits)?;
        Ok(RunningGateway {
            addr,
            scheme,
            workers,
            drain: limits.drain_timeout,
        })
    }
}

/// A gateway serving; [`RunningGateway::shutdown`] drains it, and so does dropping it (in the
/// background).
#[derive(Debug)]
pub struct RunningGateway {
    addr: SocketAddr,
    scheme: &'static str,
    workers: serve::Workers,
    drain: Duration,
}

impl RunningGateway {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://ADDR` (or `https://`).
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// Stops accepting, lets the requests in flight finish (each connection closes after its
    /// response), and returns when all have, or after the drain timeout.
    pub async fn shutdown(mut self) {
        self.workers.drain();
        if tokio::time::timeout(self.drain, self.workers.ended())
            .await
            .is_err()
        {
            tracing::warn!(
                "connections still open after {:?}: closing them",
                self.drain
            );
            self.workers.stop();
            self.workers.ended().await;
        }
    }
}

/// An error and its causes, on one line: what the binary prints for a configuration it cannot
/// use, and what the log says of a failed attempt.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        next = cause.source();
    }
    s
}
