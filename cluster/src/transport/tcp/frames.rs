//! The provider's side of a connection, beneath `answering.rs`: length-prefixed frames read and
//! written here rather than by tokio's `Framed`, because what a peer may make the node hold is
//! decided before a frame's body is read.
//!
//! Reading, step by step:
//! 1. a frame's 4-byte length arrives; over the frame limit, the connection closes;
//! 2. its bytes are reserved ([`super::budget`]); until they can be, or while the connection
//!    has its most requests in flight, nothing more is read from it;
//! 3. the body is read; a frame not finished within `frame_timeout` of its reservation (or of
//!    its first byte, for its length) closes the connection;
//! 4. the frame is decoded (deadlines at most a year away, [`envelope`]); a request whose id is in
//!    flight already, or a frame that does not decode, closes it; a request's reservation becomes
//!    its [`Hold`], kept here by id, as the serving loop keeps the request: until its reply is
//!    handed to the writer, it is cancelled, or its deadline (and a second) passes.
//!
//! Writing: a reply's bytes stay counted until they are written to the socket, and a writer
//! that makes no progress for `frame_timeout` (a peer that does not read) ends the connection.
//! A connection with nothing in flight and nothing received for `idle_timeout` is closed.
//! Every end is logged here (once per peer per interval for what a peer can repeat) and given to
//! the serving loop as the end of the stream.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_core::Stream;
use futures_sink::Sink;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::AbortHandle;
use tokio::time::{Instant, Sleep};
use tokio_util::bytes::{Buf, BufMut, BytesMut};
use tokio_util::io::{poll_read_buf, poll_write_buf};

use super::budget::{Account, Hold, Reservation};
use super::varint::write_varint;
use crate::fast_map::FastMap;
use crate::rate_limited::RateLimited;
use crate::transport::wire::envelope::{self, ClientMessage, Response};

/// How much is read at once while no large frame is expected.
const READ_CHUNK: usize = 8 << 10;

/// Replies buffered for writing before the serving loop is asked to wait.
const WRITE_BOUNDARY: usize = 64 << 10;

/// What a served connection may take, and how long.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameLimits {
    pub(crate) max_frame: usize,
    pub(crate) frame_timeout: Duration,
    pub(crate) idle_timeout: Duration,
}

/// How long after its deadline a request's hold is kept: the serving loop forgets the request at
/// its deadline, and a peer that reuses the id just then is taken for one that reuses an id.
pub(super) const EXPIRY_GRACE: Duration = Duration::from_secs(1);

/// A request as this transport reads it from a frame's body, and tags it: with the id of its
/// frame, against which its reply's bytes are counted.
pub(super) trait ServedRequest: Sized {
    fn read(frame: &[u8]) -> io::Result<ClientMessage<Self>>;
    fn tag(&mut self, frame_id: u64);
}

impl ServedRequest for crate::transport::wire::v2::WireRequest {
    /// By hand (`wire/reader.rs`).
    fn read(frame: &[u8]) -> io::Result<ClientMessage<Self>> {
        crate::transport::wire::reader::read_request(frame)
    }

    fn tag(&mut self, frame_id: u64) {
        let Self::Call { request } = self;
        // Just read from the frame: nothing else holds it.
        if let Some(request) = Arc::get_mut(&mut request.0) {
            request.head.frame_id = Some(frame_id);
        }
    }
}

/// A reply as this transport writes it into its frame's body.
pub(super) trait ReplyBody: Sized {
    fn write(reply: &Response<Self>, out: &mut BytesMut) -> io::Result<()>;
}

/// Through bincode ([`envelope`]).
pub(super) fn bincode_into(message: &impl serde::Serialize, out: &mut BytesMut) -> io::Result<()> {
    envelope::encode_into(message, &mut out.writer())
}

impl ReplyBody for crate::transport::wire::v1::WireResponse {
    fn write(reply: &Response<Self>, out: &mut BytesMut) -> io::Result<()> {
        bincode_into(reply, out)
    }
}

