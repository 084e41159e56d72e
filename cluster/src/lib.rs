//! `cluster`: typed function calls across a cluster of nodes.
//!
//! A `#[service]` attribute on a trait gives a provider description (name, version, per-function
//! timeout and retry policy, which travel with the registry entry to every client), a server
//! adapter and a typed client. A call looks the provider up in the node's local registry copy,
//! merges call options field by field, retries only what is safe to retry under one budget
//! clock, re-resolves the provider before every attempt, and fails with typed, readable errors.
//!
//! ```
//! #[cluster::service(name = "search", version = "2.1.0", timeout = "5s",
//!                    retry(after = "200ms", budget = "30s"))]
//! pub trait Search {
//!     /// Safe to run twice: may be retried after a timeout.
//!     #[call(idempotent)]
//!     async fn search(&self, query: String) -> Result<Vec<String>, String>;
//!     /// Not idempotent: never run again once it may have run.
//!     #[call(timeout = "60s")]
//!     async fn reindex(&self, full: bool) -> u64;
//! }
//!
//! struct Engine;
//! impl Search for Engine {
//!     async fn search(&self, query: String) -> Result<Vec<String>, String> {
//!         if query.is_empty() { Err("empty query".into()) } else { Ok(vec![query]) }
//!     }
//!     async fn reindex(&self, _full: bool) -> u64 { 42 }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Two nodes on loopback TCP, over mutual TLS with certificates of a CA made here and
//! // thrown away (`Authority`, the `authority` feature; `cluster init` and `issue` write
//! // real ones), sharing an in-process
//! // registry (use `registry::GossipRegistry` across processes).
//! let ca = cluster::Authority::new("example")?;
//! let registry = cluster::MemoryRegistry::new();
//! let provider = cluster::Node::builder().identity(ca.issue("search-1")?).registry(registry.clone()).start().await?;
//! let _registration = provider.serve(SearchServer::new(Engine)).await?;
//! let node = cluster::Node::builder().identity(ca.issue("web-1")?).registry(registry).start().await?;
//!
//! let search = SearchClient::new(&node);
//! assert_eq!(search.search("rust".into()).await?, ["rust"]);
//! assert_eq!(search.reindex(true).timeout(std::time::Duration::from_secs(120)).await?, 42);
//! match search.search(String::new()).await {
//!     Err(cluster::CallError::App { error: e, .. }) => assert_eq!(e, "empty query"),
//!     other => panic!("{other:?}"),
//! }
//! provider.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! The long-form docs explain each mechanism: `docs/attributes.md` (every key of
//! `#[service]` and `#[call]`), `docs/calls.md` (the call path),
//! `docs/errors.md` (the errors), `docs/wire.md` (the handshake and the envelope),
//! `docs/registry.md` (the registry and routing),
//! `docs/deploys.md` (health, draining, rolling deploys), `docs/security.md` (identity, mutual
//! TLS, sealed gossip, who may call), `docs/discovery.md` (Eureka and the resolvers),
//! `docs/benchmarks.md` (what it costs).
#![deny(missing_docs)]

#[cfg(feature = "admin")]
mod admin;
mod background;
mod catch_unwind;
mod client;
pub mod context;
mod deadline;
pub mod error;
mod fast_map;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "json")]
pub mod json;
pub mod layer;
mod meters;
mod net;
mod node;
pub mod options;
mod rate_limited;
pub mod registry;
pub mod security;
mod server;
pub mod service;
mod shares;
mod transport;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use client::{Call, CallFuture, Client, ReportedFuture};
pub use cluster_macros::service;
pub use context::{Context, context};
pub use error::{
    AttemptKind, AttemptRecord, CallError, CallReport, Reason, RpcError, RpcErrorKind, ServiceError,
};
pub use node::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_FRAME_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION, DescribeError, Described, Describer, Health, Node,
    NodeBuilder, Registration, ServiceStatus, StartError,
};
pub use options::{CallOptions, Source};
pub use registry::{MemoryRegistry, Registry};
#[cfg(feature = "authority")]
pub use security::Authority;
pub use security::{Callers, GossipKey, Identity, IdentityError, KeyId, Keyring};
/// Versions and requirements on them, as `Client::require` and the descriptions take them.
pub use semver::{Version, VersionReq};
pub use server::{DEFAULT_MAX_CONCURRENT_CALLS, DispatchError, DispatchFuture, Provide};
pub use service::{FunctionDescription, ServiceDescription};
pub use transport::tcp::{
    DEFAULT_MAX_BUFFERED_BYTES, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_OPENING_CONNECTIONS,
};
pub use transport::{DEFAULT_MAX_FRAME, MAX_FRAME_LIMIT, MemoryNetwork, WIRE_VERSIONS};

// The long-form docs, compiled as doc tests so their examples keep working.
#[cfg(doctest)]
#[doc = include_str!("../../docs/calls.md")]
struct CallsDoc;

#[cfg(doctest)]
#[doc = include_str!("../../docs/compatibility.md")]
struct CompatibilityDoc;

#[cfg(doctest)]
#[doc = include_str!("../../docs/attributes.md")]
struct AttributesDoc;

#[cfg(doctest)]
#[doc = include_str!("../../docs/errors.md")]
struct ErrorsDoc;

#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadMe;

#[cfg(doctest)]
#[doc = include_str!("../../docs/registry.md")]
struct RegistryDoc;

#[cfg(doctest)]
#[doc = include_str!("../../docs/deploys.md")]
struct DeploysDoc;

#[cfg(doctest)]
#[doc = include_str!("../../docs/wire.md")]
struct WireDoc;

#[cfg(doctest)]
#[doc = include_str!("../../docs/security.md")]
struct SecurityDoc;

#[cfg(doctest)]
#[doc = include_str!("../../docs/operations.md")]
struct OperationsDoc;
