//! The provider's side of a connection, under tarpc: length-prefixed frames read and written
//! here rather than by tokio's `Framed`, because what a peer may make the node hold is decided
//! before a frame's body is read.
//!
//! Reading, step by step:
//! 1. a frame's 4-byte length arrives; over the frame limit, the connection closes;
//! 2. its bytes are reserved ([`super::budget`]); until they can be, or while the connection
//!    has its most requests in flight, nothing more is read from it;
//! 3. the body is read; a frame not finished within `frame_timeout` of its reservation (or of
//!    its first byte, for its length) closes the connection;
//! 4. the frame is decoded (deadlines clamped, [`super::codec`]); a request whose id is in
//!    flight already, or a frame that does not decode, closes it; a request's reservation
//!    becomes its [`Hold`], kept here by id, as tarpc keeps the request: until its reply is
//!    handed to the writer, it is cancelled, or its deadline (and a second) passes.
//!
//! Writing: a reply's bytes stay counted until they are written to the socket, and a writer
//! that makes no progress for `frame_timeout` (a peer that does not read) ends the connection.
//! A connection with nothing in flight and nothing received for `idle_timeout` is closed.
//! Every end is logged here (once per peer per interval for what a peer can repeat) and given to
//! tarpc as the end of the stream, never as an error that tarpc would log for every reset.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bincode::Options;
use futures::{Sink, Stream};
use tarpc::tokio_serde::Deserializer;
use tarpc::{ClientMessage, Response};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::AbortHandle;
use tokio::time::{Instant, Sleep};
use tokio_util::bytes::{Buf, BufMut, BytesMut};
use tokio_util::io::{poll_read_buf, poll_write_buf};

use super::budget::{Account, Hold, Reservation};
use super::codec::Clamping;
use crate::fast_map::FastMap;
use crate::rate_limited::RateLimited;

/// How much is read at once while no large frame is expected.
const READ_CHUNK: usize = 8 << 10;

/// Replies buffered for writing before tarpc is asked to wait.
const WRITE_BOUNDARY: usize = 64 << 10;

/// What a served connection may take, and how long.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameLimits {
    pub(crate) max_frame: usize,
    pub(crate) frame_timeout: Duration,
    pub(crate) idle_timeout: Duration,
}

/// How long after its deadline a request's hold is kept: tarpc forgets the request at its
/// deadline, and a peer that reuses the id just then is taken for one that reuses an id.
pub(super) const EXPIRY_GRACE: Duration = Duration::from_secs(1);

/// A request as this transport tags it: with the id of its frame, against which its reply's
/// bytes are counted.
pub(super) trait Tagged {
    fn tag(&mut self, frame_id: u64);
}

impl Tagged for crate::transport::wire::v2::WireRequest {
    fn tag(&mut self, frame_id: u64) {
        let Self::Call { request } = self;
        // Just read from the frame: nothing else holds it.
        if let Some(request) = Arc::get_mut(&mut request.0) {
            request.head.frame_id = Some(frame_id);
        }
    }
}

impl Tagged for crate::transport::wire::v1::WireRequest {
    fn tag(&mut self, frame_id: u64) {
        let Self::Call { request } = self;
        if let Some(request) = Arc::get_mut(&mut request.request) {
            request.head.frame_id = Some(frame_id);
        }
    }
}

