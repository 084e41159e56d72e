//! The accept loop, in place of `axum::serve`, which sets no timer on hyper's connections (so
//! no header timeout) and caps nothing. Per connection, in order:
//!
//! 1. a place (`limits::connections::Places`), or a 503 and the connection closed;
//! 2. with TLS, the handshake, within `header_read_timeout`;
//! 3. hyper's HTTP/1 with a timer: a request's head must arrive within `header_read_timeout`,
//!    which also closes a keep-alive connection idle that long;
//! 4. each request answered within `request_timeout` (its body read included), else 408;
//! 5. a response the client does not read fails the connection after `write_timeout`
//!    (`limits::connections::Guarded`).
//!
//! On shutdown the loop stops accepting, asks each connection to finish the request in
//! flight, and returns once every place is free.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

use super::limits::Limits;
use super::limits::connections::{Guarded, Places, refuse};
use super::limits::warn::{Source, Throttle, throttled_warn};
use super::routes;

/// The longest header timeout taken: a year (the timer cannot represent every duration).
const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

/// What every connection shares.
#[derive(Clone)]
struct Context {
    router: axum::Router,
    limits: Limits,
    throttle: Arc<Throttle>,
    closing: watch::Receiver<bool>,
}

/// Serves `listener` until `stopped` completes, then waits for the connections to finish.
pub(super) async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: axum::Router,
    places: Places,
    (limits, throttle): (Limits, Arc<Throttle>),
    stopped: impl Future<Output = ()>,
) {
    let (close, closing) = watch::channel(false);
    let context = Context {
        router,
        limits,
        throttle,
        closing,
    };
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
                throttled_warn!(
                    context.throttle,
                    "accept",
                    "listener",
                    "accepting a connection: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(place) = places.take() else {
            throttled_warn!(
                context.throttle,
                "connections",
                peer.ip(),
                "refused a connection: {} are open, the limit (--max-connections)",
                places.total()
            );
            refuse(tcp, tls.is_none());
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (context, tls) = (context.clone(), tls.clone());
        tokio::spawn(async move {
            let timeout = context.limits.write_timeout;
            match tls {
                None => connection(Guarded::new(tcp, place, timeout), peer, context).await,
                Some(tls) => {
                    if let Some(tls) = handshake(&tls, tcp, peer, &context.limits).await {
                        connection(Guarded::new(tls, place, timeout), peer, context).await;
                    }
                }
            }
        });
    }
    drop(listener);
    let _ = close.send(true);
    places.all_free().await;
}

async fn handshake(
    tls: &TlsAcceptor,
    tcp: TcpStream,
    peer: SocketAddr,
    limits: &Limits,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    match tokio::time::timeout(limits.header_read_timeout, tls.accept(tcp)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(e)) => {
            tracing::debug!("TLS handshake with {peer} failed: {e}");
            None
        }
        Err(_) => {
            tracing::debug!("TLS handshake with {peer} timed out");
            None
        }
    }
}

async fn connection<IO>(io: IO, peer: SocketAddr, context: Context)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Context {
        router,
        limits,
        throttle,
        mut closing,
    } = context;
    let request_timeout = limits.request_timeout;
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let (router, throttle) = (router.clone(), throttle.clone());
        async move {
            let mut req = routes::normalize(req.map(Body::new));
            req.extensions_mut().insert(Source(Some(peer.ip())));
            let what = format!("{} {}", req.method(), req.uri().path());
            let answered = tokio::time::timeout(request_timeout, router.oneshot(req)).await;
            Ok::<_, std::convert::Infallible>(match answered {
                Ok(Ok(response)) => response,
                Ok(Err(never)) => match never {},
                Err(_) => {
                    throttled_warn!(
                        throttle,
                        "request-timeout",
                        peer.ip(),
                        "{what} took longer than {request_timeout:?} (a slow body?): 408"
                    );
                    timed_out(request_timeout)
                }
            })
        }
    });
    // hyper adds the timeout to an Instant unchecked: Duration::MAX would panic there.
    let header_timeout = limits.header_read_timeout.min(LONGEST);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let conn = http.serve_connection(TokioIo::new(io), service);
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

fn timed_out(limit: Duration) -> Response {
    (
        StatusCode::REQUEST_TIMEOUT,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CONNECTION, "close"),
        ],
        format!("the request took longer than {limit:?}, its body included\n"),
    )
        .into_response()
}
