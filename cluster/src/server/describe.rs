//! The built-in request every node answers: "which node are you, and what do you serve?". A
//! registry backend with no registry server of its own (`cluster-discovery`'s resolver
//! backend) learns each provider from the provider itself this way.
//!
//! 1. The caller sends an ordinary request (wire 2 and later) to the reserved service
//!    [`SERVICE`], function [`FUNCTION`], signature 0, no arguments: it travels on an
//!    authenticated connection like every call, under the frame limits of both sides.
//! 2. The dispatcher answers it before any service lookup, admission or provider layer
//!    (`dispatch.rs`): a draining node still answers, and says it is draining.
//! 3. The answer is a [`Described`], MessagePack with named fields (as arguments and results
//!    are, `service/codec.rs`): a later build may add a field, an older one skips it. It is cut
//!    to the caller's reply limit like any reply: a node whose descriptions do not fit answers
//!    `TooLarge`.
//! 4. The services are the node's own registry entries, as the node registered them: a service
//!    deregistered, or withdrawn by a draining shutdown, is not in the answer; one failing its
//!    health check is, named in [`Described::failing`] (callers pass it over unless too many
//!    replicas fail at once: the panic threshold).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::registry::{NodeInfo, Registry};
use crate::service::{ServiceDescription, encode};
use crate::transport::Reply;

/// The reserved service name of the describe request. The dispatcher answers it before looking
/// any service up: a service of the user's under this name would never be reached.
pub(crate) const SERVICE: &str = "cluster.describe";

/// The function of the describe request.
pub(crate) const FUNCTION: &str = "describe";

/// What a node says about itself when asked ([`Node::describe_peer`](crate::Node::describe_peer)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Described {
    /// The node as it knows itself, with the address it advertises (behind NAT, not the one a
    /// caller reached it at: a caller keeps that one).
    pub node: NodeInfo,
    /// The services it offers now, with their full descriptions (timeouts, retry policy,
    /// idempotence); empty while it drains.
    pub services: Vec<ServiceDescription>,
    /// Whether the node is shutting down: it refuses new calls with `Draining`.
    #[serde(default)]
    pub draining: bool,
    /// The names of the services in `services` that fail their health check.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<String>,
}

/// Where a node's answer comes from: its own identity and its registry's entries of it.
pub(crate) struct Source {
    pub(crate) info: NodeInfo,
    pub(crate) registry: Arc<dyn Registry>,
}

impl Source {
    /// The encoded answer, or `TooLarge` if it is longer than `limit` bytes (the caller's
    /// reply limit or this node's frame limit, the lower).
    pub(crate) fn answer(&self, draining: bool, limit: usize) -> Reply {
        let entries = if draining {
            Vec::new()
        } else {
            self.registry.services_on(&self.info.name)
        };
        let described = Described {
            node: self.info.clone(),
            services: entries.iter().map(|e| (*e.description).clone()).collect(),
            draining,
            failing: entries
                .iter()
                .filter(|e| e.failing)
                .map(|e| e.description.name.clone())
                .collect(),
        };
        match encode(&described) {
            Ok(bytes) if bytes.len() > limit => Reply::TooLarge(format!(
                "the node's description is {} bytes, more than the reply limit ({limit})",
                bytes.len()
            )),
            Ok(bytes) => Reply::Done(bytes.into()),
            Err(e) => {
                Reply::Undeliverable(format!("the node's description cannot be encoded: {e}"))
            }
        }
    }
}
