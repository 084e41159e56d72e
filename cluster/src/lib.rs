//! `cluster`: typed function calls across a cluster of nodes.
//!
//! A `#[service]` attribute on a trait gives a provider description (name, version, per-function
//! timeout and retry policy, which travel with the registry entry to every client), a server
//! adapter and a typed client. A call looks the provider up in the node's local registry copy,
//! merges call options field by field, retries only what is safe to retry under one budget
//! clock, re-resolves the provider before every attempt, and fails with typed, readable errors.
//!
//! See `docs/calls.md` for the call path and `docs/errors.md` for the errors.
#![deny(missing_docs)]

mod client;
pub mod error;
mod node;
pub mod options;
pub mod registry;
mod server;
pub mod service;
mod transport;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use client::{Call, CallFuture, Client};
pub use cluster_macros::service;
pub use error::{CallError, Reason, RpcError, RpcErrorKind, ServiceError};
pub use node::{Health, Node, NodeBuilder, Registration, ServiceStatus, StartError};
pub use options::{CallOptions, Source};
pub use registry::{MemoryRegistry, Registry};
pub use server::{DEFAULT_MAX_CONCURRENT_CALLS, DispatchError, Provide};
pub use service::{FunctionDescription, ServiceDescription};
pub use transport::{DEFAULT_MAX_FRAME, MemoryNetwork};

// The long-form docs, compiled as doc tests so their examples keep working.
#[cfg(doctest)]
#[doc = include_str!("../../docs/calls.md")]
struct CallsDoc;

#[cfg(doctest)]
#[doc = include_str!("../../docs/errors.md")]
struct ErrorsDoc;

#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadMe;