impl ReplyBody for crate::transport::wire::v2::WireResponse {
    /// The bytes bincode writes, written by hand for a reply without headers (every reply but
    /// one recalled from the record): the envelope's `Response` (the request id, `Ok`), the call's
    /// variant, then the reply's `(kind, code, body, headers)`, each integer bincode's varint,
    /// the headers an empty byte string. Through bincode's serializer the same bytes cost a
    /// small call about 0.2 k instructions more (callgrind, `docs/benchmarks.md`); a test
    /// checks both give the same bytes for every kind of reply.
    fn write(reply: &Response<Self>, out: &mut BytesMut) -> io::Result<()> {
        let Ok(Self::Call(frame)) = &reply.message else {
            return bincode_into(reply, out);
        };
        let (kind, code, body, recalled) = frame.parts();
        if recalled {
            return bincode_into(reply, out);
        }
        write_varint(reply.request_id, out);
        // `Ok`, then `Call`: variants 0 and 0.
        out.put_slice(&[0, 0]);
        write_varint(u64::from(kind), out);
        write_varint(u64::from(code), out);
        write_varint(body.len() as u64, out);
        out.put_slice(body);
        // No header.
        out.put_u8(0);
        Ok(())
    }
}

/// A request as this transport writes it into its frame's body.
pub(super) trait RequestBody: Sized {
    fn write(message: &ClientMessage<Self>, out: &mut BytesMut) -> io::Result<()>;
}

impl RequestBody for crate::transport::wire::v1::WireRequest {
    fn write(message: &ClientMessage<Self>, out: &mut BytesMut) -> io::Result<()> {
        bincode_into(message, out)
    }
}

impl RequestBody for crate::transport::wire::v2::WireRequest {
    /// The bytes bincode writes, written by hand: the envelope's `ClientMessage::Request` (its
    /// context: the deadline as the time left, seconds and nanoseconds, then the trace id's 16
    /// bytes, the span id and the sampling decision; the request's id), the call's variant, then
    /// the request's six fields. Each integer is bincode's varint, each string and byte string its
    /// length then its bytes. Through bincode's serializer the same bytes cost a small call about
    /// 0.8 k instructions more (callgrind, `docs/benchmarks.md`); property tests check that bincode
    /// writes the same bytes, and the time left as bincode writes a `Duration`.
    fn write(message: &ClientMessage<Self>, out: &mut BytesMut) -> io::Result<()> {
        let ClientMessage::Request(request) = message else {
            return bincode_into(message, out);
        };
        // One reading of the clock for the deadline's and the budget's time left.
        let now = Instant::now();
        let left = envelope::left_until(request.context.deadline, now);
        write_request(request, left, now, out);
        Ok(())
    }
}

/// A wire 2 request (see [`RequestBody`]), `left` the time left before its deadline.
fn write_request(
    request: &envelope::Request<crate::transport::wire::v2::WireRequest>,
    left: Duration,
    now: Instant,
    out: &mut BytesMut,
) {
    let crate::transport::wire::v2::WireRequest::Call { request: frame } = &request.message;
    // `Request`: variant 0.
    out.put_u8(0);
    let context = &request.context;
    write_varint(left.as_secs(), out);
    write_varint(u64::from(left.subsec_nanos()), out);
    let trace = &context.trace_context;
    out.put_slice(&trace.trace_id);
    write_varint(trace.span_id, out);
    write_varint(trace.sampling_decision as u64, out);
    write_varint(request.id, out);
    // `Call`: variant 0.
    out.put_u8(0);
    let call = &frame.0;
    for text in [&*call.service, &*call.function] {
        write_varint(text.len() as u64, out);
        out.put_slice(text.as_bytes());
    }
    write_varint(call.signature, out);
    let (id, attempt, budget, limit) = frame.core(now);
    write_varint_u128(id, out);
    write_varint(u64::from(attempt), out);
    write_varint(budget, out);
    write_varint(limit, out);
    frame.with_headers(|headers| {
        write_varint(headers.len() as u64, out);
        out.put_slice(headers);
    });
    write_varint(call.args.len() as u64, out);
    out.put_slice(&call.args);
}

