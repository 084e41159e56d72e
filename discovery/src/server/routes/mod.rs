//! Eureka's REST routes, under `/eureka/` and `/eureka/v2/`, with or without a trailing slash:
//! the writes here, the reads in [`reads`].

mod reads;

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Extension, Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::Deserialize;

use super::access::{self, Replication};
use super::limits::numbers::check_dirty;
use super::limits::warn::{Source, throttled_warn};
use super::peers::{Action, Item};
use super::store::{RegisterError, Renewed};
use super::{Shared, dashboard, peers};
use crate::model::{self, Format, Status};
use reads::{all_apps, delta, instance_by_id, one_app, one_instance, overrides, status, svip, vip};

/// Eureka's replication marker header.
pub const REPLICATION_HEADER: &str = "x-netflix-discovery-replication";

/// Every route of a server, before path normalisation.
pub(super) fn router(shared: Arc<Shared>) -> Router {
    let max = shared.config.limits.max_body_bytes;
    let api = Router::new()
        .route("/eureka/apps", get(all_apps))
        .route("/eureka/apps/delta", get(delta))
        .route("/eureka/apps/{app}", post(register).get(one_app))
        .route(
            "/eureka/apps/{app}/{id}",
            put(heartbeat).delete(cancel).get(one_instance),
        )
        .route(
            "/eureka/apps/{app}/{id}/status",
            put(set_status).delete(remove_status),
        )
        .route("/eureka/apps/{app}/{id}/metadata", put(metadata))
        .route("/eureka/instances/{id}", get(instance_by_id))
        .route("/eureka/vips/{vip}", get(vip))
        .route("/eureka/svips/{vip}", get(svip))
        .route("/eureka/status", get(status))
        .route("/eureka/serverinfo/statusoverrides", get(overrides))
        .route("/serverinfo/statusoverrides", get(overrides))
        .layer(DefaultBodyLimit::max(max))
        .route(
            "/eureka/peerreplication/batch",
            post(peers::batch).layer(DefaultBodyLimit::max(max.saturating_mul(8))),
        )
        .layer(middleware::from_fn_with_state(shared.clone(), warm_up_gate))
        // Outermost: a caller without the credentials a route needs gets no further.
        .layer(middleware::from_fn_with_state(
            shared.clone(),
            access::guard,
        ));
    api.merge(dashboard::routes(&shared.dashboard))
        .with_state(shared)
}

/// Every registry read (a GET, but the server's own status) is answered with 503 while the
/// server warms up; writes go through and rebuild the registry, but only time ends the
/// warm-up: a read between the first registration and the last would show a registry missing
/// every instance that had not heartbeaten yet.
async fn warm_up_gate(State(shared): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    if (req.method() == Method::GET || req.method() == Method::HEAD)
        && req.uri().path() != "/eureka/status"
        && let Some(refusal) = reads::warming_up(&shared)
    {
        return refusal;
    }
    next.run(req).await
}

/// Maps `/eureka/v2/x` to `/eureka/x` and drops a trailing slash, before routing.
pub(super) fn normalize(mut req: Request) -> Request {
    let uri = req.uri();
    let path = uri.path();
    let mut new_path = path
        .strip_prefix("/eureka/v2")
        .map_or_else(|| path.to_owned(), |rest| format!("/eureka{rest}"));
    while new_path.len() > 1 && new_path.ends_with('/') {
        new_path.pop();
    }
    if new_path != path {
        let pq = match uri.query() {
            Some(q) => format!("{new_path}?{q}"),
            None => new_path,
        };
        if let Ok(pq) = pq.parse::<axum::http::uri::PathAndQuery>() {
            let mut parts = uri.clone().into_parts();
            parts.path_and_query = Some(pq);
            if let Ok(u) = axum::http::Uri::from_parts(parts) {
                *req.uri_mut() = u;
            }
        }
    }
    req
}

pub(super) fn empty(status: StatusCode) -> Response {
    (status, Body::empty()).into_response()
}

fn bad_request(message: impl Into<String>) -> Response {
    text(StatusCode::BAD_REQUEST, message.into())
}

