//! The code of `docs/guide.md`: two services, `inventory` and `orders`, and how each process
//! joins the cluster. The processes are in `src/bin/`.

pub mod inventory;
pub mod orders;

use std::error::Error;
use std::net::SocketAddr;

use cluster::registry::{GossipConfig, GossipRegistry};
use cluster::{Identity, Keyring, Node};

/// Starts this process's node under `name`: its certificate and key from `certs/`, the
/// cluster's gossip key from `certs/gossip.key`, and the other nodes found through the gossip
/// address in `SEED`, when it is set. Returns the node and its own gossip address.
pub async fn join(name: &str) -> Result<(Node, SocketAddr), Box<dyn Error>> {
    let seeds: Vec<String> = std::env::var("SEED").into_iter().collect();
    let registry = GossipRegistry::new(
        GossipConfig::new()
            .keyring(Keyring::from_file("certs/gossip.key")?)
            .seeds(seeds),
    );
    let node = Node::builder()
        .identity(Identity::from_dir("certs", name)?)
        .registry(registry.clone())
        .start()
        .await?;
    let gossip = registry.gossip_addr().ok_or("gossip is not running")?;
    Ok((node, gossip))
}
