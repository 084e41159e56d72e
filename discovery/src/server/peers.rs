//! Replication between registry servers: peer forwarding, not consensus.
//!
//! A write a client made is applied, then forwarded once to every peer, in batches on Eureka's
//! endpoint (`POST peerreplication/batch/`). A write that arrives as a replication (on the batch
//! endpoint, or with Eureka's `x-netflix-discovery-replication: true` header) is applied and
//! never forwarded on: one hop, never two. Expiries are not replicated: each server decides
//! them from its own heartbeats, which every peer receives.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::store::Renewed;
use super::{Shared, routes::REPLICATION_HEADER};
use crate::model::{self, Instance, Status, json};

/// A replicated operation, as Eureka names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// A (re-)registration, with the instance.
    Register,
    /// A renewal.
    Heartbeat,
    /// A cancellation.
    Cancel,
    /// A status override.
    StatusUpdate,
    /// The removal of an override.
    DeleteStatusOverride,
}

/// One entry of a replication batch (`ReplicationInstance`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Item {
    /// The application.
    pub app_name: String,
    /// The instance id.
    pub id: String,
    /// The sender's `lastDirtyTimestamp`.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "loose_u64")]
    pub last_dirty_timestamp: Option<u64>,
    /// The status (for status updates and heartbeats).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The override, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overridden_status: Option<String>,
    /// The instance (for registrations), unwrapped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_info: Option<serde_json::Value>,
    /// What to do.
    pub action: Action,
}

mod loose_u64 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_u64(*v),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        Ok(match Option::<serde_json::Value>::deserialize(d)? {
            Some(serde_json::Value::Number(n)) => n.as_u64(),
            Some(serde_json::Value::String(s)) => s.trim().parse().ok(),
            _ => None,
        })
    }
}

impl Item {
    /// An item with no payload.
    pub fn new(action: Action, app: &str, id: &str) -> Self {
        Self {
            app_name: app.to_ascii_uppercase(),
            id: id.to_owned(),
            last_dirty_timestamp: None,
            status: None,
            overridden_status: None,
            instance_info: None,
            action,
        }
    }

    /// A registration of this instance.
    pub fn register(i: &Instance) -> Self {
        let mut item = Self::new(Action::Register, &i.app, i.id());
        item.last_dirty_timestamp = Some(i.last_dirty_timestamp);
        item.status = Some(i.status.as_str().to_owned());
        item.instance_info = serde_json::to_value(json::instance_value(i)).ok();
        item
    }

