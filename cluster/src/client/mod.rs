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
    /// Behind one `Arc`: every call holds the client, and cloning it is then one count, not
    /// one per shared part (each a cache line that both workers of a runtime would move).
    core: Arc<ClientCore>,
}

/// What a [`Client`] holds.
#[derive(Clone)]
pub(crate) struct ClientCore {
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
        let core = &self.core;
        f.debug_struct("Client")
            .field("service", &core.description.name)
            .field("requirement", &core.requirement.to_string())
            .field("node", &core.node.info.name)
            .field("defaults", &core.defaults)
            .finish()
    }
}

impl Client {
    /// A client of the service `description` describes, calling through `node`.
    pub fn new(node: &Node, description: &'static ServiceDescription) -> Self {
        let core = ClientCore {
            node: node.inner.clone(),
            description,
            requirement: Arc::new(description.requirement()),
            defaults: CallOptions::new(),
            signatures: description.functions.iter().map(|f| f.hash()).collect(),
            turn: node.inner.peers.turn(&description.name),
            routes: route::Routes::new(description.functions.len()),
            throttle: node.inner.peers.throttle(&description.name),
            meters: node.inner.meters.as_ref().map(|m| m.client(description)),
        };
        Self {
            core: Arc::new(core),
        }
    }

    /// Client-side defaults for every call, over the provider's options and under per-call ones.
    /// Fields `options` sets override those set by earlier `with_options` calls; the others stay.
    pub fn with_options(mut self, options: CallOptions) -> Self {
        let core = Arc::make_mut(&mut self.core);
        core.defaults = core.defaults.overlay(&options);
        core.routes = route::Routes::new(core.description.functions.len());
        self
    }

    /// Replaces the requirement put on providers' versions (default: the client's major
    /// version, or the `compat` of `#[service]`).
    pub fn require(mut self, requirement: VersionReq) -> Self {
        let core = Arc::make_mut(&mut self.core);
        core.requirement = Arc::new(requirement);
        core.routes = route::Routes::new(core.description.functions.len());
        self
    }

    /// A call of function number `function` whose return type is `Result<T, E>`.
    pub fn call<A, T, E>(&self, function: usize, args: &A) -> Call<T, E>
    where
        A: Serialize + ?Sized,
        T: DeserializeOwned,
        E: DeserializeOwned,
    {
        Call::new(self.core.clone(), function, encode_value(args), |bytes| {
            crate::service::decode::<Result<T, E>>(bytes)
        })
    }

    /// A call of function number `function` whose return type `T` is not a `Result`.
    pub fn call_plain<A, T>(&self, function: usize, args: &A) -> Call<T, std::convert::Infallible>
    where
        A: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        Call::new(self.core.clone(), function, encode_value(args), |bytes| {
            crate::service::decode::<T>(bytes).map(Ok)
        })
    }
}
