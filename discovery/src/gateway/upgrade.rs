//! Upgrades (WebSocket, or any `Connection: upgrade`): once the instance answers `101`, the
//! client's connection and the instance's are joined, bytes copied both ways until either side
//! closes, or until no byte has gone either way for `tunnel_idle_timeout`. The client's
//! connection keeps its place among the gateway's connections meanwhile (the place is owned by
//! its stream), so tunnels count against `max_connections`: without the idle timeout, idle
//! tunnels would hold every place for good.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::pool::Lease;
use crate::balance::Pick;

/// Joins the two sides in a task of their own; the pick counts the tunnel as a request in
/// flight to the instance until it closes. The connection's lease is held until hyper has
/// handed its socket over, and never goes back to the pool.
pub(crate) fn join(
    client: OnUpgrade,
    instance: OnUpgrade,
    pick: Pick,
    lease: Lease,
    idle_timeout: Duration,
) {
    tokio::spawn(async move {
        let joined = tokio::try_join!(client, instance);
        drop(lease);
        let (client, instance) = match joined {
            Ok(both) => both,
            Err(e) => {
                tracing::debug!("upgrade to {} failed: {e}", pick.endpoint());
                return;
            }
        };
        tracing::debug!("tunnel to {} open", pick.endpoint());
        let start = Instant::now();
        let last = Arc::new(AtomicU64::new(0));
        let mut client = Active::new(TokioIo::new(client), start, &last);
        let mut instance = Active::new(TokioIo::new(instance), start, &last);
        let copy = tokio::io::copy_bidirectional(&mut client, &mut instance);
        tokio::pin!(copy);
        loop {
            let idle_since = start + Duration::from_millis(last.load(Ordering::Relaxed));
            tokio::select! {
                copied = &mut copy => {
                    if let Err(e) = copied {
                        tracing::debug!("tunnel to {} ended: {e}", pick.endpoint());
                    }
                    break;
                }
                () = tokio::time::sleep_until(idle_since + idle_timeout) => {
                    // Bytes may have gone since the sleep began: only then is it idle.
                    let last = start + Duration::from_millis(last.load(Ordering::Relaxed));
                    if last + idle_timeout <= Instant::now() {
                        tracing::debug!(
                            "tunnel to {} closed: idle for {idle_timeout:?}",
                            pick.endpoint()
                        );
                        break;
                    }
                }
            }
        }
        drop(pick);
    });
}

/// A side of a tunnel that notes when it last read a byte (milliseconds after `start`).
struct Active<T> {
    io: T,
    start: Instant,
    last: Arc<AtomicU64>,
}

impl<T> Active<T> {
    fn new(io: T, start: Instant, last: &Arc<AtomicU64>) -> Self {
        Self {
            io,
            start,
            last: last.clone(),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Active<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.last.store(ms, Ordering::Relaxed);
        }
        read
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Active<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
