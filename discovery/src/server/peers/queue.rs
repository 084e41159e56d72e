//! The forwarding side: one queue per peer, drained in batches by a task that also acts on
//! what the peer answered for each item.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::pending::Outbox;
use super::send::post_batch;
use super::wire::{Action, Item};
use super::{ReplicationStats, base_url};
use crate::model::json;
use crate::server::limits::warn::{Throttle, throttled_warn};
use crate::server::{Credentials, Shared};

/// How this server replicates to its peers.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// How long a peer has to answer a batch (and the start-up pull).
    pub(crate) timeout: Duration,
    /// What this server sends as a peer.
    pub(crate) credentials: Option<Credentials>,
    /// The most writes waiting for one peer.
    pub(crate) max_queue: usize,
    /// The most bytes of a peer's answer read.
    pub(crate) max_answer_bytes: usize,
    /// For the warnings a peer's failures repeat.
    pub(crate) throttle: Arc<Throttle>,
}

/// The other registry servers and the forwarding queues to them.
#[derive(Debug)]
pub(crate) struct Peers {
    urls: Vec<String>,
    queues: Vec<Arc<Outbox>>,
    pub(crate) forwarded: AtomicU64,
    pub(crate) applied: AtomicU64,
    pub(crate) failed: Arc<AtomicU64>,
}

impl Peers {
    /// Peers at these base URLs (`http://host:port/eureka/`), each with its forwarding task.
    pub(crate) fn start(
        urls: Vec<String>,
        http: reqwest::Client,
        store: std::sync::Weak<Shared>,
        settings: Settings,
    ) -> Self {
        let urls: Vec<String> = urls.iter().map(|u| base_url(u)).collect();
        let failed = Arc::new(AtomicU64::new(0));
        let queues = urls
            .iter()
            .map(|url| {
                let outbox = Arc::new(Outbox::bounded(settings.max_queue));
                tokio::spawn(forward_loop(
                    url.clone(),
                    outbox.clone(),
                    http.clone(),
                    store.clone(),
                    failed.clone(),
                    settings.clone(),
                ));
                outbox
            })
            .collect();
        Self {
            urls,
            queues,
            forwarded: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            failed,
        }
    }

    /// No peers.
    pub(crate) fn none() -> Self {
        Self {
            urls: Vec::new(),
            queues: Vec::new(),
            forwarded: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            failed: Arc::new(AtomicU64::new(0)),
        }
    }

    pub(crate) fn urls(&self) -> &[String] {
        &self.urls
    }

    /// Queues a client's write for every peer (giving up the oldest of a full queue).
    pub(crate) fn forward(&self, item: Item) {
        for outbox in &self.queues {
            let given_up = outbox.push(item.clone());
            self.failed.fetch_add(given_up as u64, Ordering::SeqCst);
            self.forwarded.fetch_add(1, Ordering::SeqCst);
        }
    }

    pub(crate) fn stats(&self) -> ReplicationStats {
        ReplicationStats {
            forwarded: self.forwarded.load(Ordering::SeqCst),
            applied: self.applied.load(Ordering::SeqCst),
            failed: self.failed.load(Ordering::SeqCst),
        }
    }
}

impl Drop for Peers {
    /// The forwarding tasks end with the server.
    fn drop(&mut self) {
        for outbox in &self.queues {
            outbox.close();
        }
    }
}

const BATCH_SIZE: usize = 250;

async fn forward_loop(
    url: String,
    out: Arc<Outbox>,
    http: reqwest::Client,
    shared: std::sync::Weak<Shared>,
    failed: Arc<AtomicU64>,
    settings: Settings,
) {
    let endpoint = format!("{url}peerreplication/batch/");
    let mut pause = Duration::ZERO;
    loop {
        let notified = out.wake.notified();
        if out.is_closed() {
            return;
        }
        if out.is_empty() {
            notified.await;
            continue;
        }
        tokio::time::sleep(pause).await;
        let queued = out.take(BATCH_SIZE);
        let batch: Vec<Item> = queued.iter().map(|q| q.item.clone()).collect();
        let Some(answer) = post_batch(&http, &url, &endpoint, &batch, &settings).await else {
            // Back in the outbox, behind nothing newer: the peer gets the latest state of each
            // instance when it answers again, however long it was away (up to GIVE_UP_AFTER).
            let given_up = out.put_back(queued);
            failed.fetch_add(given_up as u64, Ordering::SeqCst);
            pause = pause
                .saturating_mul(2)
                .clamp(Duration::from_millis(200), Duration::from_secs(5));
            throttled_warn!(
                settings.throttle,
                "peer-batch",
                url,
                "peer {url} did not take a batch of {} writes; retrying in {pause:?}",
                batch.len()
            );
            continue;
        };
        pause = Duration::ZERO;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        for (item, response) in batch.iter().zip(answer.response_list) {
            match (item.action, response.status_code) {
                // The peer does not know it: send it the registration.
                (Action::Heartbeat, 404) => {
                    if let Some(i) = shared.store.instance(&item.app_name, &item.id) {
                        out.push(Item::register(&i));
                    }
                }
                // The peer's copy is newer: adopt it, as a replication (not forwarded).
                (Action::Heartbeat, 409) => {
                    if let Some(entity) = response.response_entity {
                        let now = shared.store.clock().now_ms();
                        if let Ok(i) = json::instance_from_value(&entity, now) {
                            let app = i.app.clone();
                            let _ = shared.store.register(&app, i);
                        }
                    }
                }
                _ => {}
            }
        }
    }
}