    /// A heartbeat.
    pub fn heartbeat(app: &str, id: &str, last_dirty: Option<u64>) -> Self {
        let mut item = Self::new(Action::Heartbeat, app, id);
        item.last_dirty_timestamp = last_dirty;
        item
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Batch {
    replication_list: Vec<Item>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ItemResponse {
    status_code: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    response_entity: Option<serde_json::Value>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BatchResponse {
    response_list: Vec<ItemResponse>,
}

/// Counts of replication traffic, for operators and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ReplicationStats {
    /// Writes this server decided to forward, counted once per peer.
    pub forwarded: u64,
    /// Replicated writes this server applied (batch items and marked single requests).
    pub applied: u64,
    /// Items a peer did not accept after retries.
    pub failed: u64,
}

/// The other registry servers and the forwarding queues to them.
#[derive(Debug)]
pub(crate) struct Peers {
    urls: Vec<String>,
    queues: Vec<mpsc::UnboundedSender<Item>>,
    pub(crate) forwarded: AtomicU64,
    pub(crate) applied: AtomicU64,
    pub(crate) failed: Arc<AtomicU64>,
}

/// `http://host:port/eureka/` with exactly one trailing slash.
pub(crate) fn base_url(url: &str) -> String {
    format!("{}/", url.trim_end_matches('/'))
}

impl Peers {
    /// Peers at these base URLs (`http://host:port/eureka/`), each with its forwarding task.
    pub(crate) fn start(
        urls: Vec<String>,
        http: reqwest::Client,
        store: std::sync::Weak<Shared>,
        timeout: Duration,
    ) -> Self {
        let urls: Vec<String> = urls.iter().map(|u| base_url(u)).collect();
        let failed = Arc::new(AtomicU64::new(0));
        let queues = urls
            .iter()
            .map(|url| {
                let (tx, rx) = mpsc::unbounded_channel();
                tokio::spawn(forward_loop(
                    url.clone(),
                    rx,
                    tx.downgrade(),
                    http.clone(),
                    store.clone(),
                    timeout,
                    failed.clone(),
                ));
                tx
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

    /// Queues a client's write for every peer.
    pub(crate) fn forward(&self, item: Item) {
        for q in &self.queues {
            if q.send(item.clone()).is_ok() {
                self.forwarded.fetch_add(1, Ordering::SeqCst);
            }
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

const BATCH_SIZE: usize = 250;

async fn forward_loop(
    url: String,
    mut rx: mpsc::UnboundedReceiver<Item>,
    requeue: mpsc::WeakUnboundedSender<Item>,
    http: reqwest::Client,
    shared: std::sync::Weak<Shared>,
    timeout: Duration,
    failed: Arc<AtomicU64>,
) {
    let endpoint = format!("{url}peerreplication/batch/");
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < BATCH_SIZE {
            match rx.try_recv() {
                Ok(item) => batch.push(item),
                Err(_) => break,
            }
        }
        let body = serde_json::json!({ "replicationList": batch });
        let mut answer = None;
        for attempt in 0..3u32 {
            let sent = http
                .post(&endpoint)
                .timeout(timeout)
                .header(header::ACCEPT.as_str(), "application/json")
                .json(&body)
                .send()
                .await;
            match sent {
                Ok(r) if r.status().is_success() => {
                    answer = r.json::<BatchResponse>().await.ok();
                    break;
                }
                Ok(r) if r.status() != StatusCode::SERVICE_UNAVAILABLE => {
                    tracing::warn!(
                        "peer {url} refused a batch of {}: {}",
                        batch.len(),
                        r.status()
                    );
                    break;
                }
                Ok(_) | Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                }
            }
        }
        let Some(answer) = answer else {
            tracing::warn!("peer {url} did not take a batch of {} writes", batch.len());
            failed.fetch_add(batch.len() as u64, Ordering::SeqCst);
            continue;
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        for (item, response) in batch.iter().zip(answer.response_list) {
            match (item.action, response.status_code) {
                // The peer does not know it: send it the registration.
                (Action::Heartbeat, 404) => {
                    if let Some(i) = shared.store.instance(&item.app_name, &item.id)
                        && let Some(q) = requeue.upgrade()
                    {
                        let _ = q.send(Item::register(&i));
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

/// `POST peerreplication/batch/`: applies each item as a replication, never forwarding it.
pub(super) async fn batch(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let batch: Batch = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                format!("malformed replication batch: {e}"),
            )
                .into_response();
        }
    };
    let responses: Vec<ItemResponse> = batch
        .replication_list
        .into_iter()
        .map(|item| {
            shared.peers.applied.fetch_add(1, Ordering::SeqCst);
            apply(&shared, item)
        })
        .collect();
    axum::Json(BatchResponse {
        response_list: responses,
    })
    .into_response()
}

fn code(status_code: u16) -> ItemResponse {
    ItemResponse {
        status_code,
        response_entity: None,
    }
}

fn apply(shared: &Shared, item: Item) -> ItemResponse {
    let store = &shared.store;
    let parse_status = |s: &Option<String>| s.as_deref().map(Status::lenient);
    match item.action {
        Action::Register => {
            let Some(info) = item.instance_info else {
                return code(400);
            };
            match json::instance_from_value(&info, store.clock().now_ms()) {
                // The batch reports 200 for a registration (the route answers 204).
                Ok(i) => match store.register(&item.app_name, i) {
                    Ok(_) => code(200),
                    Err(_) => code(400),
                },
                Err(_) => code(400),
            }
        }
        Action::Heartbeat => {
            match store.renew(&item.app_name, &item.id, item.last_dirty_timestamp, true) {
                Renewed::Ok => code(200),
                Renewed::NotFound => code(404),
                Renewed::Conflict(mine) => ItemResponse {
                    status_code: 409,
                    response_entity: serde_json::to_value(json::instance_value(&mine)).ok(),
                },
            }
        }
        Action::Cancel => code(if store.cancel(&item.app_name, &item.id) {
            200
        } else {
            404
        }),
        Action::StatusUpdate => {
            let Some(s) = parse_status(&item.status) else {
                return code(400);
            };
            let ok = store.override_status(
                &item.app_name,
                &item.id,
                Some(s),
                s,
                item.last_dirty_timestamp,
            );
            code(if ok { 200 } else { 404 })
        }
        Action::DeleteStatusOverride => {
            let fallback = parse_status(&item.status).unwrap_or(Status::Unknown);
            let ok = store.override_status(
                &item.app_name,
                &item.id,
                None,
                fallback,
                item.last_dirty_timestamp,
            );
            code(if ok { 200 } else { 404 })
        }
    }
}

/// Pulls the registry from the first peer that answers and registers every instance as a
/// replication; the number of instances taken, 0 if no peer answered.
pub(crate) async fn sync_from_peers(
    shared: &Shared,
    http: &reqwest::Client,
    timeout: Duration,
) -> usize {
    for url in shared.peers.urls() {
        let got = http
            .get(format!("{url}apps/"))
            .timeout(timeout)
            .header(header::ACCEPT.as_str(), "application/json")
            .send()
            .await;
        let body = match got {
            Ok(r) if r.status().is_success() => match r.bytes().await {
                Ok(b) => b,
                Err(_) => continue,
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

/// The header that marks a single replicated request.
pub const MARKER: (&str, &str) = (REPLICATION_HEADER, "true");
