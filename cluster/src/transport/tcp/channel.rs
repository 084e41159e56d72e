//! A guard around a served connection's transport: when the peer closes its side, the handlers
//! still running for it are aborted, rather than run on and wait to write replies that
//! nobody reads any more: a caller that has gone (crashed, shut down, cut off) should not leave
//! its work running here. (Deadlines from the wire are made safe earlier, in `codec.rs`.)

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use crate::transport::wire::envelope::ClientMessage;
use futures_core::Stream;
use futures_sink::Sink;
use tokio::task::AbortHandle;

/// A transport that, when its read side ends, aborts the task that serves it (dropping the serving
/// loop's table of requests, which aborts the handlers still running). An abort rather than a
/// signal another future waits on: nothing extra is polled per request.
pub(super) struct Guarded<T> {
    inner: T,
    serving: Arc<OnceLock<AbortHandle>>,
}

impl<T, Req> Stream for Guarded<T>
where
    T: Stream<Item = std::io::Result<ClientMessage<Req>>> + Unpin,
{
    type Item = std::io::Result<ClientMessage<Req>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = Pin::new(&mut self.inner).poll_next(cx);
        if let Poll::Ready(None | Some(Err(_))) = polled
            && let Some(task) = self.serving.get()
        {
            task.abort();
        }
        polled
    }
}

impl<T, Item> Sink<Item> for Guarded<T>
where
    T: Sink<Item> + Unpin,
{
    type Error = T::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        Pin::new(&mut self.inner).poll_ready(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, item: Item) -> Result<(), T::Error> {
        Pin::new(&mut self.inner).start_send(item)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

/// `transport`, guarded: when its peer closes its side, `serving` (the task that serves the
/// connection, set once it is spawned) is aborted.
pub(super) fn guard<T>(transport: T, serving: Arc<OnceLock<AbortHandle>>) -> Guarded<T> {
    Guarded {
        inner: transport,
        serving,
    }
}
