//! The caller's side of a wire 2 connection without tarpc's client: the same frames (tarpc's
//! `ClientMessage` and `Response`, bincode, by length), a table of the requests waiting for a
//! reply, and one task per connection that writes what callers queued and hands each reply to
//! its caller.
//!
//! tarpc's client moved every request through an mpsc queue to its dispatch task, kept a
//! oneshot, a span and a deadline queue entry per request, and its call future (1.7 KB) lived in
//! every call's future. Here a call queues its request and waits on its entry: the deadline is
//! the caller's own (`connect.rs`), a call given up before its reply sends a cancel (as tarpc's
//! did), and a connection that ends fails every request still waiting: as not sent if it never
//! left this node, as lost if it may have.

use std::future::{Future, poll_fn};
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use futures::task::AtomicWaker;
use futures::{Sink, Stream};
use tarpc::{ClientMessage, Response};

use super::stalled::Watched;
use crate::fast_map::FastMap;
use crate::transport::wire::v2::{ReplyFrame, RequestFrame, WireRequest, WireResponse};
use crate::transport::{Reply, Request};

/// How a request ended without a reply.
#[derive(Debug)]
pub(super) enum Ended {
    /// It never left this node: the connection ended first.
    NotSent(String),
    /// It may have reached the provider: the connection ended after it was written.
    Lost(String),
    /// The provider's tarpc refused it (throttling) before any handler ran.
    Busy(String),
}

/// The calls of one connection: cloned into every user of it.
#[derive(Clone)]
pub(super) struct Calls(Arc<Shared>);

struct Shared {
    state: Mutex<State>,
    /// The connection's task, woken when there is something to write.
    writer: AtomicWaker,
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Requests and cancels not yet taken by the connection's task.
    queue: Vec<ClientMessage<WireRequest>>,
    waiting: FastMap<u64, Waiting>,
    /// Why the connection ended, once it has.
    ended: Option<String>,
}

#[derive(Default)]
struct Waiting {
    /// Taken by the connection's task to be written.
    sent: bool,
    waker: Option<Waker>,
    outcome: Option<Result<Reply, Ended>>,
}

/// The connection's task: writes what is queued, reads replies. Ends with the connection; when
/// it does (or is dropped: aborted for idling, the node stopping), every waiting call fails.
pub(super) struct Dispatch<S> {
    io: Watched<S, WireRequest, WireResponse>,
    calls: Arc<Shared>,
    /// Taken from the queue, not yet handed to the writer (it was full).
    batch: std::collections::VecDeque<ClientMessage<WireRequest>>,
}

impl Calls {
    /// The calls of a connection over `io`, and the task to spawn for it.
    pub(super) fn new<S>(io: Watched<S, WireRequest, WireResponse>) -> (Self, Dispatch<S>) {
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            writer: AtomicWaker::new(),
        });
        let dispatch = Dispatch {
            io,
            calls: shared.clone(),
            batch: Default::default(),
        };
        (Self(shared), dispatch)
    }

    /// Sends `request` under tarpc's context `context` and waits for its reply. Dropped before
    /// the reply, the request is taken back if it has not left, or cancelled if it has.
    pub(super) fn call(
        &self,
        context: tarpc::context::Context,
        request: Arc<Request>,
    ) -> impl Future<Output = Result<Reply, Ended>> + '_ {
        let queued = {
            let mut state = self.0.lock();
            match &state.ended {
                Some(why) => Err(Ended::NotSent(why.clone())),
                None => {
                    let id = state.next_id;
                    state.next_id += 1;
                    state.queue.push(ClientMessage::Request(tarpc::Request {
                        context,
                        id,
                        message: WireRequest::Call {
                            request: RequestFrame(request),
                        },
                    }));
                    state.waiting.insert(id, Waiting::default());
                    Ok(id)
                }
            }
        };
        if queued.is_ok() {
            self.0.writer.wake();
        }
        async move {
            let id = queued?;
            let mut wait = Wait {
                shared: &self.0,
                id,
                over: false,
            };
            poll_fn(|cx| wait.poll(cx)).await
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A call waiting for its reply.
struct Wait<'a> {
    shared: &'a Shared,
    id: u64,
    over: bool,
}

