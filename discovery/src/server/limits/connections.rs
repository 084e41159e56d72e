//! Connections: at most `max_connections` at once (one past it is answered 503 and closed),
//! each holding its place until it closes, and closed when a response waits too long for a
//! client that does not read it. The head's timeout (slow-loris, idle keep-alive) is hyper's
//! `header_read_timeout`, and the request's is in the accept loop (`server/serve.rs`).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

/// The places for connections.
#[derive(Debug, Clone)]
pub(crate) struct Places {
    semaphore: Arc<Semaphore>,
    total: u32,
}

impl Places {
    /// `max` places (at least 1; at most what a semaphore counts).
    pub(crate) fn new(max: usize) -> Self {
        let total = max.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize)) as u32;
        Self {
            semaphore: Arc::new(Semaphore::new(total as usize)),
            total,
        }
    }

    pub(crate) fn total(&self) -> u32 {
        self.total
    }

    /// How many are taken: the connections open.
    pub(crate) fn open(&self) -> usize {
        (self.total as usize).saturating_sub(self.semaphore.available_permits())
    }

    /// A place, if one is free.
    pub(crate) fn take(&self) -> Option<OwnedSemaphorePermit> {
        self.semaphore.clone().try_acquire_owned().ok()
    }

    /// Waits until every connection has closed.
    pub(crate) async fn all_free(&self) {
        let _ = self.semaphore.acquire_many(self.total).await;
    }
}

/// What a connection past the limit is told, if its socket takes it at once: a plaintext
/// client reads why, and Eureka's clients try their next server.
const FULL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n\
connection: close\r\ncontent-length: 66\r\n\r\ntoo many connections: this server's limit is reached; try another\n";

/// Answers a connection past the limit with a 503 (plaintext only: a TLS client would not
/// read it), without waiting for the socket, and closes it.
pub(crate) fn refuse(tcp: TcpStream, plaintext: bool) {
    if plaintext {
        let _ = tcp.try_write(FULL);
    }
}

/// A connection's stream, holding its place until it is dropped, and failing a write that
/// makes no progress for `write_timeout` (the client does not read its response).
#[derive(Debug)]
pub(crate) struct Guarded<IO> {
    io: IO,
    _place: OwnedSemaphorePermit,
    write_timeout: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<IO> Guarded<IO> {
    pub(crate) fn new(io: IO, place: OwnedSemaphorePermit, write_timeout: Duration) -> Self {
        Self {
            io,
            _place: place,
            write_timeout,
            stalled: None,
        }
    }

    /// After a write that made no progress: an error once it has waited `write_timeout`.
    fn stall(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let timeout = self.write_timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(sleep.as_mut().poll(cx));
        Poll::Ready(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the client did not read its response for {timeout:?}"),
        ))
    }

    /// A write's outcome: progress resets the clock, waiting runs it.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.stall(cx).map(Err),
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.watch(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_flush(cx);
        this.watch(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_shutdown(cx);
        this.watch(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt as _;

    #[tokio::test(start_paused = true)]
    async fn a_write_nobody_reads_fails_after_the_timeout_and_frees_its_place() {
        let places = Places::new(1);
        let (ours, _theirs) = tokio::io::duplex(16);
        let mut io = Guarded::new(ours, places.take().unwrap(), Duration::from_secs(30));
        assert!(places.take().is_none(), "the only place is taken");
        let started = tokio::time::Instant::now();
        let err = io.write_all(&[0; 64]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        drop(io);
        assert!(places.take().is_some(), "dropped, its place is free");
    }

    #[test]
    fn places_are_at_least_one_and_fit_a_semaphore() {
        assert_eq!(Places::new(0).total(), 1);
        assert_eq!(Places::new(usize::MAX).total(), u32::MAX, "on 64 bits");
    }
}