fn text(status: StatusCode, message: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message,
    )
        .into_response()
}

/// The status of a refused write: 429 when the registry is full, 413 for an instance over the
/// size limits, 400 for the rest.
pub(in crate::server) fn refusal_status(e: &RegisterError) -> StatusCode {
    match e {
        RegisterError::Full { .. } => StatusCode::TOO_MANY_REQUESTS,
        RegisterError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        _ => StatusCode::BAD_REQUEST,
    }
}

/// A refused write: its status, the reason as the body, and a warning (at most one per source
/// and interval: a client in a loop must not become a loop of log lines).
fn refused(
    shared: &Shared,
    source: Source,
    what: &str,
    e: &dyn std::fmt::Display,
    status: StatusCode,
) -> Response {
    throttled_warn!(
        shared.throttle,
        "refused",
        source,
        "{what} refused ({status}): {e}"
    );
    text(status, e.to_string())
}

/// Whether a write is a replication (and counts it): marked by Eureka's header or the query
/// flag, and, on a server with credentials, from a peer (`access::guard` decided, and refused
/// a marked write from anyone else).
fn replicated(shared: &Shared, replication: Replication) -> bool {
    if replication.0 {
        shared
            .peers
            .applied
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    replication.0
}

/// The query parameters of Eureka's writes.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Marks {
    #[serde(rename = "lastDirtyTimestamp")]
    last_dirty_timestamp: Option<String>,
    value: Option<String>,
}

impl Marks {
    /// The `lastDirtyTimestamp`, if it is a number (ignored otherwise, as before); refused when
    /// it is further ahead of this server's clock than the limit.
    fn last_dirty(&self, shared: &Shared) -> Result<Option<u64>, RegisterError> {
        let Some(t) = self
            .last_dirty_timestamp
            .as_deref()
            .and_then(|t| t.trim().parse().ok())
        else {
            return Ok(None);
        };
        let now = shared.store.clock().now_ms();
        check_dirty(t, now, shared.config.limits.max_clock_skew).map(Some)
    }
}

