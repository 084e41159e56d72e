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
    /// The lowest and highest wire versions the node speaks; `None` for a node of the first
    /// release, which speaks only version 1 and does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<(u32, u32)>,
}

impl NodeInfo {
    /// A node.
    pub fn new(name: impl Into<String>, addr: SocketAddr, generation: u64) -> Self {
        Self {
            name: name.into(),
            addr,
            generation,
            max_frame: None,
            wire: None,
        }
    }

    /// The node, saying the largest frame it accepts.
    pub fn with_max_frame(mut self, max_frame: Option<usize>) -> Self {
        self.max_frame = max_frame;
        self
    }

    /// The node, saying the wire versions it speaks.
    pub fn with_wire(mut self, versions: Option<std::ops::RangeInclusive<u32>>) -> Self {
        self.wire = versions.map(|v| (*v.start(), *v.end()));
        self
    }

    /// The wire versions as a backend stores them in text: `low-high`.
    pub fn wire_text(&self) -> Option<String> {
        self.wire.map(|(low, high)| format!("{low}-{high}"))
    }

    /// Reads what [`wire_text`](Self::wire_text) wrote; `None` for anything else (a node that
    /// says nothing readable is taken to speak wire 1).
    pub fn parse_wire_text(text: &str) -> Option<std::ops::RangeInclusive<u32>> {
        let (low, high) = text.split_once('-')?;
        let (low, high): (u32, u32) = (low.parse().ok()?, high.parse().ok()?);
        (low <= high).then_some(low..=high)
    }

    /// The wire versions the node speaks: what it said, or only version 1 if it said nothing.
    pub fn wire_versions(&self) -> std::ops::RangeInclusive<u32> {
        self.wire.map_or(1..=1, |(low, high)| low..=high)
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
    /// Its health check fails. It stays in the registry, and clients pass it over, unless more
    /// than half the replicas a call could go to fail at once: then they are all called (the
    /// panic threshold: a check that fails everywhere at once is more likely wrong, or a
    /// shared dependency down, than every replica broken).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failing: bool,
    /// Its node is suspect, as this node sees it: live, but silent for longer than its peers'
    /// heartbeats let expect (the gossip registry's `phi_threshold`), not yet for long enough to
    /// be dead (`dead_after`). Clients call it only when no replica that is not suspect can be.
    /// Local to the node that holds the copy: it is never sent, and never makes an event.
    #[serde(skip)]
    pub suspect: bool,
}

impl ServiceEntry {
    /// An entry.
    pub fn new(node: NodeInfo, description: Arc<ServiceDescription>) -> Self {
        Self {
            node,
            description,
            failing: false,
            suspect: false,
        }
    }

    /// The entry, marked as on a suspect node or not.
    pub fn with_suspect(mut self, suspect: bool) -> Self {
        self.suspect = suspect;
        self
    }

    /// The same provider, as an event tells it: the node, the description and whether it
    /// fails its health check, but not whether this node suspects its node.
    pub(crate) fn same_provider(&self, other: &ServiceEntry) -> bool {
        self.node == other.node
            && self.failing == other.failing
            && self.description == other.description
    }

    /// The entry, marked as failing its health check or not.
    pub fn with_failing(mut self, failing: bool) -> Self {
        self.failing = failing;
        self
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
