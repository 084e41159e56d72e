//! The provider's side of a connection (wire 1 or 2): the frames read and bounded by
//! `frames.rs`, each request run until it first waits on this loop's task, then, if it has not
//! answered yet, in a task of its own; its reply written when it ends, a cancel or the
//! request's deadline stopping it with no reply.
//!
//! Most handlers answer without waiting on anything: run here, such a request costs no task,
//! no hand-off of its reply and no wake-up of this loop (a task per request was a sixth of a
//! small call's instructions). The price is that a handler's work before its first `.await`
//! holds up the requests behind it on the same connection, as any work on a runtime's thread
//! holds up what else that thread runs: long computation belongs in `spawn_blocking`.
//!
//! Per request there is the task's own abort handle, if it has a task, and one timer per
//! connection, at the earliest deadline of the requests running: no span, no `Abortable` pair,
//! no deadline-queue entry of its own.
//!
//! A handler hands its reply over without waiting (an unbounded queue, emptied on every turn
//! of the loop, even while the writer is full): a handler that had to wait for room took a
//! wake-up of its own, and its task a send future beside the handler's. What waits for the
//! writer stays bounded all the same: a reply is kept with its request (`Running`), for
//! requests still running, which the frame reader bounds (a request's hold, which counts its
//! reply's bytes, is given back only when the reply is written, or when the request is
//! cancelled or expires, and then the reply goes with it).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::future::{Future, poll_fn};
use std::io;
use std::pin::Pin;
use std::task::Poll;

use futures_core::Stream;
use futures_sink::Sink;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::fast_map::FastMap;
use crate::transport::wire::envelope::{CallRequest, CallResponse, ClientMessage, Response};

/// The handlers running for one connection: stopped when it ends, however it ends (the task
/// serving it is aborted when the peer goes: `channel.rs`).
struct Running<R> {
    /// By request id (a peer may reuse an id once its request was cancelled).
    tasks: FastMap<u64, Handler<R>>,
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
    started: u64,
    /// The requests answered, in the order of their replies, which wait for the writer with
    /// their request in `tasks`; and some of requests stopped since, skipped when they come up
    /// (or dropped when they would make up most of it: a peer that cancels and never reads
    /// cannot pile them up).
    pending: VecDeque<(u64, u64)>,
}

/// One request running, or answered and waiting for the writer.
struct Handler<R> {
    /// The task it runs in; none for a request answered when it was read.
    task: Option<AbortHandle>,
    deadline: Instant,
    /// Which request of its id it is.
    number: u64,
    /// Its reply, once the handler has returned. Kept here, not in `pending`, so that it goes
    /// when its request is stopped: the frame reader gives back the request's hold then, which
    /// counted the reply's bytes, and a reply counted nowhere must not stay.
    reply: Option<R>,
}

impl<R> Default for Running<R> {
    fn default() -> Self {
        Self {
            tasks: FastMap::default(),
            deadlines: BinaryHeap::new(),
            started: 0,
            pending: VecDeque::new(),
        }
    }
}

impl<R> Running<R> {
    /// The number of the next request to start, to hand its handler.
    fn next(&mut self) -> u64 {
        self.started += 1;
        self.started
    }

    fn start(&mut self, id: u64, task: Option<AbortHandle>, deadline: Instant, number: u64) {
        let handler = Handler {
            task,
            deadline,
            number,
            reply: None,
        };
        // An id reused while its request still runs here (the frame reader forgot its hold a
        // little before this loop expired it): the old handler stops, rather than run on
        // detached, holding its place in admission.
        if let Some(old) = self.tasks.insert(id, handler)
            && let Some(task) = old.task
        {
            task.abort();
        }
        self.deadlines.push(Reverse((deadline, id)));
        // Entries of requests that ended are left in the heap; rebuilt before they pile up.
        if self.deadlines.len() > 2 * self.tasks.len() + 64 {
            crate::deadline::refill(
                &mut self.deadlines,
                self.tasks
                    .iter()
                    .map(|(id, handler)| Reverse((handler.deadline, *id))),
            );
        }
    }

    /// Stops the request running under `id`, if one is, with its reply if it left one.
    fn stop(&mut self, id: u64) {
        let Some(handler) = self.tasks.remove(&id) else {
            return;
        };
        if let Some(task) = handler.task {
            task.abort();
        }
        if self.pending.len() > 2 * self.tasks.len() + 64 {
            let tasks = &self.tasks;
            self.pending
                .retain(|(id, number)| tasks.get(id).is_some_and(|h| h.number == *number));
        }
    }

    /// The request running under `id` if it is the `number`th (not one cancelled or stopped,
    /// whose id another request may hold now).
    fn current(&mut self, id: u64, number: u64) -> Option<&mut Handler<R>> {
        self.tasks.get_mut(&id).filter(|h| h.number == number)
    }

    /// A handler's reply, kept until the writer has room if its request still runs.
    fn answered(&mut self, id: u64, number: u64, reply: R) {
        if let Some(handler) = self.current(id, number) {
            handler.reply = Some(reply);
            self.pending.push_back((id, number));
        }
    }

