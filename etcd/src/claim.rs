//! One live process per name, as with the gossip backend (`docs/security.md`): a node writes
//! its key only if no key holds the name (a transaction on the key's create revision), or if
//! the holder is this node's own lease, or if the holder does not answer on its RPC port (it
//! crashed, and its lease has not expired yet).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use cluster::registry::{NodeInfo, RegistryError};
use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};

use crate::keys::{self, Key, Keys};
use crate::registry::{Inner, lock};
use crate::still::held;

/// Probes of a holder that looks live, and how long each waits for a connection: as the
/// gossip backend's claim.
const PROBES: usize = 3;
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Writes `node`'s key and its `entries` (service name → value) on `lease` in one
/// transaction, deleting the keys of its services that are not among them; returns the
/// revision. `NameTaken` when a live process of another lease holds the name.
pub(crate) async fn claim(
    inner: &Inner,
    client: &Client,
    keys: &Keys,
    node: &NodeInfo,
    lease: i64,
    entries: &BTreeMap<String, String>,
) -> Result<i64, RegistryError> {
    let key = keys.node(&node.name);
    let with_lease = || Some(PutOptions::new().with_lease(lease));
    let mut writes = vec![TxnOp::put(
        key.clone(),
        keys::node_value(node),
        with_lease(),
    )];
    for (service, value) in entries {
        writes.push(TxnOp::put(
            keys.service(&node.name, service),
            value.clone(),
            with_lease(),
        ));
    }
    let stale = lock(&inner.mirror).keys_of(&node.name);
    for k in stale {
        if let Key::Service { service, .. } = k
            && !entries.contains_key(&service)
        {
            writes.push(TxnOp::delete(keys.service(&node.name, &service), None));
        }
    }
    let mut kv = client.kv_client();
    // The name is free, or already on this lease.
    let mut condition = vec![Compare::create_revision(key.clone(), CompareOp::Equal, 0)];
    for _ in 0..3 {
        let txn = Txn::new()
            .when(condition.clone())
            .and_then(writes.clone())
            .or_else(vec![TxnOp::get(key.clone(), None)]);
        let done = inner.ask("claiming the node's name", kv.txn(txn)).await?;
        let revision = done.header().map_or(0, |h| h.revision());
        if done.succeeded() {
            return Ok(revision);
        }
        let holder = done.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(got) => got.kvs().first().cloned(),
            _ => None,
        });
        let Some(holder) = holder else {
            // Deleted between the two: try again on a free name.
            condition = vec![Compare::create_revision(key.clone(), CompareOp::Equal, 0)];
            continue;
        };
        let addr = serde_json::from_slice::<NodeInfo>(holder.value())
            .ok()
            .map(|n| n.addr);
        // A holder at this node's own address is an earlier life of it: a live one would hold
        // the port.
        let ours = holder.lease() == lease || addr == Some(node.addr);
        let our_earlier_life = lock(&inner.own)
            .get(&node.name)
            .is_some_and(|o| o.lease == holder.lease());
        // A node's key always sits on a lease: one without is not a live process's (someone
        // wrote it by hand), and would otherwise hold the name for good.
        let leaseless = holder.lease() == 0;
        if !ours && !our_earlier_life && !leaseless {
            if let Some(addr) = addr
                && answers(addr).await
            {
                return Err(RegistryError::NameTaken {
                    name: node.name.clone(),
                    holder: addr,
                });
            }
            tracing::info!(
                "node `{}`: its earlier holder ({addr:?}) does not answer; taking the name over",
                node.name
            );
        }
        // Taken over only if nobody changed it since it was read.
        condition = vec![Compare::mod_revision(
            key.clone(),
            CompareOp::Equal,
            holder.mod_revision(),
        )];
    }
    Err(RegistryError::Unavailable(format!(
        "node `{}`: its key in etcd kept changing while it claimed it",
        node.name
    )))
}

/// Whether something accepts connections at `addr`: a live holder of the name.
async fn answers(addr: SocketAddr) -> bool {
    for _ in 0..PROBES {
        let probe = tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(addr));
        match held(probe).await {
            Ok(Ok(_)) => return true,
            // Refused: nothing listens there.
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => return false,
            _ => {}
        }
    }
    false
}
