//! A node's admin endpoint, on an address of its own (`NodeBuilder::metrics`): `GET /metrics` in
//! Prometheus's text format, and `GET /` the live dashboard (`dashboard/`).
//!
//! 1. **Who may ask**: on a secure node, mutual TLS with the node's own certificate, and the
//!    scraper must present a certificate of the cluster's CA naming a member of its cluster
//!    (`cluster-node issue --node prometheus`), as every other port of the node asks. Plaintext
//!    only when asked by name (`metrics_insecure`), or on a node that is itself `insecure()`.
//! 2. **What a client can make it hold** (`docs/reliability.md`): at most [`MAX_CONNECTIONS`]
//!    connections at once; with every place taken, the oldest that has not yet sent a request
//!    gives its place up to the new one (else the new one is closed); [`OPENING_TIMEOUT`] for
//!    the TLS handshake and again for the request's head, at most [`MAX_HEAD`] bytes;
//!    [`TIMEOUT`] for the whole exchange. One request per connection: the answer says
//!    `Connection: close`. A page is made on a blocking thread, one at a time, and served
//!    again for 2 s (`node/metrics.rs`).
//! 3. **HTTP/1.1 by hand** (`http.rs`): a request line and headers, read up to the blank line;
//!    nothing else is parsed, no body is read.

pub(crate) mod dashboard;
mod http;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};
use tokio::net::TcpListener;

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::security::tls::Tls;

/// Connections served at once; more are closed as soon as they are accepted. A scraper opens one.
pub(crate) const MAX_CONNECTIONS: usize = 8;

/// The most bytes of a request's line and headers; past them, `431` and the connection closes.
pub(crate) const MAX_HEAD: usize = 8 << 10;

/// The time a connection has for its TLS handshake, its request and reading the answer.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);

/// The time a connection has for its TLS handshake, and then for its request's head: a
/// scraper sends both at once.
pub(crate) const OPENING_TIMEOUT: Duration = Duration::from_secs(2);

/// What the endpoint serves, made when asked.
pub(crate) struct Pages {
    /// `/metrics`: the text, or `None` when the node keeps no metrics of its own.
    pub(crate) metrics: Box<dyn Fn() -> Option<String> + Send + Sync>,
    /// `/`: the dashboard's HTML, or `None` once the node is gone.
    pub(crate) dashboard: Box<dyn Fn() -> Option<String> + Send + Sync>,
}

/// The pages, shared by the endpoint's connections.
pub(crate) type Render = Arc<Pages>;

/// Serves the endpoint on `addr` (in plaintext when `tls` is `None`) until `stop` turns true.
pub(crate) async fn serve(
    addr: SocketAddr,
    tls: Option<Arc<Tls>>,
    render: Render,
    mut stop: watch::Receiver<bool>,
) -> io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let acceptor = tls
        .as_ref()
        .map(|tls| tokio_rustls::TlsAcceptor::from(tls.server.clone()));
    let task = tokio::spawn(async move {
        let mut connections = JoinSet::new();
        let mut places: Vec<Place> = Vec::with_capacity(MAX_CONNECTIONS);
        let mut pause = false;
        loop {
            // After a failed accept (out of file handles, most likely): a pause, not a spin.
            if std::mem::take(&mut pause) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::select! {
                _ = stop.wait_for(|stopped| *stopped) => break,
                accepted = listener.accept() => {
                    let Ok((stream, peer)) = accepted else {
                        pause = true;
                        continue;
                    };
                    if places.len() >= MAX_CONNECTIONS && !make_room(&mut places) {
                        tracing::debug!("admin endpoint {local}: {MAX_CONNECTIONS} requests already, closed {peer}'s");
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    let opened = Arc::new(AtomicBool::new(false));
                    let exchange = connection(stream, acceptor.clone(), tls.clone(), render.clone(), opened.clone());
                    let abort = connections.spawn(async move {
                        match tokio::time::timeout(TIMEOUT, exchange).await {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => tracing::debug!("admin endpoint {local}: {peer}: {e}"),
                            Err(_) => tracing::debug!("admin endpoint {local}: {peer} took over {TIMEOUT:?}"),
                        }
                    });
                    places.push(Place { id: abort.id(), opened, abort });
                }
                Some(ended) = connections.join_next_with_id(), if !connections.is_empty() => {
                    let id = match ended {
                        Ok((id, ())) => id,
                        Err(e) => e.id(),
                    };
                    places.retain(|place| place.id != id);
                }
            }
        }
        // Dropping the set aborts the exchanges still running.
    });
    Ok((local, task))
}

/// A connection holding one of the [`MAX_CONNECTIONS`] places.
struct Place {
    id: tokio::task::Id,
    /// Whether it has passed its TLS handshake and sent a whole request head.
    opened: Arc<AtomicBool>,
    abort: tokio::task::AbortHandle,
}

/// With every place taken, gives the oldest connection that has not yet sent a request (a
/// connection that opened and said nothing, with or without a certificate) up for a new one;
/// false if every place is a request being answered. Without it, eight idle connections from
/// anyone who reaches the port would keep the scraper out for as long as they liked.
fn make_room(places: &mut Vec<Place>) -> bool {
    match places
        .iter()
        .position(|p| !p.opened.load(Ordering::Acquire))
    {
        Some(oldest) => {
            places.remove(oldest).abort.abort();
            true
        }
        None => false,
    }
}

/// One connection: the TLS handshake and the caller's certificate if secure, then one exchange.
/// `opened` is set once the handshake is done and a whole request head has been read.
async fn connection(
    stream: tokio::net::TcpStream,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    tls: Option<Arc<Tls>>,
    render: Render,
    opened: Arc<AtomicBool>,
) -> io::Result<()> {
    let (Some(acceptor), Some(tls)) = (acceptor, tls) else {
        return http::exchange(stream, &render, Ok(()), true, &opened).await;
    };
    // rustls has checked that the certificate chains to the cluster's CA; it must also name a
    // member of this node's cluster, as for a call.
    let stream = tokio::time::timeout(OPENING_TIMEOUT, acceptor.accept(stream))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no TLS handshake in time"))??;
    let member = tls
        .peer_of(stream.get_ref().1.peer_certificates())
        .map(drop);
    http::exchange(stream, &render, member, false, &opened).await
}