    /// The oldest reply of a request still running, that request now over.
    fn next_reply(&mut self) -> Option<(u64, R)> {
        while let Some((id, number)) = self.pending.pop_front() {
            if self.current(id, number).is_some()
                && let Some(reply) = self.tasks.remove(&id).and_then(|h| h.reply)
            {
                return Some((id, reply));
            }
        }
        None
    }

    /// Stops the handlers past their deadline; the earliest deadline left.
    fn expire(&mut self, now: Instant) -> Option<Instant> {
        while let Some(&Reverse((deadline, id))) = self.deadlines.peek() {
            if deadline > now {
                return Some(deadline);
            }
            self.deadlines.pop();
            if self.tasks.get(&id).is_some_and(|h| h.deadline == deadline) {
                self.stop(id);
            }
        }
        None
    }
}

impl<R> Drop for Running<R> {
    fn drop(&mut self) {
        for task in self.tasks.values().filter_map(|h| h.task.as_ref()) {
            task.abort();
        }
    }
}

/// Requests started between two writes of replies: after this many the loop writes what is
/// answered before it reads on. Bounds the handlers' work (their first steps run on this loop)
/// between two writes of replies and heartbeats: a flood of requests, or of requests and their
/// cancels (which keep the frame reader's count of requests in flight low), cannot hold up the
/// connection's writer for more than this many handlers' first steps.
const STARTED_BETWEEN_WRITES: usize = 32;