async fn register(
    State(shared): State<Arc<Shared>>,
    Path(app): Path<String>,
    Extension(replication): Extension<Replication>,
    source: Option<Extension<Source>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let source = source.map(|s| s.0).unwrap_or_default();
    let what = format!("registration in {app}");
    if body.iter().all(u8::is_ascii_whitespace) {
        let e = "Missing instance: the body is empty";
        return refused(&shared, source, &what, &e, StatusCode::BAD_REQUEST);
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let now = shared.store.clock().now_ms();
    let instance = match model::read_instance(content_type, &body, now) {
        Ok(i) => i,
        Err(e) => return refused(&shared, source, &what, &e, StatusCode::BAD_REQUEST),
    };
    match shared.store.register(&app, instance) {
        Ok(stored) => {
            tracing::debug!("registered {} of {}", stored.id(), stored.app);
            if !replicated(&shared, replication) {
                shared.peers.forward(Item::register(&stored));
            }
            // 204, "to be backwards compatible": the js and Java clients require exactly it.
            empty(StatusCode::NO_CONTENT)
        }
        Err(e) => refused(&shared, source, &what, &e, refusal_status(&e)),
    }
}

async fn heartbeat(
    State(shared): State<Arc<Shared>>,
    Path((app, id)): Path<(String, String)>,
    Query(marks): Query<Marks>,
    Extension(replication): Extension<Replication>,
    source: Option<Extension<Source>>,
) -> Response {
    let last_dirty = match marks.last_dirty(&shared) {
        Ok(d) => d,
        Err(e) => {
            let source = source.map(|s| s.0).unwrap_or_default();
            let what = format!("heartbeat of {id} of {app}");
            return refused(&shared, source, &what, &e, StatusCode::BAD_REQUEST);
        }
    };
    let replication = replicated(&shared, replication);
    let outcome = shared.store.renew(&app, &id, last_dirty, replication);
    if !replication && outcome != Renewed::NotFound {
        shared.peers.forward(Item::heartbeat(&app, &id, last_dirty));
    }
    match outcome {
        Renewed::Ok => empty(StatusCode::OK),
        // Empty: a JSON body on this 404 breaks the Java clients' re-registration.
        Renewed::NotFound => empty(StatusCode::NOT_FOUND),
        Renewed::Conflict(mine) => (
            StatusCode::CONFLICT,
            [(header::CONTENT_TYPE, Format::Json.content_type())],
            Format::Json.instance(&mine),
        )
            .into_response(),
    }
}

async fn cancel(
    State(shared): State<Arc<Shared>>,
    Path((app, id)): Path<(String, String)>,
    Extension(replication): Extension<Replication>,
) -> Response {
    if !shared.store.cancel(&app, &id) {
        return empty(StatusCode::NOT_FOUND);
    }
    if !replicated(&shared, replication) {
        shared.peers.forward(Item::new(Action::Cancel, &app, &id));
    }
    empty(StatusCode::OK)
}

async fn set_status(
    State(shared): State<Arc<Shared>>,
    Path((app, id)): Path<(String, String)>,
    Query(marks): Query<Marks>,
    Extension(replication): Extension<Replication>,
) -> Response {
    let Some(value) = marks.value.as_deref() else {
        return bad_request("Missing value: PUT …/status?value=OUT_OF_SERVICE");
    };
    let status: Status = match value.parse() {
        Ok(s) => s,
        Err(e) => return bad_request(format!("{e}")),
    };
    let last_dirty = match marks.last_dirty(&shared) {
        Ok(d) => d,
        Err(e) => return bad_request(e.to_string()),
    };
    if !shared
        .store
        .override_status(&app, &id, Some(status), status, last_dirty)
    {
        return empty(StatusCode::NOT_FOUND);
    }
    if !replicated(&shared, replication) {
        let mut item = Item::new(Action::StatusUpdate, &app, &id);
        item.status = Some(status.as_str().to_owned());
        item.last_dirty_timestamp = last_dirty;
        shared.peers.forward(item);
    }
    empty(StatusCode::OK)
}

async fn remove_status(
    State(shared): State<Arc<Shared>>,
    Path((app, id)): Path<(String, String)>,
    Query(marks): Query<Marks>,
    Extension(replication): Extension<Replication>,
) -> Response {
    let fallback = match marks.value.as_deref().map(str::parse::<Status>) {
        None => Status::Unknown,
        Some(Ok(s)) => s,
        Some(Err(e)) => return bad_request(format!("{e}")),
    };
    let last_dirty = match marks.last_dirty(&shared) {
        Ok(d) => d,
        Err(e) => return bad_request(e.to_string()),
    };
    if !shared
        .store
        .override_status(&app, &id, None, fallback, last_dirty)
    {
        return empty(StatusCode::NOT_FOUND);
    }
    if !replicated(&shared, replication) {
        let mut item = Item::new(Action::DeleteStatusOverride, &app, &id);
        item.status = Some(fallback.as_str().to_owned());
        item.last_dirty_timestamp = last_dirty;
        shared.peers.forward(item);
    }
    empty(StatusCode::OK)
}

async fn metadata(
    State(shared): State<Arc<Shared>>,
    Path((app, id)): Path<(String, String)>,
    Query(pairs): Query<Vec<(String, String)>>,
    Extension(replication): Extension<Replication>,
    source: Option<Extension<Source>>,
) -> Response {
    let mut seen = std::collections::HashSet::new();
    let mut first = Vec::new();
    for (k, v) in pairs {
        if k == "isReplication" {
            continue; // the mark, not metadata
        } else if seen.insert(k.clone()) {
            first.push((k, v));
        }
    }
    let updated = match shared.store.update_metadata(&app, &id, first) {
        Ok(Some(updated)) => updated,
        Ok(None) => return empty(StatusCode::NOT_FOUND),
        Err(e) => {
            let source = source.map(|s| s.0).unwrap_or_default();
            let what = format!("metadata update of {id} of {app}");
            return refused(&shared, source, &what, &e, refusal_status(&e));
        }
    };
    if !replicated(&shared, replication) {
        // Eureka replicates a metadata change as a registration.
        shared.peers.forward(Item::register(&updated));
    }
    empty(StatusCode::OK)
}
