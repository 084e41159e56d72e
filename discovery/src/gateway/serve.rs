//! The gateway's accept loop, on the registry server's pieces (`server/limits/connections.rs`):
//! at most `max_connections` at once (one past it is answered 503 and closed), a response the
//! client does not read fails its connection after `write_timeout`. Per connection: the TLS
//! handshake if any, within `header_read_timeout`; hyper's HTTP/1 with upgrades, a head that
//! must arrive within `header_read_timeout` and fit `max_header_bytes`.
//!
//! On shutdown the loop stops accepting, asks each connection to finish its request in flight
//! (hyper's graceful shutdown: the response is sent, then the connection closed), and returns
//! once every connection has closed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::GatewayLimits;
use super::proxy::Proxy;
use crate::server::limits::connections::{Guarded, Places, refuse};

/// The longest header timeout taken: a year (hyper adds it to an `Instant` unchecked).
const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

/// Serves `listener` until `stopped` completes, then waits for the connections to finish.
pub(super) async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    proxy: Arc<Proxy>,
    limits: GatewayLimits,
    stopped: impl Future<Output = ()>,
) {
    let places = Places::new(limits.max_connections);
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
            tracing::debug!("refused {peer}: {} connections are open", places.total());
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
                        proxy,
                        &limits,
                        closing,
                    )
                    .await
                }
                Some(tls) => {
                    match tokio::time::timeout(limits.header_read_timeout, tls.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            connection(
                                Guarded::new(tls, place, write_timeout),
                                peer,
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
    proxy: Arc<Proxy>,
    limits: &GatewayLimits,
    mut closing: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let proxy = proxy.clone();
        async move { Ok::<_, std::convert::Infallible>(proxy.handle(req, peer).await) }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout.min(LONGEST))
        // hyper's floor is 8 KiB; the head must fit the read buffer.
        .max_buf_size(limits.max_header_bytes.max(8192))
        .max_headers(limits.max_headers);
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