/// Serves a wire version whose request frame is `Q` and reply frame `R` on `frames` until the
/// connection ends. `call` makes the future of one request from its deadline (`serve.rs`'s
/// `V2::answer`). Requests are read while replies wait for the writer:
/// the frame reader bounds them.
pub(super) async fn serve<T, Q, R, F, Fut>(mut frames: T, call: F)
where
    T: Stream<Item = io::Result<ClientMessage<CallRequest<Q>>>>
        + Sink<Response<CallResponse<R>>, Error = io::Error>
        + Unpin,
    F: Fn(Instant, Q) -> Fut,
    Fut: Future<Output = R> + Send + 'static,
    R: Send + 'static,
{
    let (replies, mut ready) = mpsc::unbounded_channel::<(u64, u64, R)>();
    let mut running = Running::default();
    let mut timer = Box::pin(tokio::time::sleep_until(Instant::now()));
    let mut armed: Option<Instant> = None;
    let mut unflushed = false;
    let mut slot: Slot<Fut> = Box::pin(None);
    poll_fn(|cx| {
        loop {
            // Replies ready, all of them: the reply of a request cancelled or stopped meanwhile
            // is dropped (its id may already belong to another request).
            while let Poll::Ready(Some((id, number, reply))) = ready.poll_recv(cx) {
                running.answered(id, number, reply);
            }
            // Written while the writer has room.
            let mut wrote = false;
            let mut blocked = false;
            while !running.pending.is_empty() {
                match Pin::new(&mut frames).poll_ready(cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(_)) => return Poll::Ready(()),
                    Poll::Pending => {
                        blocked = true;
                        break;
                    }
                }
                let Some((id, reply)) = running.next_reply() else {
                    break;
                };
                let response = Response {
                    request_id: id,
                    message: Ok(CallResponse::Call(reply)),
                };
                if Pin::new(&mut frames).start_send(response).is_err() {
                    return Poll::Ready(());
                }
                wrote = true;
            }
            // Flushed until a flush completes, not only in a turn that wrote: a large reply
            // goes out as the peer reads it, turns after it was handed over, while no other
            // reply may come to write (`docs/wire.md`, "Flushing").
            unflushed |= wrote;
            if unflushed || blocked {
                match Pin::new(&mut frames).poll_flush(cx) {
                    Poll::Ready(Ok(())) => unflushed = false,
                    Poll::Ready(Err(_)) => return Poll::Ready(()),
                    Poll::Pending => unflushed = true,
                }
            }
            // Requests, as the frame reader lets them in.
            let mut read = false;
            let mut may_start = STARTED_BETWEEN_WRITES;
            loop {
                if may_start == 0 {
                    // What is answered is written before more is read (the loop goes round).
                    read = true;
                    break;
                }
                match Pin::new(&mut frames).poll_next(cx) {
                    Poll::Ready(Some(Ok(ClientMessage::Request(request)))) => {
                        may_start -= 1;
                        let deadline = request.context.deadline;
                        let CallRequest::Call { request: frame } = request.message;
                        let id = request.id;
                        let number = running.next();
                        slot.as_mut().set(Some(call(deadline, frame)));
                        match first_step(&mut slot, cx) {
                            First::Panicked => {}
                            First::Answered(reply) => {
                                running.start(id, None, deadline, number);
                                running.answered(id, number, reply);
                            }
                            First::Waits => {
                                // It goes on in a task of its own, which polls it again at
                                // once and so takes over its wake-ups. It takes the slot, its
                                // future pinned where it is; the next request gets another.
                                let mut handler = std::mem::replace(&mut slot, Box::pin(None));
                                let replies = replies.clone();
                                // As it ends, the handler is dropped and its reply handed
                                // over, in that order and in the same poll.
                                let waits = poll_fn(move |cx| {
                                    let Some(running) = handler.as_mut().as_pin_mut() else {
                                        return Poll::Pending;
                                    };
                                    let Poll::Ready(reply) = running.poll(cx) else {
                                        return Poll::Pending;
                                    };
                                    handler.set(None);
                                    let _ = replies.send((id, number, reply));
                                    Poll::Ready(())
                                });
                                let task = tokio::spawn(waits);
                                running.start(id, Some(task.abort_handle()), deadline, number);
                            }
                        }
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

/// Where a request's handler takes its first step: one allocation for the connection, which
/// every handler that answers at once reuses. A handler that waits takes it into its task, its
/// future pinned where it is, and the next request gets a new one.
type Slot<H> = Pin<Box<Option<H>>>;

/// A request's handler after its first step on the loop.
enum First<T> {
    Answered(T),
    /// Still in the slot.
    Waits,
    Panicked,
}

/// Runs the handler in `slot` until it first waits; the slot is empty again unless it waits.
/// The dispatcher catches a handler's panic and answers it; were one to escape all the same
/// (or the handler's drop to panic), it ends this request alone (no reply, as when its task
/// panicked), not the connection and every request on it.
fn first_step<H: Future>(slot: &mut Slot<H>, cx: &mut std::task::Context<'_>) -> First<H::Output> {
    let stepped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let Some(handler) = slot.as_mut().as_pin_mut() else {
            return First::Panicked;
        };
        match handler.poll(cx) {
            Poll::Ready(reply) => {
                slot.as_mut().set(None);
                First::Answered(reply)
            }
            Poll::Pending => First::Waits,
        }
    }));
    stepped.unwrap_or_else(|panic| {
        let message = crate::server::panic_message(&*panic);
        tracing::error!("a request's handler panicked outside the dispatcher's catch: {message}");
        // What a panic left is never polled again: the slot goes (its drop caught too, should
        // it panic as well), and the connection takes a new one.
        let left = std::mem::replace(slot, Box::pin(None));
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(left)));
        First::Panicked
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn start<R>(running: &mut Running<R>, id: u64) -> u64 {
        let number = running.next();
        let task = tokio::spawn(std::future::pending::<()>()).abort_handle();
        running.start(
            id,
            Some(task),
            Instant::now() + std::time::Duration::from_secs(60),
            number,
        );
        number
    }

    #[tokio::test]
    async fn replies_of_stopped_requests_are_not_written() {
        let mut running = Running::default();
        let (one, two, three) = (
            start(&mut running, 1),
            start(&mut running, 2),
            start(&mut running, 3),
        );
        running.answered(1, one, "one");
        running.answered(2, two, "two");
        running.stop(2);
        running.answered(3, three, "three");
        assert_eq!(running.next_reply(), Some((1, "one")));
        assert_eq!(running.next_reply(), Some((3, "three")));
        assert_eq!(running.next_reply(), None);
        assert!(running.tasks.is_empty(), "a written reply ends its request");
    }

    #[tokio::test]
    async fn an_id_reused_after_a_cancel_gets_only_its_own_reply() {
        let mut running = Running::default();
        let old = start(&mut running, 5);
        running.answered(5, old, "old, pending");
        running.stop(5);
        let new = start(&mut running, 5);
        // The old handler's reply arriving late is not kept either.
        running.answered(5, old, "old, late");
        assert_eq!(running.next_reply(), None);
        running.answered(5, new, "new");
        assert_eq!(running.next_reply(), Some((5, "new")));
    }

    #[tokio::test]
    async fn a_stopped_requests_reply_goes_with_it() {
        // Cancelled or expired, a request's hold ends, and with it the count of its reply's
        // bytes: the reply itself must not stay behind, waiting for a writer that may never
        // have room (from an outside review: it did, up to 65 replies of `max_frame` each).
        let mut running = Running::default();
        let reply = Arc::new(());
        for id in 0..64 {
            let number = start(&mut running, id);
            running.answered(id, number, Arc::clone(&reply));
            running.stop(id);
        }
        assert_eq!(
            Arc::strong_count(&reply),
            1,
            "replies of stopped requests kept"
        );
        let number = start(&mut running, 99);
        running.answered(99, number, Arc::clone(&reply));
        let past = Instant::now() + std::time::Duration::from_secs(61);
        running.expire(past);
        assert_eq!(
            Arc::strong_count(&reply),
            1,
            "the reply of an expired request kept"
        );
    }

    #[tokio::test]
    async fn a_peer_that_cancels_and_never_reads_cannot_pile_up_replies() {
        let mut running = Running::default();
        let waiting = start(&mut running, 1);
        running.answered(1, waiting, "kept");
        for _ in 0..10_000 {
            let number = start(&mut running, 7);
            running.answered(7, number, "cancelled");
            running.stop(7);
            assert!(running.pending.len() <= 2 * running.tasks.len() + 65);
        }
        assert_eq!(running.next_reply(), Some((1, "kept")));
        assert_eq!(running.next_reply(), None);
    }
}
