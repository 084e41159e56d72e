//! The caller's side of a connection: a reply frame that has begun to arrive and does not
//! finish within the frame timeout ends the connection. Without it, a provider that sends half
//! a frame and stops (broken, or hostile) would hold the pooled connection, and every call sent
//! on it would time out one by one, never failing over.
//!
//! tarpc's client reads through tokio's `Framed`, whose state is private; so the bytes are
//! watched underneath it, by the same rule that frames them: a 4-byte big-endian length, then
//! that many bytes.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// A stream whose reads are watched for a frame that stalls.
pub(super) struct Watched<S> {
    io: S,
    timeout: Duration,
    /// Bytes of the current frame's length still to come (0 to 4), and its length so far.
    header_left: usize,
    header: u32,
    /// Bytes of the current frame's body still to come.
    body_left: u64,
    /// When the current frame began, if one has.
    began: Option<Instant>,
    timer: Pin<Box<Sleep>>,
}

impl<S> Watched<S> {
    pub(super) fn new(io: S, timeout: Duration) -> Self {
        Self {
            io,
            timeout,
            header_left: 4,
            header: 0,
            body_left: 0,
            began: None,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
        }
    }

    /// Follows the frames through `bytes`, just read.
    fn saw(&mut self, mut bytes: &[u8]) {
        if !bytes.is_empty() && self.began.is_none() {
            self.began = Some(Instant::now());
        }
        while !bytes.is_empty() {
            if self.header_left > 0 {
                self.header = (self.header << 8) | u32::from(bytes[0]);
                self.header_left -= 1;
                bytes = &bytes[1..];
                if self.header_left == 0 {
                    self.body_left = u64::from(self.header);
                }
            } else {
                let n = (self.body_left).min(bytes.len() as u64);
                self.body_left -= n;
                bytes = &bytes[n as usize..];
            }
            if self.header_left == 0 && self.body_left == 0 {
                // A frame complete: the next begins with whatever follows.
                self.header_left = 4;
                self.header = 0;
                self.began = (!bytes.is_empty()).then(Instant::now);
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.saw(&buf.filled()[before..]);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let Some(began) = this.began else {
                    return Poll::Pending;
                };
                let due = began + this.timeout;
                if due <= Instant::now() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "a reply frame began {:?} ago and is not complete (frame timeout)",
                            this.timeout
                        ),
                    )));
                }
                if this.timer.deadline() != due {
                    this.timer.as_mut().reset(due);
                }
                if this.timer.as_mut().poll(cx).is_ready() {
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn frames_are_followed_across_reads() {
        let mut w = Watched::new(tokio::io::empty(), Duration::from_secs(1));
        let frame = |body: &[u8]| {
            let mut f = (body.len() as u32).to_be_bytes().to_vec();
            f.extend_from_slice(body);
            f
        };
        let two = [frame(b"hello"), frame(b"")].concat();
        w.saw(&two);
        assert!(w.began.is_none(), "two whole frames: none begun");
        let third = frame(b"abcdef");
        w.saw(&third[..2]);
        assert!(w.began.is_some(), "half a length");
        w.saw(&third[2..7]);
        assert!(w.began.is_some(), "half a body");
        w.saw(&third[7..]);
        assert!(w.began.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_frame_that_stalls_ends_the_read_at_the_timeout() {
        let (mut provider, caller) = tokio::io::duplex(1 << 16);
        let mut caller = Watched::new(caller, Duration::from_secs(10));
        provider.write_all(&[0, 0, 0, 10, 1, 2]).await.unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(caller.read(&mut buf).await.unwrap(), 6);
        let start = Instant::now();
        let stalled = caller.read(&mut buf).await;
        assert_eq!(stalled.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), Duration::from_secs(10));
    }
}
