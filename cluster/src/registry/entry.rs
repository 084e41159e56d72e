use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::service::ServiceDescription;

/// A node, as the registry knows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NodeInfo {
    /// Its name, unique in the cluster at any time.
    pub name: String,
    /// Where its calls are served.
    pub addr: SocketAddr,
    /// Distinguishes a restarted node from its earlier life under the same name.
    pub generation: u64,
    /// The largest frame the node accepts, if it says: a client does not send it a request
    /// that would not fit (which would break the connection for every call on it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_frame: Option<usize>,
}

impl NodeInfo {
    /// A node.
    pub fn new(name: impl Into<String>, addr: SocketAddr, generation: u64) -> Self {
        Self {
            name: name.into(),
            addr,
            generation,
            max_frame: None,
        }
    }

    /// The node, saying the largest frame it accepts.
    pub fn with_max_frame(mut self, max_frame: Option<usize>) -> Self {
        self.max_frame = max_frame;
        self
    }
}

impl fmt::Display for NodeInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.addr)
    }
}

/// One provider of one service: its node and its description.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ServiceEntry {
    /// The node it runs on.
    pub node: NodeInfo,
    /// What it provides and how it wants to be called.
    pub description: Arc<ServiceDescription>,
}

impl ServiceEntry {
    /// An entry.
    pub fn new(node: NodeInfo, description: Arc<ServiceDescription>) -> Self {
        Self { node, description }
    }
}

/// A change in the registry.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RegistryEvent {
    /// A provider became available.
    ServiceUp(Arc<ServiceEntry>),
    /// A provider went away.
    ServiceDown(Arc<ServiceEntry>),
    /// A node joined.
    NodeUp(NodeInfo),
    /// A node left or was lost.
    NodeDown(NodeInfo),
}
