//! The caller's side of a connection, beneath `calling.rs`: length-prefixed bincode frames (the
//! format tokio-util's codec and tokio-serde wrote before), read and written here.
//!
//! - A request is written by bincode straight into the connection's write buffer behind its
//!   length: no buffer of its own per request and no copy (it was serialized into a `Vec`, then
//!   copied into the codec's buffer).
//! - A reply frame that has begun to arrive and does not finish within the frame timeout ends
//!   the connection. Without it, a provider that sends half a frame and stops (broken, or
//!   hostile) would hold the pooled connection, and every call sent on it would time out one by
//!   one, never failing over.
//! - A reply frame over this node's frame limit ends the connection before its body is read.

use std::io;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_core::Stream;
use futures_sink::Sink;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{Instant, Sleep};
use tokio_util::bytes::{Buf, BytesMut};
use tokio_util::io::{poll_read_buf, poll_write_buf};

use super::frames::{RequestBody, write_frame};
use crate::transport::wire::envelope::{self, ClientMessage, Response};

/// Heartbeats read in a second past which the provider is taken to flood the connection.
const MAX_BEATS_A_SECOND: u32 = 16;

/// Bytes read from the socket at a time, at least.
const READ_CHUNK: usize = 8 << 10;

/// Requests buffered before the caller's task is asked to wait while they are written out: as
/// tokio-util's codec did. At 64 KiB, partial writes left large remainders that every request after
/// them moved (3 k instructions more per call at 4 KB, callgrind).
const WRITE_BOUNDARY: usize = 8 << 10;

/// One connection a caller opened: a sink of requests, a stream of replies.
pub(super) struct CallerFrames<S, Req, Resp> {
    io: S,
    max_frame: usize,
    timeout: Duration,
    read: BytesMut,
    write: BytesMut,
    /// Bytes handed to `write` since the connection opened: where the next frame begins in
    /// the connection's stream.
    appended: u64,
    /// When the reply frame now in `read` began to arrive, if one has.
    began: Option<Instant>,
    /// When a read last brought bytes (or the connection opened): the provider's last word.
    heard: Instant,
    /// Whether the handshake agreed heartbeats: only then is an empty frame one.
    heartbeats: bool,
    /// Heartbeats read since `beats_from`: more than a few a second is a flood, not a
    /// heartbeat every 2 s.
    beats: u32,
    beats_from: Instant,
    timer: Pin<Box<Sleep>>,
    messages: PhantomData<fn(Req) -> Resp>,
}

impl<S, Req, Resp> CallerFrames<S, Req, Resp> {
    pub(super) fn new(io: S, max_frame: usize, timeout: Duration) -> Self {
        Self {
            io,
            max_frame,
            timeout,
            read: BytesMut::new(),
            write: BytesMut::new(),
            appended: 0,
            began: None,
            heard: Instant::now(),
            heartbeats: false,
            beats: 0,
            beats_from: Instant::now(),
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            messages: PhantomData,
        }
    }

    /// When a read last brought bytes from the provider.
    pub(super) fn heard(&self) -> Instant {
        self.heard
    }

    /// Reads empty frames as heartbeats, as the handshake agreed (`heartbeat.rs`); without,
    /// an empty frame does not decode and ends the connection.
    pub(super) fn hearing_heartbeats(&mut self) {
        self.heartbeats = true;
    }

