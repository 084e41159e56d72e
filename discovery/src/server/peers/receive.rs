//! The receiving side: the batch endpoint, each item applied as a replication.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::wire::{Action, Batch, BatchResponse, Item, ItemResponse};
use crate::model::{Status, json};
use crate::server::Shared;
use crate::server::store::Renewed;

/// `POST peerreplication/batch/`: applies each item as a replication, never forwarding it.
pub(in crate::server) async fn batch(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
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
