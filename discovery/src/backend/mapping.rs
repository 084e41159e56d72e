//! A cluster service entry as a Eureka instance, and back.
//!
//! Each service of each node is one instance: application = the service name upper-cased,
//! instance id = `node:service`, address and port = the node's, VIP = the service name. The
//! metadata carries what the call path needs: the node, its generation, the version, the call
//! options and the whole description (functions, signatures, idempotency).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use cluster::registry::{NodeInfo, ServiceEntry};
use cluster::service::ServiceDescription;

use crate::model::{Instance, Status};

/// The application nodes register under, so that `nodes()` sees nodes without services.
pub const NODE_APP: &str = "CLUSTER-NODE";

/// Metadata keys.
pub mod keys {
    /// The service's name as declared (Eureka upper-cases application names).
    pub const SERVICE: &str = "cluster.service";
    /// The node's name.
    pub const NODE: &str = "cluster.node";
    /// The node's generation.
    pub const GENERATION: &str = "cluster.generation";
    /// The provider's version.
    pub const VERSION: &str = "cluster.version";
    /// The service-level call options, JSON.
    pub const OPTIONS: &str = "cluster.options";
    /// The whole description, JSON.
    pub const DESCRIPTION: &str = "cluster.description";
    /// The largest frame the node accepts, in bytes.
    pub const MAX_FRAME: &str = "cluster.max_frame";
    /// The wire versions the node speaks, `low-high`.
    pub const WIRE: &str = "cluster.wire";
}

fn base(app: &str, id: String, node: &NodeInfo, lease: (u64, u64)) -> Instance {
    let ip = node.addr.ip().to_string();
    let mut i = Instance::new(app, &ip, node.addr.port())
        .with_id(id)
        .lease(lease.0, lease.1)
        .meta(keys::NODE, node.name.clone())
        .meta(keys::GENERATION, node.generation.to_string());
    if let Some(max) = node.max_frame {
        i = i.meta(keys::MAX_FRAME, max.to_string());
    }
    if let Some(wire) = node.wire_text() {
        i = i.meta(keys::WIRE, wire);
    }
    i.vip_address = Some(app.to_ascii_lowercase());
    i
}

/// The instance a service entry is registered as.
pub fn entry_instance(entry: &ServiceEntry, lease: (u64, u64)) -> Instance {
    let d = &entry.description;
    let mut i = base(
        &d.name,
        format!("{}:{}", entry.node.name, d.name),
        &entry.node,
        lease,
    )
    .meta(keys::SERVICE, d.name.clone())
    .meta(keys::VERSION, d.version.to_string())
    .meta(
        keys::OPTIONS,
        serde_json::to_string(&d.options).unwrap_or_default(),
    )
    .meta(
        keys::DESCRIPTION,
        serde_json::to_string(d.as_ref()).unwrap_or_default(),
    );
    i.vip_address = Some(d.name.clone());
    // A replica failing its health check is DOWN, as Eureka's own clients report it; ours
    // still read it, marked failing, for the panic threshold.
    if entry.failing {
        i.status = Status::Down;
    }
    i
}

/// The instance a node is registered as.
pub fn node_instance(node: &NodeInfo, lease: (u64, u64)) -> Instance {
    base(NODE_APP, node.name.clone(), node, lease)
}

fn node_of(i: &Instance) -> Option<NodeInfo> {
    let name = i.metadata.get(keys::NODE)?;
    let ip: IpAddr = i.ip_addr.parse().ok()?;
    let generation = i
        .metadata
        .get(keys::GENERATION)
        .and_then(|g| g.parse().ok())
        .unwrap_or(0);
    let node = NodeInfo::new(name.clone(), SocketAddr::new(ip, i.port.port), generation);
    let max_frame = i.metadata.get(keys::MAX_FRAME).and_then(|m| m.parse().ok());
    let wire = i
        .metadata
        .get(keys::WIRE)
        .and_then(|w| NodeInfo::parse_wire_text(w));
    Some(node.with_max_frame(max_frame).with_wire(wire))
}

/// The node an instance stands for, if it is a node registration of ours and UP.
pub fn instance_node(i: &Instance) -> Option<NodeInfo> {
    if i.app != NODE_APP || i.status != Status::Up {
        return None;
    }
    node_of(i)
}

/// The service entry an instance stands for, if it is one of ours and UP (or DOWN: failing its
/// health check, [`ServiceEntry::failing`]). Instances that other clients registered (a Spring
/// or Python service) have no description and are not callable through the framework: they
/// are skipped.
pub fn instance_entry(i: &Instance) -> Option<ServiceEntry> {
    let failing = match i.status {
        Status::Up => false,
        Status::Down => true,
        _ => return None,
    };
    let description: ServiceDescription =
        serde_json::from_str(i.metadata.get(keys::DESCRIPTION)?).ok()?;
    if !description.name.eq_ignore_ascii_case(&i.app) {
        return None;
    }
    Some(ServiceEntry::new(node_of(i)?, Arc::new(description)).with_failing(failing))
}
