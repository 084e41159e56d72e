//! A [`cluster::Registry`] on etcd: every node points at the same etcd cluster and changes
//! nothing else.
//!
//! - Each node's keys (`keys.rs`) sit on a lease of its own (`lease.rs`), kept alive every
//!   third of its TTL. A crash stops the keep-alives and etcd deletes the node's keys when the
//!   TTL runs out; a clean leave revokes the lease, deleting them at once.
//! - The local copy is filled by one range read and kept current by a watch from that
//!   revision (`watch.rs`); lookups never leave the node, and keep answering from the copy
//!   while etcd is unreachable.
//! - A name held by a live process cannot be taken (`claim.rs`).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use cluster_etcd::{EtcdConfig, EtcdRegistry};
//!
//! let ca = std::fs::read("etcd-ca.pem")?;
//! let registry = EtcdRegistry::new(
//!     EtcdConfig::new(["etcd-0:2379", "etcd-1:2379", "etcd-2:2379"])
//!         .tls(ca, None)
//!         .user("orders", std::env::var("ETCD_PASSWORD")?),
//! );
//! let node = cluster::Node::builder()
//!     .identity(cluster::Identity::from_dir("certs", "orders-1")?)
//!     .registry(registry)
//!     .start()
//!     .await?;
//! # drop(node); Ok(()) }
//! ```
//!
//! `docs/registry.md` compares it with the gossip and Eureka backends.

mod claim;
mod config;
mod keys;
mod lease;
mod mirror;
mod registry;
mod still;
mod watch;

pub use config::EtcdConfig;
pub use registry::EtcdRegistry;

// The long-form doc, compiled as a doc test so its example keeps working.
#[cfg(doctest)]
#[doc = include_str!("../../docs/etcd.md")]
struct EtcdGuide;
