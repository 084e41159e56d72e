//! The provider's side of a wire 2 connection without tarpc's server: the same frames (read and
//! bounded by `frames.rs`), each request run in a task of its own, its reply written when it
//! ends, a cancel or the request's deadline stopping it with no reply, as tarpc's server did.
//!
//! tarpc's server kept per request a span with an OpenTelemetry context (three allocations), an
//! `Abortable` pair and a deadline-queue entry, beside the task; here the task's own abort handle
//! and one timer per connection, at the earliest deadline of the requests running.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::{Future, poll_fn};
use std::io;
use std::pin::Pin;
use std::task::Poll;

use futures::{Sink, Stream};
use tarpc::{ClientMessage, Response};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::fast_map::FastMap;
use crate::transport::wire::v2::{ReplyFrame, RequestFrame, WireRequest, WireResponse};

/// Replies handlers may have ready before they wait for the writer (their bytes are counted
/// until written, `budget.rs`).
const PENDING_REPLIES: usize = 8;

/// The handlers running for one connection: stopped when it ends, however it ends (the task
/// serving it is aborted when the peer goes: `channel.rs`).
#[derive(Default)]
struct Running {
    /// By request id: the handler's task, its deadline, and which request of that id it is (a
    /// peer may reuse an id once its request was cancelled).
    tasks: FastMap<u64, (AbortHandle, Instant, u64)>,
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
    started: u64,
}

impl Running {
    /// The number of the next request to start, to hand its handler.
    fn next(&mut self) -> u64 {
        self.started += 1;
        self.started
    }

    fn start(&mut self, id: u64, task: AbortHandle, deadline: Instant, number: u64) {
        self.tasks.insert(id, (task, deadline, number));
        self.deadlines.push(Reverse((deadline, id)));
        // Entries of requests that ended are left in the heap; rebuilt before they pile up.
        if self.deadlines.len() > 2 * self.tasks.len() + 64 {
            self.deadlines = self
                .tasks
                .iter()
                .map(|(id, (_, deadline, _))| Reverse((*deadline, *id)))
                .collect();
        }
    }

    fn stop(&mut self, id: u64) {
        if let Some((task, ..)) = self.tasks.remove(&id) {
            task.abort();
        }
    }

    /// Stops the handlers past their deadline; the earliest deadline left.
    fn expire(&mut self, now: Instant) -> Option<Instant> {
        while let Some(&Reverse((deadline, id))) = self.deadlines.peek() {
            if deadline > now {
                return Some(deadline);
            }
            self.deadlines.pop();
            if self.tasks.get(&id).is_some_and(|(_, d, _)| *d == deadline) {
                self.stop(id);
            }
        }
        None
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for (task, ..) in self.tasks.values() {
            task.abort();
        }
    }
}

/// Serves wire 2 on `frames` until the connection ends. `call` makes the future of one request
/// (`serve.rs`'s `V2::call`): `deadline_of` says when its tarpc context ends. Requests are read
/// while replies wait for the writer (as tarpc's server does): the frame reader bounds them.
pub(super) async fn serve<T, F, Fut>(
    mut frames: T,
    call: F,
    deadline_of: fn(&tarpc::context::Context) -> Instant,
) where
    T: Stream<Item = io::Result<ClientMessage<WireRequest>>>
        + Sink<Response<WireResponse>, Error = io::Error>
        + Unpin,
    F: Fn(tarpc::context::Context, RequestFrame) -> Fut,
    Fut: Future<Output = ReplyFrame> + Send + 'static,
{
    let (replies, mut ready) = mpsc::channel::<(u64, u64, ReplyFrame)>(PENDING_REPLIES);
    let mut running = Running::default();
    let mut timer = Box::pin(tokio::time::sleep_until(Instant::now()));
    let mut armed: Option<Instant> = None;
    poll_fn(|cx| {
        loop {
            // Replies, while the writer has room.
            let mut wrote = false;
            let mut blocked = false;
            loop {
                match Pin::new(&mut frames).poll_ready(cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(_)) => return Poll::Ready(()),
                    Poll::Pending => {
                        blocked = true;
                        break;
                    }
                }
                let Poll::Ready(Some((id, number, reply))) = ready.poll_recv(cx) else {
                    break;
                };
                // The reply of a request cancelled or stopped meanwhile is not written: its id
                // may already belong to another request.
                if running.tasks.get(&id).is_none_or(|(.., n)| *n != number) {
                    continue;
                }
                running.tasks.remove(&id);
                let response = Response {
                    request_id: id,
                    message: Ok(WireResponse::Call(reply)),
                };
                if Pin::new(&mut frames).start_send(response).is_err() {
                    return Poll::Ready(());
                }
                wrote = true;
            }
            if (wrote || blocked)
                && let Poll::Ready(Err(_)) = Pin::new(&mut frames).poll_flush(cx)
            {
                return Poll::Ready(());
            }
            // Requests, as the frame reader lets them in.
            let mut read = false;
            loop {
                match Pin::new(&mut frames).poll_next(cx) {
                    Poll::Ready(Some(Ok(ClientMessage::Request(request)))) => {
                        let deadline = deadline_of(&request.context);
                        let WireRequest::Call { request: frame } = request.message;
                        let handler = call(request.context, frame);
                        let replies = replies.clone();
                        let id = request.id;
                        let number = running.next();
                        let task = tokio::spawn(async move {
                            let reply = handler.await;
                            let _ = replies.send((id, number, reply)).await;
                        });
                        running.start(id, task.abort_handle(), deadline, number);
                        if armed.is_none_or(|at| deadline < at) {
                            timer.as_mut().reset(deadline);
                            armed = Some(deadline);
                        }
                        read = true;
                    }
                    Poll::Ready(Some(Ok(ClientMessage::Cancel { request_id, .. }))) => {
                        running.stop(request_id);
                        read = true;
                    }
                    // A kind of message a later tarpc may add: nothing to do with it.
                    Poll::Ready(Some(Ok(_))) => read = true,
                    // The frame reader has said why (`frames.rs`); the handlers stop with
                    // `running`.
                    Poll::Ready(None | Some(Err(_))) => return Poll::Ready(()),
                    Poll::Pending => break,
                }
            }
            // Deadlines: one timer for the connection, at the earliest one.
            let mut fired = false;
            if armed.is_some() && timer.as_mut().poll(cx).is_ready() {
                armed = running.expire(Instant::now());
                if let Some(next) = armed {
                    timer.as_mut().reset(next);
                }
                fired = true;
            }
            if !read && !fired {
                return Poll::Pending;
            }
        }
    })
    .await;
}
