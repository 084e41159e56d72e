//! The receiving side: the batch endpoint, each item applied as a replication.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::wire::{Action, Batch, BatchResponse, Item, ItemResponse};
use crate::model::{Status, json};
use crate::server::Shared;
use crate::server::limits::numbers::check_dirty;
use crate::server::limits::warn::{Source, throttled_warn};
use crate::server::routes::refusal_status;
use crate::server::store::Renewed;

fn refused(shared: &Shared, source: Source, status: StatusCode, why: String) -> Response {
    throttled_warn!(
        shared.throttle,
        "batch",
        source,
        "replication batch refused ({status}): {why}"
    );
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        why,
    )
        .into_response()
}

/// `POST peerreplication/batch/`: applies each item as a replication, never forwarding it.
pub(in crate::server) async fn batch(
    State(shared): State<Arc<Shared>>,
    source: Option<Extension<Source>>,
    body: Bytes,
) -> Response {
    let source = source.map(|s| s.0).unwrap_or_default();
    let batch: Batch = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            let why = format!("malformed replication batch: {e}");
            return refused(&shared, source, StatusCode::BAD_REQUEST, why);
        }
    };
    // Each answer may carry a whole instance (a 409): the count bounds the answer's size.
    let max = shared.config.limits.max_batch_items;
    let n = batch.replication_list.len();
    if n > max {
        let why = format!("a replication batch of {n} items, at most {max} (--max-batch-items)");
        return refused(&shared, source, StatusCode::PAYLOAD_TOO_LARGE, why);
    }
    let responses: Vec<ItemResponse> = batch
        .replication_list
        .into_iter()
        .map(|item| {
            shared.peers.applied.fetch_add(1, Ordering::SeqCst);
            apply(&shared, item)
        })
        .collect();
    let bad = responses
        .iter()
        .filter(|r| matches!(r.status_code, 400 | 413 | 429))
        .count();
    if bad > 0 {
        throttled_warn!(
            shared.throttle,
            "batch-items",
            source,
            "replication batch: {bad} of {n} items refused (malformed, over a limit, or dated ahead)"
        );
    }
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
    if let Some(d) = item.last_dirty_timestamp {
        let now = store.clock().now_ms();
        if check_dirty(d, now, shared.config.limits.max_clock_skew).is_err() {
            return code(400);
        }
    }
    match item.action {
        Action::Register => {
            let Some(info) = item.instance_info else {
                return code(400);
            };
            match json::instance_from_value(&info, store.clock().now_ms()) {
                // The batch reports 200 for a registration (the route answers 204).
                Ok(i) => match store.register(&item.app_name, i) {
                    Ok(_) => code(200),
                    Err(e) => code(refusal_status(&e).as_u16()),
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