/// One served connection as tarpc's transport.
pub(super) struct Frames<S, Req, Resp> {
    io: S,
    peer: SocketAddr,
    read: BytesMut,
    write: BytesMut,
    account: Arc<Account>,
    limits: FrameLimits,
    /// The bytes reserved for the frame being received.
    reserved: Option<Reservation>,
    /// When the frame in `read` began to arrive, if one has.
    frame_began: Option<Instant>,
    last_heard: Instant,
    /// One timer for both timeouts, re-armed only when it fires early or must fire sooner.
    timer: Pin<Box<Sleep>>,
    armed: Option<Instant>,
    /// Requests in flight by id, each with when it is forgotten (its deadline and a grace).
    holds: FastMap<u64, (Hold, Instant)>,
    expiries: BinaryHeap<Reverse<(Instant, u64)>>,
    /// The bytes written to `write` and not yet to the socket.
    unwritten: Option<Reservation>,
    /// Since when the writer has had bytes and written none.
    write_stalled: Option<Instant>,
    write_timer: Pin<Box<Sleep>>,
    /// Whether the handshake agreed heartbeats (`heartbeat.rs`).
    heartbeat: bool,
    /// When the writer last put bytes on the socket (or the connection opened).
    last_said: Instant,
    /// A heartbeat is in `write` or beneath it, and no flush has seen it out yet.
    owe_flush: bool,
    /// The task serving this connection: ended when the peer stops reading.
    serving: Arc<OnceLock<AbortHandle>>,
    warnings: Arc<RateLimited>,
    codec: Clamping<ClientMessage<Req>, Response<Resp>>,
    ended: bool,
}

/// Why a connection is being closed by this side.
enum End {
    Quiet(String),
    Warn(String),
}

impl<S, Req, Resp> Frames<S, Req, Resp> {
    pub(super) fn new(
        io: S,
        peer: SocketAddr,
        account: Arc<Account>,
        limits: FrameLimits,
        warnings: Arc<RateLimited>,
        serving: Arc<OnceLock<AbortHandle>>,
        first: &[u8],
    ) -> Self {
        let now = Instant::now();
        Self {
            io,
            peer,
            read: BytesMut::from(first),
            write: BytesMut::new(),
            account,
            limits,
            reserved: None,
            frame_began: (!first.is_empty()).then_some(now),
            last_heard: now,
            timer: Box::pin(tokio::time::sleep_until(now)),
            armed: None,
            holds: FastMap::default(),
            expiries: BinaryHeap::new(),
            unwritten: None,
            write_stalled: None,
            write_timer: Box::pin(tokio::time::sleep_until(now)),
            heartbeat: false,
            last_said: now,
            owe_flush: false,
            serving,
            warnings,
            codec: Clamping::default(),
            ended: false,
        }
    }

    /// With heartbeats, as the handshake agreed (`heartbeat.rs`).
    pub(super) fn beating(mut self) -> Self {
        self.heartbeat = true;
        self
    }

    /// When the next heartbeat is due, if one will be: while this side holds work for the
    /// peer (requests running, or a frame waiting for its bytes) and has said nothing.
    fn heartbeat_due(&self) -> Option<Instant> {
        let working = self.account.in_flight() > 0 || self.read.len() >= 4;
        (self.heartbeat && working && self.write.is_empty())
            .then(|| self.last_said + super::heartbeat::EVERY)
    }

    fn end(&mut self, why: End) -> Poll<Option<io::Result<ClientMessage<Req>>>> {
        self.ended = true;
        self.reserved = None;
        self.log(why);
        Poll::Ready(None)
    }

    fn log(&self, why: End) {
        let peer = self.peer;
        match why {
            End::Quiet(why) => tracing::debug!("closed the connection from {peer}: {why}"),
            End::Warn(why) => self.warnings.note(peer.ip(), |left_out| {
                tracing::warn!(
                    "closed the connection from {peer}: {why}{}",
                    if left_out > 0 {
                        format!(" ({left_out} more such lines from this address left out)")
                    } else {
                        String::new()
                    }
                );
            }),
        }
    }

    /// Forgets the holds of requests past their deadline (tarpc has: no reply will come).
    /// Called when the reader waits (for bytes, or for bytes to be given back), not per frame:
    /// a hold matters only once the connection's share is short, and a clock read per frame
    /// was a tenth of the reader's instructions.
    fn forget_expired(&mut self) -> bool {
        let now = Instant::now();
        let mut forgot = false;
        while let Some(Reverse((due, id))) = self.expiries.peek().copied() {
            if due > now {
                break;
            }
            self.expiries.pop();
            if self.holds.get(&id).is_some_and(|(_, d)| *d == due) {
                self.holds.remove(&id);
                forgot = true;
            }
        }
        self.compact_expiries();
        forgot
    }

