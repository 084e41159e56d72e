//! A cluster's secrets: a throwaway set in memory for the demo and the tests, and on disk as
//! the bootstrap commands write them (`init` and `issue`, from `cluster_cli::secrets`).
//!
//! ```text
//! cluster-node init --cluster prod --dir certs      # certs/ca.pem, ca.key, gossip.key
//! cluster-node issue --dir certs --node search-1    # certs/search-1.pem, search-1.key
//! ```
//!
//! `ca.key` signs new nodes: keep it where `issue` runs, not on the nodes. A node needs
//! `ca.pem`, `gossip.key` and its own two files.

use cluster::{Authority, GossipKey, Identity, Keyring};

pub use cluster_cli::secrets::{init, issue};

/// A CA and a gossip key.
pub struct Secrets {
    /// The cluster's CA.
    pub ca: Authority,
    /// The gossip key.
    pub key: GossipKey,
}

impl Secrets {
    /// New secrets for `cluster`, in memory only: gone when the process ends.
    pub fn throwaway(cluster: &str) -> Self {
        Self {
            ca: Authority::new(cluster).expect("a valid cluster name"),
            key: GossipKey::generate(),
        }
    }

    /// A certificate for `node`.
    pub fn identity(&self, node: &str) -> Identity {
        self.ca.issue(node).expect("a valid node name")
    }

    /// A keyring of the gossip key.
    pub fn keyring(&self) -> Keyring {
        Keyring::new(self.key.clone())
    }
}
