//! Upgrades (WebSocket, or any `Connection: upgrade`): once the instance answers `101`, the
//! client's connection and the instance's are joined, bytes copied both ways until either side
//! closes. The client's connection keeps its place among the gateway's connections meanwhile
//! (the place is owned by its stream), so tunnels count against `max_connections`.

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use crate::balance::Pick;

/// Joins the two sides in a task of their own; the pick counts the tunnel as a request in
/// flight to the instance until it closes.
pub(crate) fn join(client: OnUpgrade, instance: OnUpgrade, pick: Pick) {
    tokio::spawn(async move {
        let (client, instance) = match tokio::try_join!(client, instance) {
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
