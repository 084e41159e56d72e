//! Upgrades (WebSocket, or any `Connection: upgrade`): once the instance answers `101`, the
//! client's connection and the instance's are joined, bytes copied both ways until either side
//! closes. The client's connection keeps its place among the gateway's connections meanwhile
//! (the place is owned by its stream), so tunnels count against `max_connections`.

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use super::pool::Lease;
use crate::balance::Pick;

/// Joins the two sides in a task of their own; the pick counts the tunnel as a request in
/// flight to the instance until it closes. The connection's lease is held until hyper has
/// handed its socket over, and never goes back to the pool.
pub(crate) fn join(client: OnUpgrade, instance: OnUpgrade, pick: Pick, lease: Lease) {
    tokio::spawn(async move {
        let joined = tokio::try_join!(client, instance);
        drop(lease);
        let (client, instance) = match joined {
            Ok(both) => both,
            Err(e) => {
                tracing::debug!("upgrade to {} failed: {e}", pick.endpoint());
                return;
            }
        };
        tracing::debug!("tunnel to {} open", pick.endpoint());
        let (mut client, mut instance) = (TokioIo::new(client), TokioIo::new(instance));
        if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut instance).await {
            tracing::debug!("tunnel to {} ended: {e}", pick.endpoint());
        }
        drop(pick);
    });
}