    /// The next complete reply frame in `read`, if it holds one. Empty frames are heartbeats
    /// (`heartbeat.rs`): read, and nothing more.
    fn next_frame(&mut self) -> io::Result<Option<BytesMut>> {
        let mut heartbeats = false;
        while self.heartbeats && self.read.len() >= 4 && self.read[..4] == [0; 4] {
            self.read.advance(4);
            heartbeats = true;
            self.beats += 1;
            if self.beats > MAX_BEATS_A_SECOND {
                let now = Instant::now();
                if now < self.beats_from + Duration::from_secs(1) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "the provider sent over {MAX_BEATS_A_SECOND} heartbeats in a second \
                             (one comes every 2 s)"
                        ),
                    ));
                }
                (self.beats, self.beats_from) = (0, now);
            }
        }
        if heartbeats {
            // What follows came with or after them.
            self.began = (!self.read.is_empty()).then_some(self.heard);
        }
        if self.read.len() < 4 {
            return Ok(None);
        }
        let len =
            u32::from_be_bytes([self.read[0], self.read[1], self.read[2], self.read[3]]) as usize;
        if len > self.max_frame {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "a reply frame of {len} bytes, over this node's frame limit ({})",
                    self.max_frame
                ),
            ));
        }
        if self.read.len() < 4 + len {
            self.read.reserve(4 + len - self.read.len());
            return Ok(None);
        }
        self.read.advance(4);
        let frame = self.read.split_to(len);
        // Whatever follows is the next frame, begun when its bytes came in.
        self.began = (!self.read.is_empty()).then_some(self.heard);
        Ok(Some(frame))
    }

    /// An error if the frame being received has stalled past the timeout; else arms the timer.
    fn stalled(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        let began = self.began?;
        let due = began + self.timeout;
        if due <= Instant::now() {
            return Some(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "a reply frame began {:?} ago and is not complete (frame timeout)",
                    self.timeout
                ),
            ));
        }
        if self.timer.deadline() != due {
            self.timer.as_mut().reset(due);
        }
        if self.timer.as_mut().poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
        None
    }
}

impl<S, Req, Resp> Stream for CallerFrames<S, Req, Resp>
where
    S: AsyncRead + Unpin,
    Response<Resp>: DeserializeOwned,
{
    type Item = io::Result<Response<Resp>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            match this.next_frame() {
                Ok(Some(frame)) => {
                    let reply = envelope::decode(&frame);
                    return Poll::Ready(Some(reply));
                }
                Ok(None) => {}
                Err(e) => return Poll::Ready(Some(Err(e))),
            }
            if this.read.capacity() == this.read.len() {
                this.read.reserve(READ_CHUNK);
            }
            let was_empty = this.read.is_empty();
            match poll_read_buf(Pin::new(&mut this.io), cx, &mut this.read) {
                Poll::Ready(Ok(0)) if this.read.is_empty() => return Poll::Ready(None),
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Some(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the provider closed the connection within a reply frame",
                    ))));
                }
                Poll::Ready(Ok(_)) => {
                    this.heard = Instant::now();
                    if was_empty {
                        this.began = Some(this.heard);
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e))),
                Poll::Pending => {
                    return match this.stalled(cx) {
                        Some(e) => Poll::Ready(Some(Err(e))),
                        None => Poll::Pending,
                    };
                }
            }
        }
    }
}

impl<S, Req, Resp> CallerFrames<S, Req, Resp> {
    /// Where the next frame begins in the connection's stream of bytes.
    pub(super) fn appended(&self) -> u64 {
        self.appended
    }

    /// How many of the stream's bytes the socket has taken.
    pub(super) fn written(&self) -> u64 {
        self.appended - self.write.len() as u64
    }

    /// Takes the frame at `start..end` of the stream back out of the writer, if the socket has
    /// taken none of its bytes yet; whether it did. The frames after it move up.
    pub(super) fn take_back(&mut self, start: u64, end: u64) -> bool {
        let written = self.written();
        if start < written || end > self.appended || start > end {
            return false;
        }
        let at = (start - written) as usize;
        let mut tail = self.write.split_off(at);
        tail.advance((end - start) as usize);
        self.write.unsplit(tail);
        self.appended -= end - start;
        true
    }
}