    /// Entries of requests that ended are left in the heap; rebuilt before they pile up.
    fn compact_expiries(&mut self) {
        if self.expiries.len() > 2 * self.holds.len() + 64 {
            self.expiries = self
                .holds
                .iter()
                .map(|(id, (_, due))| Reverse((*due, *id)))
                .collect();
        }
    }

    /// Arms the timer for the next timeout that applies, if any; `Some` when one has passed.
    fn timed_out(&mut self, cx: &mut Context<'_>) -> Option<End> {
        let now = Instant::now();
        let due = match self.frame_began {
            Some(began) => Some(began + self.limits.frame_timeout),
            None if self.account.in_flight() == 0 => Some(crate::deadline::later(
                self.last_heard,
                self.limits.idle_timeout,
            )),
            None => None,
        };
        if let Some(due) = due
            && due <= now
        {
            return Some(match self.frame_began {
                Some(began) => End::Warn(format!(
                    "a frame began {:?} ago and is not complete (frame timeout {:?})",
                    now - began,
                    self.limits.frame_timeout
                )),
                None => End::Quiet(format!(
                    "idle for {:?} (idle timeout)",
                    self.limits.idle_timeout
                )),
            });
        }
        // Also when the first request in flight is due to be forgotten: a reader held back by
        // the in-flight bound gets to nothing else, and a request tarpc stopped at its deadline
        // sends no reply that would end its hold.
        let expiry = self.expiries.peek().map(|Reverse((due, _))| *due);
        let due = [due, expiry, self.heartbeat_due()]
            .into_iter()
            .flatten()
            .min()?;
        if self.armed.is_none_or(|armed| armed > due) {
            self.timer.as_mut().reset(due);
            self.armed = Some(due);
        }
        if self.timer.as_mut().poll(cx).is_ready() {
            // Fired for an earlier due time: checked again on the next poll.
            self.armed = None;
            cx.waker().wake_by_ref();
        }
        None
    }
}

