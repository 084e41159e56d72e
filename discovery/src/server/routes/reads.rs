//! The reads: the registry, its delta, an application, an instance, a VIP, the server's status
//! and the override map. While the server warms up they are answered with 503 before they get
//! here (`warm_up_gate` in the routes).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::empty;
use crate::model::Format;
use crate::server::Shared;
use crate::server::cache::accepts_gzip;
use crate::server::store::Document;

fn format_of(headers: &HeaderMap) -> Format {
    Format::from_accept(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()))
}

/// The 503 of a read during the warm-up (see [`crate::server::RegistryServer::start`]):
/// clients keep what they have, or ask another server, instead of taking an empty registry
/// for the truth.
pub(super) fn warming_up(shared: &Shared) -> Option<Response> {
    let left = shared.store.warming_up()?;
    let secs = left.as_secs().max(1).to_string();
    Some(
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [
                (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_owned()),
                (header::RETRY_AFTER, secs.clone()),
            ],
            format!(
                "warming up: this server started with an empty registry and gives its instances \
                 {secs} s more to register again; keep your copy or ask another server\n"
            ),
        )
            .into_response(),
    )
}

fn document(shared: &Shared, format: Format, body: impl Into<Body>) -> Response {
    let mut r = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, format.content_type())],
        body.into(),
    )
        .into_response();
    if shared.store.preserving() {
        r.headers_mut().insert(
            "x-discovery-self-preservation",
            HeaderValue::from_static("true"),
        );
    }
    r
}

/// `GET apps` or `GET apps/delta` from the response cache, gzipped when the client accepts it.
async fn cached(shared: &Shared, doc: Document, headers: &HeaderMap) -> Response {
    let format = format_of(headers);
    let payload = shared.cache.get(&shared.store, doc, format).await;
    if !accepts_gzip(headers) {
        let (body, len) = payload.plain();
        let mut r = document(shared, format, body);
        let h = r.headers_mut();
        h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
        // Said, since a large payload's text is sent as it is inflated: hyper then sends it
        // with this length rather than in chunks.
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        return r;
    }
    let mut r = document(shared, format, payload.gzip());
    let h = r.headers_mut();
    h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    r
}

pub(super) async fn all_apps(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    cached(&shared, Document::Apps, &headers).await
}

pub(super) async fn delta(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    cached(&shared, Document::Delta, &headers).await
}

pub(super) async fn one_app(
    State(shared): State<Arc<Shared>>,
    Path(app): Path<String>,
    headers: HeaderMap,
) -> Response {
    let format = format_of(&headers);
    match shared.store.application(&app) {
        Some(a) => document(&shared, format, format.application(&a)),
        None => empty(StatusCode::NOT_FOUND),
    }
}

pub(super) async fn one_instance(
    State(shared): State<Arc<Shared>>,
    Path((app, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let format = format_of(&headers);
    match shared.store.instance(&app, &id) {
        Some(i) => document(&shared, format, format.instance(&i)),
        None => empty(StatusCode::NOT_FOUND),
    }
}

pub(super) async fn instance_by_id(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let format = format_of(&headers);
    match shared.store.instance_by_id(&id) {
        Some(i) => document(&shared, format, format.instance(&i)),
        None => empty(StatusCode::NOT_FOUND),
    }
}

pub(super) async fn vip(
    State(shared): State<Arc<Shared>>,
    Path(vip): Path<String>,
    headers: HeaderMap,
) -> Response {
    let format = format_of(&headers);
    let apps = shared.store.vip(&vip, false);
    document(&shared, format, format.applications(&apps))
}

pub(super) async fn svip(
    State(shared): State<Arc<Shared>>,
    Path(vip): Path<String>,
    headers: HeaderMap,
) -> Response {
    let format = format_of(&headers);
    let apps = shared.store.vip(&vip, true);
    document(&shared, format, format.applications(&apps))
}

pub(super) async fn status(State(shared): State<Arc<Shared>>) -> Response {
    let h = shared.store.health();
    let r = shared.peers.stats();
    axum::Json(serde_json::json!({
        "forwarded": r.forwarded,
        "replicatedApplied": r.applied,
        "instances": h.instances,
        "quiet": h.quiet,
        "recentlyExpired": h.recently_expired,
        "selfPreservation": h.self_preservation,
        "warmingUp": shared.store.warming_up().is_some(),
        "renewals": h.renewals,
        "peers": shared.peers.urls(),
    }))
    .into_response()
}

pub(super) async fn overrides(State(shared): State<Arc<Shared>>) -> Response {
    let map: serde_json::Map<String, serde_json::Value> = shared
        .store
        .overrides()
        .into_iter()
        .map(|(k, v)| (k, serde_json::Value::String(v.as_str().to_owned())))
        .collect();
    axum::Json(serde_json::Value::Object(map)).into_response()
}
