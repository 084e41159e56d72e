//! Joining the cluster as a node that serves nothing, under the operator's identity (the same
//! rules as any node: a certificate of the cluster's CA and its gossip key, or plaintext asked
//! for by name), and waiting until the registry copy has filled.
//!
//! Gossip has no "complete" signal: a new node hears the cluster's state in parts over a few
//! rounds (`docs/registry.md`). So the copy counts as filled when it holds another node and has
//! not changed for [`QUIET`], a few gossip rounds; at most `--wait`.

use std::time::Duration;

use cluster::registry::{GossipConfig, GossipRegistry, RegistryError};
use cluster::{Identity, Keyring, Node, StartError};
use tokio::time::Instant;

use crate::args::JoinArgs;
use crate::{Failure, misuse};

/// How long the copy must stay unchanged to count as filled: five rounds of gossip at the
/// default interval (200 ms), time for the last parts of a large cluster's state to arrive.
const QUIET: Duration = Duration::from_millis(1000);

/// A node of the cluster, for as long as a command runs.
pub(crate) struct Joined {
    pub(crate) node: Node,
}

impl Joined {
    /// Leaves cleanly, so that the nodes see a departure and not a crash.
    pub(crate) async fn leave(self) {
        self.node.shutdown().await;
    }
}

/// Starts the node and waits for its copy of the registry to fill.
pub(crate) async fn join(args: &JoinArgs) -> Result<Joined, Failure> {
    // `--wait` counts from here: starting the node (its name claim takes a few rounds) is part
    // of the wait.
    let give_up = Instant::now() + args.wait;
    let cluster = match args.certs {
        None => args.cluster_id.as_deref(),
        Some(_) => None,
    };
    let etcd = args.etcd.registry(cluster).map_err(Failure::Usage)?;
    if etcd.is_none() {
        if args.seeds.is_empty() {
            misuse(
                "no seed: give --seed HOST:PORT (a node's gossip address) or CLUSTER_SEEDS, or --etcd HOST:PORT",
            );
        }
        for seed in &args.seeds {
            check_seed(seed).await?;
        }
    }
    if let Some(dir) = &args.certs
        && !dir.join("ca.pem").exists()
    {
        return Err(Failure::Usage(format!(
            "{} holds no cluster (no ca.pem): give the directory `cluster init` wrote, with a \
             certificate from `cluster issue`",
            dir.display()
        )));
    }
    let mut gossip = GossipConfig::new().seeds(args.seeds.iter());
    if let Some(listen) = args.gossip_listen {
        gossip = gossip.listen(listen);
    }
    if let Some(advertise) = args.gossip_advertise {
        gossip = gossip.advertise(advertise);
    }
    let (builder, gossip) = match (&args.certs, args.insecure) {
        (Some(dir), false) => {
            let Some(name) = &args.name else {
                misuse(
                    "--certs needs --name (or CLUSTER_NAME): the name of the certificate in DIR",
                );
            };
            let identity = Identity::from_dir(dir, name).map_err(|e| {
                Failure::Usage(format!(
                    "the identity of `{name}` in {}: {e}",
                    dir.display()
                ))
            })?;
            // On etcd, no gossip: no gossip key.
            if etcd.is_some() {
                (Node::builder().identity(identity), gossip)
            } else {
                let keyring = Keyring::from_file(dir.join("gossip.key"))
                    .map_err(|e| Failure::Usage(format!("the gossip key: {e}")))?;
                (Node::builder().identity(identity), gossip.keyring(keyring))
            }
        }
        (None, true) => {
            let Some(cluster) = &args.cluster_id else {
                misuse(
                    "--insecure needs --cluster-id: a plaintext cluster still has a name of its own",
                );
            };
            let name = args
                .name
                .clone()
                .unwrap_or_else(|| format!("cluster-cli-{}", std::process::id()));
            (
                Node::builder().name(name).insecure(),
                gossip.insecure().cluster_id(cluster),
            )
        }
        (Some(_), true) => misuse("--certs and --insecure: choose one"),
        (None, false) => misuse(
            "no identity: give --certs DIR and --name NAME (`cluster issue --dir DIR --node NAME` \
             makes one), or --insecure --cluster-id ID for a plaintext cluster",
        ),
    };
    let builder = match &etcd {
        Some(registry) => builder.registry(registry.clone()),
        None => builder.registry(GossipRegistry::new(gossip)),
    };
    let node = builder
        .start()
        .await
        .map_err(|e| match e {
            StartError::Registry(RegistryError::NameTaken { name, holder }) => Failure::Failed(format!(
                "the name `{name}` is in use by a live process at {holder} (another `cluster` command \
                 under the same name?): each process needs a name of its own, so issue another \
                 certificate (`cluster issue --dir DIR --node {name}-2`)"
            )),
            e => Failure::Failed(format!("cannot join: {e}")),
        })?;
    let joined = Joined { node };
    // On etcd the copy is whole once the node has started: it read the registry in one go.
    if etcd.is_some() {
        return Ok(joined);
    }
    if let Err(e) = settle(&joined.node, args, give_up).await {
        joined.leave().await;
        return Err(e);
    }
    Ok(joined)
}

/// A seed must be HOST:PORT and resolve: said at once, rather than as a seed that never
/// answers after the whole wait.
async fn check_seed(seed: &str) -> Result<(), Failure> {
    match tokio::net::lookup_host(seed).await {
        Ok(mut addrs) => match addrs.next() {
            Some(_) => Ok(()),
            None => Err(Failure::Usage(format!(
                "the seed `{seed}` resolves to no address"
            ))),
        },
        Err(e) => Err(Failure::Usage(format!(
            "the seed `{seed}` is not a HOST:PORT that resolves ({e}): give a node's gossip address"
        ))),
    }
}

/// Waits until the copy holds another node and has been quiet for [`QUIET`], until `give_up`.
async fn settle(node: &Node, args: &JoinArgs, give_up: Instant) -> Result<(), Failure> {
    let registry = node.registry();
    let mut changes = registry.changes();
    let mut quiet_from = Instant::now();
    loop {
        let others = registry.nodes().iter().any(|n| n.name != node.name());
        let quiet_until = quiet_from + QUIET;
        if others && Instant::now() >= quiet_until {
            return Ok(());
        }
        if Instant::now() >= give_up {
            if others {
                // Still changing at the deadline: show what is there, and say it may be partial.
                eprintln!(
                    "cluster: the registry copy was still filling when --wait ({:?}) ended: what \
                     follows may be partial",
                    args.wait
                );
                return Ok(());
            }
            return Err(Failure::Failed(format!(
                "no node answered within {:?} through the seeds {}: are they up, and is this the \
                 same cluster (a certificate of its CA, its gossip key)?",
                args.wait,
                args.seeds.join(", ")
            )));
        }
        let wake = if others {
            quiet_until.min(give_up)
        } else {
            give_up
        };
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return Err(Failure::Failed("the registry stopped".to_owned()));
                }
                quiet_from = Instant::now();
            }
            () = tokio::time::sleep_until(wake) => {}
        }
    }
}
