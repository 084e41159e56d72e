//! The call path: resolve a provider in the local registry, merge the options field by field,
//! run attempts under one budget clock, re-resolve before every attempt, classify each failure.
//! `docs/calls.md` walks through it step by step.

mod attempt;
mod call;
mod failure;
mod hedge;
mod pauses;
pub(crate) mod peers;
mod report;
mod route;
mod select;
mod throttle;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use semver::VersionReq;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use call::{Call, CallFuture, ReportedFuture};

use crate::node::{Node, NodeInner};
use crate::options::CallOptions;
use crate::service::{ServiceDescription, encode_value};

/// The untyped client a generated `XClient` wraps: one service, through one node.
#[derive(Clone)]
pub struct Client {
    pub(crate) node: Arc<NodeInner>,
    pub(crate) description: &'static ServiceDescription,
    pub(crate) requirement: Arc<VersionReq>,
    pub(crate) defaults: CallOptions,
    // Signature hashes of the description's functions, computed once.
    pub(crate) signatures: Arc<[u64]>,
    // Spreads calls over equally good providers: the node's counter for the service, shared
    // by every client of it there.
    pub(crate) turn: Arc<AtomicUsize>,
    // What the last full choice found per function (`route.rs`). A client with other
    // defaults or another requirement starts with none: the routes hold merged options.
    pub(crate) routes: Arc<route::Routes>,
    // Retry throttling: the node's counts for the service, shared like `turn`.
    pub(crate) throttle: Arc<throttle::Throttle>,
    // The functions' metrics, resolved once per description on the node; `None` when the node
    // records none, and a call then pays one branch.
    pub(crate) meters: Option<Arc<crate::meters::ClientMeters>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("service", &self.description.name)
            .field("requirement", &self.requirement.to_string())
            .field("node", &self.node.info.name)
            .field("defaults", &self.defaults)
            .finish()
    }
}

impl Client {
    /// A client of the service `description` describes, calling through `node`.
    pub fn new(node: &Node, description: &'static ServiceDescription) -> Self {
        Self {
            node: node.inner.clone(),
            description,
            requirement: Arc::new(description.requirement()),
            defaults: CallOptions::new(),
            signatures: description.functions.iter().map(|f| f.hash()).collect(),
            turn: node.inner.peers.turn(&description.name),
            routes: route::Routes::new(description.functions.len()),
            throttle: node.inner.peers.throttle(&description.name),
            meters: node.inner.meters.as_ref().map(|m| m.client(description)),
        }
    }

    /// Client-side defaults for every call, over the provider's options and under per-call ones.
    /// Fields `options` sets override those set by earlier `with_options` calls; the others stay.
    pub fn with_options(mut self, options: CallOptions) -> Self {
        self.defaults = self.defaults.overlay(&options);
        self.routes = route::Routes::new(self.description.functions.len());
        self
    }

    /// Replaces the requirement put on providers' versions (default: the client's major
    /// version, or the `compat` of `#[service]`).
    pub fn require(mut self, requirement: VersionReq) -> Self {
        self.requirement = Arc::new(requirement);
        self.routes = route::Routes::new(self.description.functions.len());
        self
    }

    /// A call of function number `function` whose return type is `Result<T, E>`.
    pub fn call<A, T, E>(&self, function: usize, args: &A) -> Call<T, E>
    where
        A: Serialize + ?Sized,
        T: DeserializeOwned,
        E: DeserializeOwned,
    {
        Call::new(self.clone(), function, encode_value(args), |bytes| {
            crate::service::decode::<Result<T, E>>(bytes)
        })
    }

    /// A call of function number `function` whose return type `T` is not a `Result`.
    pub fn call_plain<A, T>(&self, function: usize, args: &A) -> Call<T, std::convert::Infallible>
    where
        A: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        Call::new(self.clone(), function, encode_value(args), |bytes| {
            crate::service::decode::<T>(bytes).map(Ok)
        })
    }
}