impl Wait<'_> {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<Reply, Ended>> {
        let mut state = self.shared.lock();
        let Some(waiting) = state.waiting.get_mut(&self.id) else {
            // Only this call removes its entry; the connection's end fills it in instead.
            self.over = true;
            return Poll::Ready(Err(Ended::Lost("the request was forgotten".to_owned())));
        };
        if waiting.outcome.is_none() {
            match &waiting.waker {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => waiting.waker = Some(cx.waker().clone()),
            }
            return Poll::Pending;
        }
        let outcome = state
            .waiting
            .remove(&self.id)
            .and_then(|w| w.outcome)
            .unwrap_or_else(|| Err(Ended::Lost("the request was forgotten".to_owned())));
        self.over = true;
        Poll::Ready(outcome)
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if self.over {
            return;
        }
        let mut state = self.shared.lock();
        let Some(waiting) = state.waiting.remove(&self.id) else {
            return;
        };
        if waiting.outcome.is_some() || state.ended.is_some() {
            return;
        }
        if waiting.sent {
            // It may be running: the provider stops it (tarpc's client did the same).
            state.queue.push(ClientMessage::Cancel {
                trace_context: Default::default(),
                request_id: self.id,
            });
        } else {
            let id = self.id;
            state
                .queue
                .retain(|m| !matches!(m, ClientMessage::Request(r) if r.id == id));
            return;
        }
        drop(state);
        self.shared.writer.wake();
    }
}

impl<S> Dispatch<S> {
    /// Hands a reply to its call, if it still waits.
    fn complete(&self, reply: Response<WireResponse>) {
        let outcome = match reply.message {
            Ok(WireResponse::Call(ReplyFrame(reply))) => Ok(reply),
            Err(refused) => Err(Ended::Busy(refused.detail)),
        };
        let mut state = self.calls.lock();
        if let Some(waiting) = state.waiting.get_mut(&reply.request_id) {
            waiting.outcome = Some(outcome);
            if let Some(waker) = waiting.waker.take() {
                drop(state);
                waker.wake();
            }
        }
    }
}

impl<S> Future for Dispatch<S>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    type Output = io::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        this.calls.writer.register(cx.waker());
        loop {
            {
                let mut state = this.calls.lock();
                let State { queue, waiting, .. } = &mut *state;
                for message in queue.drain(..) {
                    if let ClientMessage::Request(request) = &message
                        && let Some(waiting) = waiting.get_mut(&request.id)
                    {
                        waiting.sent = true;
                    }
                    this.batch.push_back(message);
                }
            }
            let mut written = false;
            while !this.batch.is_empty() {
                match Pin::new(&mut this.io).poll_ready(cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => break,
                }
                if let Some(message) = this.batch.pop_front() {
                    Pin::new(&mut this.io).start_send(message)?;
                    written = true;
                }
            }
            if written || !this.batch.is_empty() {
                if let Poll::Ready(Err(e)) = Pin::new(&mut this.io).poll_flush(cx) {
                    return Poll::Ready(Err(e));
                }
            }
            let mut read = false;
            loop {
                match Pin::new(&mut this.io).poll_next(cx) {
                    Poll::Ready(Some(Ok(reply))) => {
                        this.complete(reply);
                        read = true;
                    }
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                    Poll::Ready(None) => return Poll::Ready(Ok(())),
                    Poll::Pending => break,
                }
            }
            // Callers may have queued more while this wrote and read; a writer that is full
            // wakes this task when it has room.
            if !read && (!this.batch.is_empty() || this.calls.lock().queue.is_empty()) {
                return Poll::Pending;
            }
        }
    }
}

impl<S> Drop for Dispatch<S> {
    fn drop(&mut self) {
        let mut state = self.calls.lock();
        state.ended = Some("the connection closed".to_owned());
        state.queue.clear();
        let mut wakers = Vec::new();
        for waiting in state.waiting.values_mut() {
            if waiting.outcome.is_none() {
                waiting.outcome = Some(Err(if waiting.sent {
                    Ended::Lost("the connection closed with the request in flight".to_owned())
                } else {
                    Ended::NotSent("the connection closed before the request was sent".to_owned())
                }));
                wakers.extend(waiting.waker.take());
            }
        }
        drop(state);
        for waker in wakers {
            waker.wake();
        }
    }
}
