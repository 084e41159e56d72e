//! Bodies, streamed both ways, never buffered whole.
//!
//! - [`Once`]: the client's body, handed to one attempt after another until one of them starts
//!   reading it. An attempt whose connection failed never read it, so the next attempt sends it
//!   whole; once read, it cannot be sent again (it is not kept), and the request is retried only
//!   if it had no body at all.
//! - [`Held`]: the instance's response body, holding its [`Pick`] until the body ends, so that
//!   a long download counts as a request in flight for the balancer.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use http_body_util::Limited;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};

use crate::balance::Pick;

/// Errors a body passes on (too large, the client went away).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The client's body, at most `limit` bytes (past it the stream fails, and so the request to
/// the instance with it), for one attempt at a time.
#[derive(Clone)]
pub(crate) struct Once {
    slot: Arc<Mutex<Option<Limited<Incoming>>>>,
    /// Whether the request has no body: such a request can be sent any number of times.
    empty: bool,
}

impl Once {
    pub(crate) fn new(body: Incoming, limit: usize) -> Self {
        Self {
            empty: body.is_end_stream(),
            slot: Arc::new(Mutex::new(Some(Limited::new(body, limit)))),
        }
    }

    /// Whether another attempt can send the whole body.
    pub(crate) fn can_resend(&self) -> bool {
        self.empty
            || self
                .slot
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some()
    }

    /// The body for one attempt: it takes the client's stream when first polled.
    pub(crate) fn attempt(&self) -> Body {
        if self.empty {
            return Body::empty();
        }
        Body::new(Attempt {
            slot: Some(self.slot.clone()),
            body: None,
        })
    }
}

struct Attempt {
    slot: Option<Arc<Mutex<Option<Limited<Incoming>>>>>,
    body: Option<Limited<Incoming>>,
}

impl HttpBody for Attempt {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(slot) = self.slot.take() {
            self.body = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        }
        match self.body.as_mut() {
            Some(b) => Pin::new(b).poll_frame(cx),
            // Another attempt read it first (cannot happen: attempts run one after another).
            None => Poll::Ready(Some(Err("the request body was already sent".into()))),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.slot, &self.body) {
            (_, Some(b)) => b.size_hint(),
            (Some(slot), None) => slot
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map(|b| b.size_hint())
                .unwrap_or_default(),
            (None, None) => SizeHint::default(),
        }
    }
}

/// The instance's body, with the pick of the instance held until it ends.
pub(crate) struct Held {
    body: Incoming,
    pick: Option<Pick>,
}

impl Held {
    pub(crate) fn body(body: Incoming, pick: Pick) -> Body {
        Body::new(Self {
            body,
            pick: Some(pick),
        })
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
        if let Poll::Ready(None | Some(Err(_))) = &polled {
            // Done: no longer in flight, before hyper drops the body.
            self.pick = None;
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
