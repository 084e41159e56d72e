//! The provider side: what `#[service]` generates implements [`Provide`]; the
//! [`Dispatcher`] routes requests to it, refuses what it cannot run, catches panics and enforces
//! the deadline each request carries.

mod dispatch;
mod provide;

pub(crate) use dispatch::Dispatcher;
pub use provide::{DispatchError, DispatchFuture, Provide, dispatch_with, unknown_function};