impl<S: AsyncWrite + Unpin, Req, Resp> CallerFrames<S, Req, Resp> {
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.write.is_empty() {
            if ready!(poll_write_buf(Pin::new(&mut self.io), cx, &mut self.write))? == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S, Req, Resp> Sink<ClientMessage<Req>> for CallerFrames<S, Req, Resp>
where
    S: AsyncWrite + Unpin,
    Req: RequestBody,
{
    type Error = io::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.write.len() >= WRITE_BOUNDARY {
            ready!(self.poll_write_out(cx))?;
        }
        Poll::Ready(Ok(()))
    }

    fn start_send(mut self: Pin<&mut Self>, message: ClientMessage<Req>) -> io::Result<()> {
        let this = &mut *self;
        // The call path checks sizes before sending; the limit here is the codec's own guard.
        let len = write_frame(&mut this.write, this.max_frame, |out| {
            Req::write(&message, out)
        })?;
        this.appended += 4 + len as u64;
        Ok(())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_write_out(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use futures::{SinkExt, StreamExt};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    type Caller<S> = CallerFrames<S, u32, String>;

    impl RequestBody for u32 {
        fn write(message: &ClientMessage<Self>, out: &mut BytesMut) -> io::Result<()> {
            super::super::frames::bincode_into(message, out)
        }
    }

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    fn reply(id: u64, text: &str) -> Vec<u8> {
        let response = Response {
            request_id: id,
            message: Ok(text.to_owned()),
        };
        frame(&envelope::encode(&response))
    }

    #[tokio::test]
    async fn replies_are_read_across_reads_and_requests_written_as_tokio_serde_wrote_them() {
        let (mut provider, caller) = tokio::io::duplex(1 << 16);
        let mut caller = Caller::new(caller, 1 << 20, Duration::from_secs(1));
        let two = [reply(1, "one"), reply(2, "two")].concat();
        provider.write_all(&two[..3]).await.unwrap();
        provider.write_all(&two[3..]).await.unwrap();
        for (id, text) in [(1, "one"), (2, "two")] {
            let got = caller.next().await.unwrap().unwrap();
            assert_eq!(
                (got.request_id, got.message.unwrap()),
                (id, text.to_owned())
            );
        }
        assert!(caller.began.is_none(), "two whole frames: none begun");
        let request = ClientMessage::Request(envelope::Request {
            context: envelope::Context::until(Instant::now()),
            id: 7,
            message: 42u32,
        });
        caller.send(request).await.unwrap();
        // The frame tokio-util's length-delimited codec reads, holding what tokio-serde's
        // bincode reads (the deadline travels as time left, so the bytes vary).
        let mut len = [0u8; 4];
        provider.read_exact(&mut len).await.unwrap();
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        provider.read_exact(&mut body).await.unwrap();
        let read: ClientMessage<u32> = envelope::decode(&body).unwrap();
        let ClientMessage::Request(read) = read else {
            panic!("not a request")
        };
        assert_eq!((read.id, read.message), (7, 42));
    }

    #[tokio::test(start_paused = true)]
    async fn a_frame_that_stalls_ends_the_read_at_the_timeout() {
        let (mut provider, caller) = tokio::io::duplex(1 << 16);
        let mut caller = Caller::new(caller, 1 << 20, Duration::from_secs(10));
        provider.write_all(&[0, 0, 0, 10, 1, 2]).await.unwrap();
        let start = Instant::now();
        let stalled = caller.next().await.unwrap();
        assert_eq!(stalled.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test]
    async fn an_empty_frame_is_a_heartbeat_only_where_heartbeats_were_agreed() {
        let (mut provider, caller) = tokio::io::duplex(1 << 16);
        let mut caller = Caller::new(caller, 1 << 20, Duration::from_secs(10));
        provider.write_all(&[0; 4]).await.unwrap();
        let refused = caller.next().await.unwrap();
        assert_eq!(refused.unwrap_err().kind(), io::ErrorKind::InvalidData);

        let (mut provider, caller) = tokio::io::duplex(1 << 16);
        let mut caller = Caller::new(caller, 1 << 20, Duration::from_secs(10));
        caller.hearing_heartbeats();
        provider
            .write_all(&[[0; 4].as_slice(), &reply(1, "one")].concat())
            .await
            .unwrap();
        let got = caller.next().await.unwrap().unwrap();
        assert_eq!(got.request_id, 1);
    }

    // From an outside review: a provider writing zeros at full speed kept a caller's core busy
    // for as long as the connection lived.
    #[tokio::test]
    async fn a_flood_of_heartbeats_ends_the_connection() {
        let (mut provider, caller) = tokio::io::duplex(1 << 16);
        let mut caller = Caller::new(caller, 1 << 20, Duration::from_secs(10));
        caller.hearing_heartbeats();
        provider.write_all(&[0; 4 << 10]).await.unwrap();
        let flood = caller.next().await.unwrap();
        assert_eq!(flood.unwrap_err().kind(), io::ErrorKind::InvalidData);
    }

    #[tokio::test]
    async fn a_frame_over_the_limit_ends_the_read_before_its_body() {
        let (mut provider, caller) = tokio::io::duplex(1 << 16);
        let mut caller = Caller::new(caller, 100, Duration::from_secs(10));
        provider.write_all(&[0, 0, 1, 0]).await.unwrap();
        let refused = caller.next().await.unwrap();
        assert_eq!(refused.unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
