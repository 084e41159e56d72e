//! A future whose panic is its output: a request's handler (`server/dispatch.rs`) and a
//! connection attempt (`transport/tcp/connect.rs`) that panic end with an error that says so,
//! not with the task that runs them.

use std::future::Future;
use std::panic::{AssertUnwindSafe, UnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project_lite::pin_project! {
    /// `future`, its panic in any of its polls caught as `std::panic::catch_unwind` catches a
    /// closure's, and its output then. Wrap a future that is not `UnwindSafe` in
    /// `AssertUnwindSafe`, having checked that what a panic leaves is not used again.
    pub(crate) struct CatchUnwind<F> {
        #[pin]
        future: F,
    }
}

impl<F: Future + UnwindSafe> CatchUnwind<F> {
    pub(crate) fn new(future: F) -> Self {
        Self { future }
    }
}

impl<F: Future + UnwindSafe> Future for CatchUnwind<F> {
    type Output = std::thread::Result<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let future = self.project().future;
        match std::panic::catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(polled) => polled.map(Ok),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}
