//! The gateway's workers and their accept loops.
//!
//! The gateway runs `workers` threads (one per core by default), each a single-threaded tokio
//! runtime that accepts on the one listening socket and serves the connections it accepted,
//! with its own pool of connections to instances: a request is read, forwarded, answered and
//! its response written back on one thread, never handed to another (nginx's workers, Envoy's
//! worker threads). A work-stealing runtime moves tasks between threads and wakes parked ones;
//! on this path that cost 40 % more CPU per request (`docs/benchmarks.md`, "The gateway").
//! What the workers share — routes, balancers, the retry budget, the connection limit — is
//! behind locks held for a few instructions.
//!
//! Each accept loop is on the registry server's pieces (`server/limits/connections.rs`): at
//! most `max_connections` at once over all workers (one past it is answered 503 and closed), a
//! response the client does not read fails its connection after `write_timeout`. Per
//! connection: the TLS handshake if any, within `header_read_timeout`; hyper's HTTP/1 with
//! upgrades, a head that must arrive within `header_read_timeout` and fit `max_header_bytes`.
//!
//! On shutdown the loops stop accepting, ask each connection to finish its request in flight
//! (hyper's graceful shutdown: the response is sent, then the connection closed), and the
//! workers end once every connection has closed; past the drain timeout they are stopped,
//! their runtimes dropped with what was left on them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;

use super::GatewayLimits;
use super::headers::Caller;
use super::pool::Pool;
use super::proxy::{Proxy, Shared};
use crate::server::limits::connections::{Guarded, Places, refuse};

/// The longest header timeout taken: a year (hyper adds it to an `Instant` unchecked).
const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

/// One listening socket per worker on `addr`, with `SO_REUSEPORT` on Linux: the kernel spreads
/// new connections over them evenly (by a hash of their addresses). Sharing one socket instead,
/// the worker that wakes first accepts a whole burst (the 64 connections a load balancer or
/// `wrk` opens at once) and the others sit idle. Before the group binds, a plain socket is
/// bound to the address and closed: an address already in use is an error, as without the
/// option, rather than a second gateway of the same user silently sharing the port.
pub(super) async fn listeners(
    addr: SocketAddr,
    count: usize,
) -> std::io::Result<Vec<std::net::TcpListener>> {
    if !cfg!(target_os = "linux") || count == 1 {
        let one = TcpListener::bind(addr).await?.into_std()?;
        return shared(one, count);
    }
    let addr = std::net::TcpListener::bind(addr)?.local_addr()?;
    (0..count)
        .map(|_| {
            let socket = match addr {
                SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
                SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
            };
            socket.set_reuseaddr(true)?;
            socket.set_reuseport(true)?;
            socket.bind(addr)?;
            socket.listen(1024)?.into_std()
        })
        .collect()
}

/// `count` handles on one listening socket (a listener the caller bound).
pub(super) fn shared(
    listener: std::net::TcpListener,
    count: usize,
) -> std::io::Result<Vec<std::net::TcpListener>> {
    (1..count).try_fold(vec![listener], |mut all, _| {
        all.push(all[0].try_clone()?);
        Ok(all)
    })
}

/// The most a connection to an instance buffers while reading: its answer's head must fit
/// (nginx's `proxy_buffer_size` is 4 or 8 KiB). A client that does not read a large answer
/// holds about five times this of the gateway's memory until `write_timeout`, whatever
/// `max_header_bytes` says of client heads.
const INSTANCE_READ_BUFFER: usize = 16 * 1024;

/// hyper's default bound on header fields (`proto::h1::DEFAULT_MAX_HEADERS`, not exported).
const HYPER_MAX_HEADERS: usize = 100;

/// What the workers are asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Serving,
    /// Stop accepting; finish the requests in flight.
    Draining,
    /// End now.
    Stopping,
}

/// The running workers. Dropped, they drain (as [`Workers::drain`]) in the background.
#[derive(Debug)]
pub(super) struct Workers {
    phase: watch::Sender<Phase>,
    /// Closed when every worker has ended: each holds a sender until its runtime is dropped.
    ended: mpsc::Receiver<()>,
}

impl Workers {
    /// Starts a worker on each listener.
    pub(super) fn start(
        listeners: Vec<std::net::TcpListener>,
        tls: Option<TlsAcceptor>,
        shared: Arc<Shared>,
        limits: &GatewayLimits,
    ) -> std::io::Result<Self> {
        let (phase, watching) = watch::channel(Phase::Serving);
        let (ended_tx, ended) = mpsc::channel(1);
        let places = Places::new(limits.max_connections);
        for (i, listener) in listeners.into_iter().enumerate() {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (tls, shared, limits, places, watching, ended_tx) = (
                tls.clone(),
                shared.clone(),
                limits.clone(),
                places.clone(),
                watching.clone(),
                ended_tx.clone(),
            );
            std::thread::Builder::new()
                .name(format!("gateway-{i}"))
                .spawn(move || {
                    runtime.block_on(worker(listener, tls, shared, limits, places, watching));
                    // The connections left (past the drain timeout) go with the runtime.
                    drop(runtime);
                    drop(ended_tx);
                })?;
        }
        Ok(Self { phase, ended })
    }

