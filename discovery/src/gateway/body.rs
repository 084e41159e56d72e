//! Bodies, streamed both ways, never buffered whole.
//!
//! - [`Once`]: the client's body, handed to one attempt after another. An attempt whose
//!   connection failed never read it, so the next attempt sends the stream itself. An attempt
//!   that read it keeps a copy of the first `max_replay_bytes` (64 KiB, as Linkerd): a body that
//!   ended within them can be sent again, a larger one cannot (it is not kept), and its request
//!   is then not retried.
//! - [`Held`]: the instance's response body, holding its [`Pick`] until the body ends, so that
//!   a long download counts as a request in flight for the balancer.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use http_body_util::Limited;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};

use super::pool::Lease;
use crate::balance::Pick;

/// Errors a body passes on (too large, the client went away).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The client's body, at most `limit` bytes (past it the stream fails, and so the request to
/// the instance with it), for one attempt at a time.
#[derive(Clone)]
pub(crate) struct Once {
    shared: Arc<Mutex<Shared>>,
    /// Whether the request has no body: such a request can be sent any number of times.
    empty: bool,
}

struct Shared {
    /// The client's stream, until an attempt takes it.
    stream: Option<Limited<Incoming>>,
    /// What the attempt that took it has read so far, while within `room`.
    kept: Vec<Bytes>,
    kept_len: usize,
    room: usize,
    /// Set when more than `room` was read: the copy is incomplete and dropped.
    overflowed: bool,
    /// Set when the stream ended with everything kept.
    complete: bool,
    /// Set when the client's stream failed (malformed chunks, the client gone): the attempt
    /// failed through no fault of the instance's.
    failed: bool,
}

impl Shared {
    fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
        shared.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Once {
    /// `limit`: the largest body passed on; `replay`: the largest body kept for another attempt.
    pub(crate) fn new(body: Incoming, limit: usize, replay: usize) -> Self {
        Self {
            empty: body.is_end_stream(),
            shared: Arc::new(Mutex::new(Shared {
                stream: Some(Limited::new(body, limit)),
                kept: Vec::new(),
                kept_len: 0,
                room: replay,
                overflowed: false,
                complete: false,
                failed: false,
            })),
        }
    }

    /// Whether another attempt can send the whole body.
    pub(crate) fn can_resend(&self) -> bool {
        let s = Shared::lock(&self.shared);
        self.empty || s.stream.is_some() || s.complete
    }

    /// Whether the client's body failed while an attempt sent it (not for being too large:
    /// that is `LengthLimitError`, answered 413).
    pub(crate) fn client_failed(&self) -> bool {
        Shared::lock(&self.shared).failed
    }

    /// The body for one attempt: the client's stream if no attempt read it yet (taken when
    /// first polled), else the copy of a body read whole.
    pub(crate) fn attempt(&self) -> Body {
        if self.empty {
            return Body::empty();
        }
        let s = Shared::lock(&self.shared);
        if s.stream.is_none() && s.complete {
            let copy: Vec<Bytes> = s.kept.clone();
            let frames =
                futures::stream::iter(copy.into_iter().map(|b| Ok::<_, BoxError>(Frame::data(b))));
            return Body::new(http_body_util::StreamBody::new(frames));
        }
        drop(s);
        Body::new(Attempt {
            shared: self.shared.clone(),
            body: None,
            started: false,
        })
    }
}

struct Attempt {
    shared: Arc<Mutex<Shared>>,
    body: Option<Limited<Incoming>>,
    started: bool,
}

impl HttpBody for Attempt {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if !this.started {
            this.started = true;
            let taken = Shared::lock(&this.shared).stream.take();
            this.body = taken;
        }
        let Some(body) = this.body.as_mut() else {
            // Another attempt read it first (cannot happen: attempts run one after another).
            return Poll::Ready(Some(Err("the request body was already sent".into())));
        };
        let polled = Pin::new(&mut *body).poll_frame(cx);
        // hyper stops polling a body of known length once it has all of it: the end is
        // seen here, not only as a last `None`.
        let ended = body.is_end_stream();
        let mut s = Shared::lock(&this.shared);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && !s.overflowed
                {
                    if s.kept_len + data.len() <= s.room {
                        s.kept_len += data.len();
                        s.kept.push(data.clone());
                    } else {
                        // Too large to keep: let the copy go at once rather than hold it.
                        s.overflowed = true;
                        s.kept = Vec::new();
                    }
                }
            }
            Poll::Ready(None) => s.complete = !s.overflowed,
            Poll::Ready(Some(Err(e))) => s.failed = !e.is::<http_body_util::LengthLimitError>(),
            Poll::Pending => {}
        }
        if ended {
            s.complete = !s.overflowed;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_some_and(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        match &self.body {
            Some(b) => b.size_hint(),
            None if !self.started => Shared::lock(&self.shared)
                .stream
                .as_ref()
                .map(|b| b.size_hint())
                .unwrap_or_default(),
            None => SizeHint::default(),
        }
    }
}

/// The instance's body, with the pick of the instance held until it ends, and the lease of
/// its connection, which goes back to the pool once the body has been read to its end.
pub(crate) struct Held {
    body: Incoming,
    pick: Option<Pick>,
    lease: Option<Lease>,
}

impl Held {
    pub(crate) fn body(body: Incoming, pick: Pick, lease: Lease) -> Body {
        let mut held = Self {
            body,
            pick: Some(pick),
            lease: Some(lease),
        };
        // hyper may never poll a body that is empty (`HEAD`, `204`, `304`): done already.
        if held.body.is_end_stream() {
            held.done(true);
        }
        Body::new(held)
    }

    /// No longer in flight; the connection back to the pool if the body was read whole.
    fn done(&mut self, whole: bool) {
        self.pick = None;
        if let Some(lease) = self.lease.take()
            && whole
        {
            lease.release();
        }
    }
}

impl HttpBody for Held {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        match &polled {
            // Done, before hyper drops the body. hyper stops polling a body of known length
            // once it has all of it: the end is seen as `is_end_stream` too.
            Poll::Ready(None) => self.done(true),
            Poll::Ready(Some(Err(_))) => self.done(false),
            Poll::Ready(Some(Ok(_))) if self.body.is_end_stream() => self.done(true),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