/// A `u128` as bincode's varint writes it: as a `u64` when it fits, else a tag and 16 bytes.
fn write_varint_u128(value: u128, out: &mut BytesMut) {
    match u64::try_from(value) {
        Ok(small) => write_varint(small, out),
        Err(_) => {
            out.extend_from_slice(&[254]);
            out.extend_from_slice(&value.to_le_bytes());
        }
    }
}

impl ServedRequest for crate::transport::wire::v1::WireRequest {
    fn read(frame: &[u8]) -> io::Result<ClientMessage<Self>> {
        envelope::decode(frame)
    }

    fn tag(&mut self, frame_id: u64) {
        let Self::Call { request } = self;
        if let Some(request) = Arc::get_mut(&mut request.request) {
            request.head.frame_id = Some(frame_id);
        }
    }
}

/// One served connection: a stream of the requests read, a sink of the replies to write.
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
    ended: bool,
    /// Reads requests `Req`, writes replies `Resp`.
    messages: PhantomData<fn(Req) -> Resp>,
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
            ended: false,
            messages: PhantomData,
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

    /// Forgets the holds of requests past their deadline (the serving loop has: no reply will
    /// come). Called when the reader waits (for bytes, or for bytes to be given back), not per
    /// frame: a hold matters only once the connection's share is short, and a clock read per frame
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
            crate::deadline::refill(
                &mut self.expiries,
                self.holds.iter().map(|(id, (_, due))| Reverse((*due, *id))),
            );
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
        // Also when the first request in flight is due to be forgotten: a reader held back by the
        // in-flight bound gets to nothing else, and a request the serving loop stopped at its
        // deadline sends no reply that would end its hold.
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
    Req: Unpin + ServedRequest,
    Resp: Unpin,
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
        // Whatever follows is the next frame, begun when its bytes came in, or when this one was
        // let in, if it had to wait for room: waiting is this node's doing, not the peer's, and
        // the rest of the next frame may have been held back by it.
        let began = self
            .frame_began
            .map_or(self.last_heard, |b| b.max(self.last_heard));
        self.frame_began = (!self.read.is_empty()).then_some(began);
        if self.read.is_empty() && self.read.capacity() > 2 * READ_CHUNK {
            // The rest of a large frame's buffer would stay with the connection while it idles.
            self.read = BytesMut::new();
        }
        let mut message = Req::read(&frame).map_err(|e| {
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
                let due = crate::deadline::later(request.context.deadline, EXPIRY_GRACE);
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
    Req: Unpin + ServedRequest,
    Resp: Unpin,
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

/// Writes one frame into `buffer`: a 4-byte big-endian length, then the body `body` writes
/// straight into the buffer behind the length, filled in after (no buffer of its own, no copy).
/// Its body's length; nothing is written if it fails or is over `max`.
pub(super) fn write_frame(
    buffer: &mut BytesMut,
    max: usize,
    body: impl FnOnce(&mut BytesMut) -> io::Result<()>,
) -> io::Result<usize> {
    let at = buffer.len();
    buffer.put_u32(0);
    let written = body(buffer).and_then(|()| {
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
    Resp: Unpin + ReplyBody,
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
        let len = write_frame(&mut this.write, usize::MAX, |out| Resp::write(&reply, out))?;
        // The request's hold (its bytes and its reply's) ends; the bytes to write are counted
        // instead, until written.
        this.holds.remove(&reply.request_id);
        let written = this.account.force(4 + len);
        match &mut this.unwritten {
            Some(unwritten) => unwritten.absorb(written),
            None => this.unwritten = Some(written),
        }
        this.compact_expiries();
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

/// A runtime on a paused clock: what reads or writes the time left does it the same twice.
#[cfg(test)]
pub(crate) fn paused() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// A wire 2 request under `deadline`, with a trace context of `(trace id, span id, sampled)`, or
/// a cancel of `id` with that trace context if `cancel`.
#[cfg(test)]
fn request_message(
    request: crate::transport::Request,
    id: u64,
    (trace_id, span_id, sampled, cancel): (u128, u64, bool, bool),
    deadline: Instant,
) -> ClientMessage<crate::transport::wire::v2::WireRequest> {
    use crate::transport::wire::v2::{RequestFrame, WireRequest};
    let mut context = envelope::Context::until(deadline);
    context.trace_context.trace_id = trace_id.to_le_bytes();
    context.trace_context.span_id = span_id;
    context.trace_context.sampling_decision = if sampled {
        envelope::SamplingDecision::Sampled
    } else {
        envelope::SamplingDecision::Unsampled
    };
    if cancel {
        ClientMessage::Cancel {
            trace_context: context.trace_context,
            request_id: id,
        }
    } else {
        ClientMessage::Request(envelope::Request {
            context,
            id,
            message: WireRequest::Call {
                request: RequestFrame(Arc::new(request)),
            },
        })
    }
}

/// Wire 2 request frames' bodies as a caller writes them (requests of every shape, and
/// cancels), for the tests of the provider's reader (`wire/reader.rs`).
#[cfg(test)]
pub(crate) fn written_request_frames() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    (
        tests::request(),
        tests::integer(),
        any::<(u128, u64, bool, bool)>(),
        0..u64::from(u32::MAX),
    )
        .prop_map(|(request, id, trace, millis)| {
            let deadline = Instant::now() + Duration::from_millis(millis);
            let mut out = BytesMut::new();
            RequestBody::write(&request_message(request, id, trace, deadline), &mut out)
                .expect("a request is written");
            out.to_vec()
        })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::transport::wire::envelope::ServerError;

    use super::*;
    use crate::context::{RequestId, TraceParent};
    use crate::service::Encoded;
    use crate::transport::wire::Traced;
    use crate::transport::wire::v2::{ReplyFrame, RequestFrame, WireRequest, WireResponse};
    use crate::transport::{Head, Reply, Request};

    /// Integers at the edges of bincode's varint widths, and anything else.
    pub(super) fn integer() -> impl Strategy<Value = u64> {
        prop_oneof![
            prop::sample::select(vec![
                0,
                250,
                251,
                0xffff,
                0x1_0000,
                0xffff_ffff,
                0x1_0000_0000,
                u64::MAX
            ]),
            any::<u64>(),
        ]
    }

    fn reply() -> impl Strategy<Value = Reply> {
        let bytes = || prop::collection::vec(any::<u8>(), 0..600);
        let text = || ".{0,300}";
        let plain = prop_oneof![
            bytes().prop_map(|bytes| Reply::Done(Encoded::from_slice(&bytes))),
            (any::<u16>(), text()).prop_map(|(code, detail)| Reply::Refused(code, detail)),
            text().prop_map(Reply::Panicked),
            text().prop_map(Reply::TooLarge),
            text().prop_map(Reply::Undeliverable),
            Just(Reply::Expired),
            text().prop_map(Reply::Interrupted),
        ];
        plain.prop_flat_map(|reply| {
            prop_oneof![Just(reply.clone()), Just(Reply::Recalled(Arc::new(reply))),]
        })
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![".{0,20}", ".{240,300}"]
    }

    /// A wire 2 request as a caller sends it, with every header present or not.
    pub(super) fn request() -> impl Strategy<Value = Request> {
        (
            (
                text(),
                text(),
                integer(),
                prop::collection::vec(any::<u8>(), 0..600),
            ),
            (any::<u128>(), integer(), any::<u32>()),
            (
                prop::option::of(integer()),
                prop::option::of(0..u64::MAX / 2),
            ),
            prop::collection::vec(any::<u8>(), 0..300),
            (
                prop::option::of(any::<u128>()),
                prop::option::of(integer()),
                prop::option::of((1..u128::MAX, 1..u64::MAX, any::<bool>(), any::<u64>())),
            ),
        )
            .prop_map(
                |(
                    (service, function, signature, args),
                    (wide_id, narrow_id, attempt),
                    (reply_limit, budget_micros),
                    encoded_metadata,
                    (call_id, pinned, trace),
                )| {
                    let request_id = if wide_id % 2 == 0 {
                        wide_id
                    } else {
                        u128::from(narrow_id)
                    };
                    Request {
                        service: service.into(),
                        function: function.into(),
                        signature,
                        args: Encoded::from_slice(&args),
                        head: Head {
                            request_id: RequestId(request_id),
                            reply_limit: reply_limit.filter(|&limit| limit != u64::MAX),
                            budget_deadline: budget_micros.map(|micros| {
                                tokio::time::Instant::now() + Duration::from_micros(micros)
                            }),
                            encoded_metadata,
                            call_id,
                            pinned,
                            trace: trace.map(|(id, parent, sampled, span)| {
                                Box::new(Traced {
                                    call: TraceParent::new(id, parent, sampled).unwrap(),
                                    span: std::sync::atomic::AtomicU64::new(span),
                                })
                            }),
                            ..Head::default()
                        },
                        attempt: std::sync::atomic::AtomicU32::new(attempt),
                    }
                },
            )
    }

    proptest! {
        /// The wire 2 request written by hand is, byte for byte, what bincode writes (on a
        /// paused clock, and with the deadline passed, so that both write the same time
        /// left).
        #[test]
        fn a_request_written_by_hand_is_what_bincode_writes(
            request in request(),
            id in integer(),
            trace_id in any::<u128>(),
            span_id in any::<u64>(),
            sampled in any::<bool>(),
            cancel in any::<bool>(),
        ) {
            let rt = paused();
            let _clock = rt.enter();
            let message = request_message(
                request, id, (trace_id, span_id, sampled, cancel), Instant::now(),
            );
            let (mut by_hand, mut by_bincode) = (BytesMut::new(), BytesMut::new());
            RequestBody::write(&message, &mut by_hand).unwrap();
            bincode_into(&message, &mut by_bincode).unwrap();
            prop_assert_eq!(by_hand, by_bincode);
        }

        /// The time left before the deadline is written as bincode writes a `Duration`
        /// (seconds, then nanoseconds, each a varint of any width), the rest of the frame as
        /// with no time left.
        #[test]
        fn the_time_left_is_written_as_bincode_writes_a_duration(
            request in request(),
            secs in integer(),
            nanos in prop_oneof![
                prop::sample::select(vec![0u32, 250, 251, 0xffff, 0x1_0000, 999_999_999]),
                0..1_000_000_000u32,
            ],
        ) {
            let rt = paused();
            let _clock = rt.enter();
            let request = envelope::Request {
                context: envelope::Context::until(Instant::now()),
                id: 1,
                message: WireRequest::Call { request: RequestFrame(Arc::new(request)) },
            };
            let left = Duration::new(secs, nanos);
            let (mut with_left, mut without) = (BytesMut::new(), BytesMut::new());
            write_request(&request, left, Instant::now(), &mut with_left);
            write_request(&request, Duration::ZERO, Instant::now(), &mut without);
            let mut expected = BytesMut::from(&[0u8][..]);
            bincode_into(&left, &mut expected).unwrap();
            // Without time left, the variant and two zero bytes.
            prop_assert_eq!(&without[..3], &[0, 0, 0]);
            expected.extend_from_slice(&without[3..]);
            prop_assert_eq!(with_left, expected);
        }

        /// The wire 2 reply written by hand is, byte for byte, what bincode writes.
        #[test]
        fn a_reply_written_by_hand_is_what_bincode_writes(
            request_id in integer(),
            reply in reply(),
            refused in any::<bool>(),
        ) {
            let response = Response {
                request_id,
                message: if refused {
                    Err(ServerError { kind: 16, detail: "refused".to_owned() })
                } else {
                    Ok(WireResponse::Call(ReplyFrame(reply)))
                },
            };
            let (mut by_hand, mut by_bincode) = (BytesMut::new(), BytesMut::new());
            ReplyBody::write(&response, &mut by_hand).unwrap();
            bincode_into(&response, &mut by_bincode).unwrap();
            prop_assert_eq!(by_hand, by_bincode);
        }
    }
}
