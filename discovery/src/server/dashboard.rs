//! The dashboard, `/discovery` (a page) and `/discovery/registry.json` (its document): behind a
//! token by default, since it lists every host and port in the registry.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use quick_xml::escape::escape;

use super::{Dashboard, Shared};

pub(super) fn routes(dashboard: &Dashboard) -> Router<Arc<Shared>> {
    match dashboard {
        Dashboard::Off => Router::new(),
        // `/` is where a Spring server shows its dashboard: people and scripts look there.
        // A redirect, not the page, so the page's one address keeps its token check.
        _ => Router::new()
            .route("/", get(|| async { Redirect::to("/discovery") }))
            .route("/discovery", get(page))
            .route("/discovery/registry.json", get(document)),
    }
}

fn refused(message: &'static str) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [
            (header::WWW_AUTHENTICATE, "Bearer realm=\"discovery\""),
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
        ],
        message,
    )
        .into_response()
}

/// Checks the bearer token; `Err` is why the request is refused (a 401).
fn authorize(shared: &Shared, headers: &HeaderMap) -> Result<(), &'static str> {
    let expected = match &shared.dashboard {
        Dashboard::Open | Dashboard::Off => return Ok(()),
        Dashboard::Token(None) => {
            return Err(
                "the dashboard needs a token and none is configured: start the server with \
                 --dashboard-token (or DISCOVERY_DASHBOARD_TOKEN), or --no-dashboard\n",
            );
        }
        Dashboard::Token(Some(t)) => t,
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    match given {
        Some(t) if constant_time_eq(t.as_bytes(), expected.as_bytes()) => Ok(()),
        Some(_) => Err("the dashboard token is wrong\n"),
        None => Err("the dashboard needs a token: send `Authorization: Bearer <token>`\n"),
    }
}

/// The credentials of a `Bearer` authorization: the scheme is case-insensitive (RFC 7235
/// §2.1), so `bearer` and `BEARER` are as good as `Bearer`.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once([' ', '\t'])?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn registry_json(shared: &Shared) -> serde_json::Value {
    let health = shared.store.health();
    let apps = shared.store.applications();
    serde_json::json!({
        "selfPreservation": health.self_preservation,
        "instances": health.instances,
        "quiet": health.quiet,
        "renewals": health.renewals,
        "peers": shared.peers.urls(),
        "applications": apps.applications.iter().map(|a| serde_json::json!({
            "name": a.name,
            "instances": a.instances.iter().map(|i| serde_json::json!({
                "id": i.id(),
                "hostName": i.host_name,
                "ipAddr": i.ip_addr,
                "port": i.port.port,
                "status": i.status.as_str(),
                "lastRenewalTimestamp": i.lease.last_renewal_timestamp,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

async fn document(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Err(why) = authorize(&shared, &headers) {
        return refused(why);
    }
    axum::Json(registry_json(&shared)).into_response()
}

async fn page(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Err(why) = authorize(&shared, &headers) {
        return refused(why);
    }
    let health = shared.store.health();
    let apps = shared.store.applications();
    let mut html = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>discovery</title></head><body><h1>Registry</h1>",
    );
    if health.self_preservation {
        html.push_str(&format!(
            "<p><strong>Self-preservation is on:</strong> {} of {} instances stopped renewing at \
             once, and are still served.</p>",
            health.quiet, health.instances
        ));
    }
    html.push_str(
        "<table><tr><th>application</th><th>instance</th><th>address</th><th>status</th></tr>",
    );
    for a in &apps.applications {
        for i in &a.instances {
            html.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}:{}</td><td>{}</td></tr>",
                escape(a.name.as_str()),
                escape(i.id()),
                escape(i.ip_addr.as_str()),
                i.port.port,
                i.status
            ));
        }
    }
    html.push_str("</table></body></html>");
    Html(html).into_response()
}
