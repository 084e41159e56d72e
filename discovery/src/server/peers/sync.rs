//! The start-up pull: a new server takes the registry of the first peer that answers.

use std::time::Duration;

use axum::http::header;

use crate::model;
use crate::server::Shared;

/// Pulls the registry from the first peer that answers and registers every instance as a
/// replication; the number of instances taken, 0 if no peer answered.
pub(crate) async fn sync_from_peers(
    shared: &Shared,
    http: &reqwest::Client,
    timeout: Duration,
) -> usize {
    // The largest registry this server could hold, written out: its instances at their
    // largest, twice over for the JSON around them (and at least 64 MiB).
    let limits = &shared.config.limits;
    let max = limits
        .max_instances
        .saturating_mul(limits.max_instance_bytes)
        .saturating_mul(2)
        .max(64 << 20);
    for url in shared.peers.urls() {
        let got = super::send::as_peer(
            http.get(format!("{url}apps/")),
            shared.access.peers.as_ref(),
        )
        .timeout(timeout)
        .header(header::ACCEPT.as_str(), "application/json")
        .send()
        .await;
        let body = match got {
            Ok(r) if r.status().is_success() => match super::send::read_capped(r, max).await {
                Some(b) => b,
                None => {
                    tracing::warn!(
                        "peer {url}'s registry broke off or is over {max} bytes: not taken"
                    );
                    continue;
                }
            },
            Ok(r) => {
                tracing::info!("peer {url} answered {} to the start-up fetch", r.status());
                continue;
            }
            Err(e) => {
                tracing::info!("peer {url} is not reachable for the start-up fetch: {e}");
                continue;
            }
        };
        let now = shared.store.clock().now_ms();
        let Ok(apps) = model::json::read_applications(&body, now) else {
            tracing::warn!("peer {url} sent a registry this server cannot read");
            continue;
        };
        let mut n = 0;
        for i in apps.instances() {
            let app = i.app.clone();
            if shared.store.register(&app, i.clone()).is_ok() {
                n += 1;
            }
        }
        tracing::info!("took {n} instances from peer {url} at start-up");
        return n;
    }
    0
}
