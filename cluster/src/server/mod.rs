//! The provider side: what `#[service]` generates implements [`Provide`]; the dispatcher
//! routes requests to it, refuses what it cannot run (wrong service or signature, draining,
//! over the concurrency limit) and catches panics; the transport stops a handler at the deadline
//! its request carries (`transport/tcp/answering.rs` aborts the task, the in-memory network
//! drops it).

mod admission;
pub(crate) mod describe;
mod dispatch;
mod provide;
pub(crate) mod record;

pub(crate) use admission::CallerCount;
pub use admission::DEFAULT_MAX_CONCURRENT_CALLS;
pub(crate) use dispatch::{Dispatcher, catching, panic_message};
pub use provide::{DispatchError, DispatchFuture, Provide, dispatch_with, unknown_function};