impl<S, Req, Resp> Frames<S, Req, Resp>
where
    S: AsyncRead + Unpin,
    Req: Unpin + Tagged,
    Resp: Unpin,
    Clamping<ClientMessage<Req>, Response<Resp>>:
        Deserializer<ClientMessage<Req>, Error = io::Error>,
{
    /// The next complete frame's message, if `read` holds one; reserves its bytes first.
    fn next_message(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<ClientMessage<Req>>, End>> {
        if self.read.len() < 4 {
            return Poll::Ready(Ok(None));
        }
        let len =
            u32::from_be_bytes([self.read[0], self.read[1], self.read[2], self.read[3]]) as usize;
        if len > self.limits.max_frame {
            return Poll::Ready(Err(End::Warn(format!(
                "it sent a frame of {len} bytes, over this node's frame limit ({})",
                self.limits.max_frame
            ))));
        }
        if self.reserved.is_none() {
            let Poll::Ready(reserved) = self.account.poll_reserve(len, cx) else {
                // Waiting for bytes is this node's doing, not the peer's: no frame timeout.
                self.frame_began = None;
                return Poll::Pending;
            };
            self.reserved = Some(reserved);
            self.frame_began.get_or_insert_with(Instant::now);
        }
        if self.read.len() < 4 + len {
            self.read.reserve(4 + len - self.read.len());
            return Poll::Ready(Ok(None));
        }
        self.read.advance(4);
        let frame = self.read.split_to(len);
        // Whatever follows is the next frame, begun when its bytes came in.
        self.frame_began = (!self.read.is_empty()).then_some(self.last_heard);
        if self.read.is_empty() && self.read.capacity() > 2 * READ_CHUNK {
            // The rest of a large frame's buffer would stay with the connection while it idles.
            self.read = BytesMut::new();
        }
        let mut message = Pin::new(&mut self.codec).deserialize(&frame).map_err(|e| {
            End::Warn(format!(
                "a frame of {len} bytes does not decode as a request: {e}"
            ))
        })?;
        let reserved = self.reserved.take();
        match (&mut message, reserved) {
            (ClientMessage::Request(request), Some(bytes)) => {
                let id = request.id;
                let Ok(hold) = self.account.hold(id, bytes) else {
                    return Poll::Ready(Err(End::Warn(format!(
                        "it sent request id {id} while a request with that id is in flight"
                    ))));
                };
                request.message.tag(id);
                let due = Instant::from_std(request.context.deadline) + EXPIRY_GRACE;
                self.holds.insert(id, (hold, due));
                self.expiries.push(Reverse((due, id)));
            }
            (ClientMessage::Cancel { request_id, .. }, _) => {
                self.holds.remove(request_id);
            }
            _ => {}
        }
        self.compact_expiries();
        Poll::Ready(Ok(Some(message)))
    }
}

impl<S, Req, Resp> Stream for Frames<S, Req, Resp>
where
    S: AsyncRead + AsyncWrite + Unpin,
    Req: Unpin + Tagged,
    Resp: Unpin,
    Clamping<ClientMessage<Req>, Response<Resp>>:
        Deserializer<ClientMessage<Req>, Error = io::Error>,
{
    type Item = io::Result<ClientMessage<Req>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        loop {
            match this.next_message(cx) {
                Poll::Ready(Ok(Some(message))) => return Poll::Ready(Some(Ok(message))),
                Poll::Ready(Ok(None)) => {}
                Poll::Ready(Err(why)) => return this.end(why),
                // Waiting for bytes to be given back: a frame that began still times out, and
                // requests past their deadline give their place back.
                Poll::Pending => {
                    if this.forget_expired() {
                        continue;
                    }
                    this.beat(cx);
                    return match this.timed_out(cx) {
                        Some(why) => this.end(why),
                        None => Poll::Pending,
                    };
                }
            }
            if this.read.capacity() == this.read.len() {
                this.read.reserve(READ_CHUNK);
            }
            let was_empty = this.read.is_empty();
            match poll_read_buf(Pin::new(&mut this.io), cx, &mut this.read) {
                Poll::Ready(Ok(0)) if this.read.is_empty() => {
                    return this.end(End::Quiet("it closed its side".to_owned()));
                }
                Poll::Ready(Ok(0)) => {
                    return this.end(End::Quiet("it closed its side within a frame".to_owned()));
                }
                Poll::Ready(Ok(_)) => {
                    this.last_heard = Instant::now();
                    if was_empty {
                        this.frame_began = Some(this.last_heard);
                    }
                }
                Poll::Ready(Err(e)) => return this.end(End::Quiet(format!("reading failed: {e}"))),
                // Requests past their deadline (and the grace) are forgotten here too: the
                // timer armed for the first of them has fired, and re-armed for it would fire
                // again at once, for ever, on a quiet connection (from an outside review).
                Poll::Pending => {
                    if this.forget_expired() {
                        continue;
                    }
                    this.beat(cx);
                    return match this.timed_out(cx) {
                        Some(why) => this.end(why),
                        None => Poll::Pending,
                    };
                }
            }
        }
    }
}