    /// Stops accepting; the requests in flight finish.
    pub(super) fn drain(&self) {
        self.phase.send_replace(Phase::Draining);
    }

    /// Ends every worker now, with whatever it still serves.
    pub(super) fn stop(&self) {
        self.phase.send_replace(Phase::Stopping);
    }

    /// Waits until every worker has ended.
    pub(super) async fn ended(&mut self) {
        while self.ended.recv().await.is_some() {}
    }
}

/// One worker: its accept loop until asked to drain (or the handle is gone), or until asked
/// to stop.
async fn worker(
    listener: std::net::TcpListener,
    tls: Option<TlsAcceptor>,
    shared: Arc<Shared>,
    limits: GatewayLimits,
    places: Places,
    phase: watch::Receiver<Phase>,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("a gateway worker cannot listen: {e}");
            return;
        }
    };
    let pool = Pool::new(
        limits.max_idle_per_instance,
        limits.connect_timeout,
        INSTANCE_READ_BUFFER,
    );
    let sweeping = pool.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(super::pool::SWEEP);
        loop {
            every.tick().await;
            sweeping.sweep();
        }
    });
    let proxy = Arc::new(Proxy { shared, pool });
    let mut draining = phase.clone();
    let drain = async move {
        // A handle dropped (the sender gone) drains too.
        let _ = draining.wait_for(|p| *p != Phase::Serving).await;
    };
    let mut stopping = phase;
    let stop = async move {
        if stopping.wait_for(|p| *p == Phase::Stopping).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = serve(listener, tls, proxy, limits, places, drain) => {}
        () = stop => {}
    }
}

/// Serves `listener` until `stopped` completes, then waits for the connections to finish
/// (those of every worker: `places` is shared).
async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    proxy: Arc<Proxy>,
    limits: GatewayLimits,
    places: Places,
    stopped: impl Future<Output = ()>,
) {
    let (close, closing) = watch::channel(false);
    tokio::pin!(stopped);
    loop {
        let accepted = tokio::select! {
            () = &mut stopped => break,
            a = listener.accept() => a,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors, say: wait rather than spin.
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(place) = places.take() else {
            crate::server::limits::warn::throttled_warn!(
                proxy.shared.warn,
                "connections",
                "max_connections",
                "refused a connection from {peer}: all {} places are taken (max_connections)",
                places.total()
            );
            refuse(tcp, tls.is_none());
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (proxy, limits, tls, closing) =
            (proxy.clone(), limits.clone(), tls.clone(), closing.clone());
        tokio::spawn(async move {
            let write_timeout = limits.write_timeout;
            match tls {
                None => {
                    connection(
                        Guarded::new(tcp, place, write_timeout),
                        peer,
                        None,
                        proxy,
                        &limits,
                        closing,
                    )
                    .await
                }
                Some(tls) => {
                    match tokio::time::timeout(limits.header_read_timeout, tls.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            // A client certificate, verified by the handshake against the
                            // client CA: the node it names (`EdgeCallers::certificates`).
                            let certificate = tls
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|chain| chain.first())
                                .and_then(|c| cluster::security::certificate_names(c).ok())
                                .map(|(_, node)| node);
                            connection(
                                Guarded::new(tls, place, write_timeout),
                                peer,
                                certificate,
                                proxy,
                                &limits,
                                closing,
                            )
                            .await;
                        }
                        Ok(Err(e)) => tracing::debug!("TLS handshake with {peer} failed: {e}"),
                        Err(_) => tracing::debug!("TLS handshake with {peer} timed out"),
                    }
                }
            }
        });
    }
    drop(listener);
    let _ = close.send(true);
    places.all_free().await;
}

async fn connection<IO>(
    io: IO,
    peer: SocketAddr,
    certificate: Option<String>,
    proxy: Arc<Proxy>,
    limits: &GatewayLimits,
    mut closing: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let caller = Arc::new(
        Caller::new(peer.ip(), proxy.shared.proto, proxy.shared.trust_forwarded)
            .with_certificate(certificate),
    );
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let (proxy, caller) = (proxy.clone(), caller.clone());
        async move { Ok::<_, std::convert::Infallible>(proxy.handle(req, &caller).await) }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout.min(LONGEST))
        // hyper's floor is 8 KiB; the head must fit the read buffer.
        .max_buf_size(limits.max_header_bytes.max(8192));
    // Left unset at hyper's own default (100), its parser keeps the header slots on the stack
    // instead of allocating and filling them for every request.
    if limits.max_headers != HYPER_MAX_HEADERS {
        http.max_headers(limits.max_headers);
    }
    let conn = http
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(conn);
    let mut finishing = false;
    loop {
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!("connection from {peer}: {e}");
                }
                return;
            }
            _ = closing.wait_for(|c| *c), if !finishing => {
                conn.as_mut().graceful_shutdown();
                finishing = true;
            }
        }
    }
}
