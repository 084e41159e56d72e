//! A node's lease: granted when it joins, kept alive every third of its TTL, and, when etcd
//! has let it expire (this process was cut off longer than the TTL), granted again with every
//! key of the node written again. A crash stops the keep-alives: etcd deletes the node's keys
//! when the TTL runs out, and every watcher sees them go.

use std::sync::Weak;
use std::time::Duration;

use std::sync::Arc;

use etcd_client::Client;

use crate::keys::{Key, Keys};
use crate::mirror::Value;
use crate::registry::{Inner, lock};
use cluster::registry::RegistryError;

/// A new lease of the configured TTL.
pub(crate) async fn grant(inner: &Inner, client: &Client) -> Result<i64, RegistryError> {
    let mut leases = client.lease_client();
    let granted = inner
        .ask(
            "granting a lease",
            leases.grant(inner.config.ttl_secs(), None),
        )
        .await?;
    Ok(granted.id())
}

/// Keeps `node`'s lease alive until the node leaves or the registry stops.
pub(crate) async fn keep(inner: Weak<Inner>, client: Client, keys: Keys, node: String) {
    let Some(every) = inner
        .upgrade()
        .map(|i| (i.config.lease_ttl / 3).max(Duration::from_millis(500)))
    else {
        return;
    };
    let mut backoff = Backoff::new(every);
    loop {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        match renew(&inner, &client, &keys, &node).await {
            Ok(()) => {
                backoff.reset();
                drop(inner);
                tokio::time::sleep(every).await;
            }
            Err(e) => {
                tracing::warn!("node `{node}`'s lease in etcd: {e}");
                drop(inner);
                tokio::time::sleep(backoff.next()).await;
            }
        }
    }
}

/// One keep-alive. A lease etcd no longer has (it expired while etcd did not hear from us, or
/// someone revoked it) is granted again and the node's keys written again; so are keys whose
/// write failed earlier, and keys of ours the copy no longer holds (deleted from outside).
async fn renew(
    inner: &Inner,
    client: &Client,
    keys: &Keys,
    node: &str,
) -> Result<(), RegistryError> {
    let Some((lease, dirty, info, services)) = lock(&inner.own).get(node).map(|o| {
        (
            o.lease,
            o.dirty,
            o.info.clone(),
            o.entries.keys().cloned().collect::<Vec<_>>(),
        )
    }) else {
        return Ok(());
    };
    if lease == 0 {
        return rewrite(inner, client, keys, node, 0).await;
    }
    let mut leases = client.lease_client();
    match inner
        .ask("keeping the lease alive", leases.keep_alive(lease))
        .await
    {
        // `keep_alive` sent one renewal and read its answer; the stream ends here.
        Ok(_stream) => {}
        Err(RegistryError::Unavailable(e)) if e.contains("not found") => {
            return rewrite(inner, client, keys, node, 0).await;
        }
        Err(e) => return Err(e),
    }
    if dirty || !lock(&inner.mirror).holds(&info, &services) {
        return rewrite(inner, client, keys, node, lease).await;
    }
    Ok(())
}

/// Writes every key of `node` again, on `lease`, or on a new one when it is 0 (lost).
async fn rewrite(
    inner: &Inner,
    client: &Client,
    keys: &Keys,
    node: &str,
    lease: i64,
) -> Result<(), RegistryError> {
    let _write = inner.writes.lock().await;
    let fresh = lease == 0;
    let lease = if fresh {
        tracing::warn!(
            "etcd no longer has node `{node}`'s lease (it expired while etcd did not hear from \
             the node, or someone revoked it): registering again on a new one"
        );
        if let Some(own) = lock(&inner.own).get_mut(node) {
            own.lease = 0;
        }
        grant(inner, client).await?
    } else {
        lease
    };
    let Some((info, entries)) = lock(&inner.own)
        .get(node)
        .map(|o| (o.info.clone(), o.entries.clone()))
    else {
        return Ok(());
    };
    let revision = match crate::claim::claim(inner, client, keys, &info, lease, &entries).await {
        Ok(revision) => revision,
        Err(e) => {
            // A lease granted for nothing is given back, not left to run out.
            if fresh {
                let mut leases = client.lease_client();
                let _ = inner.ask("revoking", leases.revoke(lease)).await;
            }
            if let RegistryError::NameTaken { holder, .. } = &e {
                tracing::error!(
                    "node `{node}`: another live process at {holder} took its name while etcd \
                     did not hear from this one; it is out of every lookup and tries again each \
                     renewal"
                );
            }
            return Err(e);
        }
    };
    let mut changes = vec![(Key::Node(node.to_owned()), Some(Value::Node(info)))];
    for k in lock(&inner.mirror).keys_of(node) {
        if let Key::Service { service, .. } = &k
            && !entries.contains_key(service)
        {
            changes.push((k, None));
        }
    }
    for (service, value) in &entries {
        if let Ok(entry) = serde_json::from_str(value) {
            let key = Key::Service {
                node: node.to_owned(),
                service: service.clone(),
            };
            changes.push((key, Some(Value::Entry(Arc::new(entry)))));
        }
    }
    if let Some(own) = lock(&inner.own).get_mut(node) {
        own.lease = lease;
        own.dirty = false;
    }
    inner.applied(revision, changes);
    Ok(())
}

/// Waits between failed attempts: from a tenth of the keep-alive interval, doubling, capped at
/// the interval.
struct Backoff {
    cap: Duration,
    next: Duration,
}

impl Backoff {
    fn new(cap: Duration) -> Self {
        Self {
            cap,
            next: cap / 10,
        }
    }
    fn reset(&mut self) {
        self.next = self.cap / 10;
    }
    fn next(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(self.cap);
        now
    }
}