impl<S, Req, Resp> Frames<S, Req, Resp>
where
    S: AsyncWrite + Unpin,
{
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.write.is_empty() {
            match poll_write_buf(Pin::new(&mut self.io), cx, &mut self.write) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(_)) => {
                    self.write_stalled = None;
                    self.last_said = Instant::now();
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    self.check_write_stall(cx);
                    return Poll::Pending;
                }
            }
        }
        self.unwritten = None;
        self.write_stalled = None;
        Poll::Ready(Ok(()))
    }

    /// Writes a heartbeat if one is due, and sees it out: the reader calls this whenever it
    /// waits, so that a heartbeat is never left in a buffer (the serving loop flushes only
    /// what it wrote itself).
    fn beat(&mut self, cx: &mut Context<'_>) {
        if self
            .heartbeat_due()
            .is_some_and(|due| due <= Instant::now())
        {
            self.write.put_u32(0);
            self.owe_flush = true;
        }
        if self.owe_flush {
            let flushed = match self.poll_write_out(cx) {
                Poll::Ready(Ok(())) => Pin::new(&mut self.io).poll_flush(cx),
                other => other,
            };
            // An error shows again to the serving loop's next write; here it only stops.
            if flushed.is_ready() {
                self.owe_flush = false;
            }
        }
    }

    /// A peer that reads nothing for `frame_timeout` while replies wait for it: its connection
    /// ends (with the handlers of its requests), rather than hold the replies.
    fn check_write_stall(&mut self, cx: &mut Context<'_>) {
        let now = Instant::now();
        let since = *self.write_stalled.get_or_insert(now);
        let due = since + self.limits.frame_timeout;
        if due <= now {
            let waiting = self.write.len();
            self.log(End::Warn(format!(
                "it read none of {waiting} bytes of replies for {:?} (frame timeout)",
                self.limits.frame_timeout
            )));
            if let Some(task) = self.serving.get() {
                task.abort();
            }
            return;
        }
        if self.write_timer.deadline() != due {
            self.write_timer.as_mut().reset(due);
        }
        if self.write_timer.as_mut().poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
    }
}

/// Writes `message` into `buffer` as one frame (a 4-byte big-endian length, then bincode with
/// tokio-serde's options), straight into the buffer behind a length filled in after: no buffer
/// of its own, no copy. Its body's length; nothing is written if it fails or is over `max`.
pub(super) fn write_frame(
    buffer: &mut BytesMut,
    message: &impl serde::Serialize,
    max: usize,
) -> io::Result<usize> {
    let at = buffer.len();
    buffer.put_u32(0);
    let written = bincode::DefaultOptions::new()
        .serialize_into((&mut *buffer).writer(), message)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        .and_then(|()| {
            let len = buffer.len() - at - 4;
            if len > max {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("a frame of {len} bytes, over the frame limit ({max})"),
                ));
            }
            u32::try_from(len).map_err(|_| io::Error::other("a frame over 4 GiB"))
        });
    match written {
        Ok(len) => {
            buffer[at..at + 4].copy_from_slice(&len.to_be_bytes());
            Ok(len as usize)
        }
        Err(e) => {
            buffer.truncate(at);
            Err(e)
        }
    }
}

impl<S, Req, Resp> Sink<Response<Resp>> for Frames<S, Req, Resp>
where
    S: AsyncWrite + Unpin,
    Req: Unpin,
    Resp: Unpin,
    Response<Resp>: serde::Serialize,
{
    type Error = io::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.write.len() >= WRITE_BOUNDARY {
            ready!(self.poll_write_out(cx))?;
        }
        Poll::Ready(Ok(()))
    }

    fn start_send(mut self: Pin<&mut Self>, reply: Response<Resp>) -> io::Result<()> {
        let this = &mut *self;
        let len = write_frame(&mut this.write, &reply, usize::MAX)?;
        // The request's hold (its bytes and its reply's) ends; the bytes to write are counted
        // instead, until written.
        this.holds.remove(&reply.request_id);
        let written = this.account.force(4 + len);
        match &mut this.unwritten {
            Some(unwritten) => unwritten.absorb(written),
            None => this.unwritten = Some(written),
        }
        this.forget_expired();
        Ok(())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_write_out(cx))?;
        ready!(Pin::new(&mut self.io).poll_flush(cx))?;
        self.owe_flush = false;
        Poll::Ready(Ok(()))
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
