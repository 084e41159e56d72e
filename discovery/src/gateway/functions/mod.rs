//! Function routes: `POST <prefix>/SERVICE/FUNCTION` with JSON arguments (an array, or an
//! object by parameter name) is a call of `SERVICE.FUNCTION` through the cluster's own call
//! path, made by a member of the cluster (the gateway's [`Node`], with its own certificate).
//! In order:
//!
//! 1. the path: `<prefix>/SERVICE/FUNCTION` (`POST`) or `<prefix>/_describe` (`GET`), else
//!    `404` or `405`;
//! 2. the edge caller (`edge.rs`): unknown `401`, not allowed this function `403`; nothing
//!    read or called yet;
//! 3. the budget (`budget.rs`: `x-cluster-timeout`, `grpc-timeout`, within the route's
//!    longest) and the metadata (`x-cluster-meta-KEY` headers, bounded; the caller's name under
//!    `edge-caller`, the request's id under `gateway-request`, neither settable by the client);
//!    a malformed one `400`;
//! 4. the body (`request.rs`, with the metadata): `Content-Type: application/json`, else
//!    `415`; at most the route's `max_body_bytes`, else `413`; JSON, else `400` saying where
//!    it is wrong;
//! 5. the function (`cluster::json::Functions`): the newest description within the route's
//!    version requirement; the arguments checked against its shape, `400` naming the argument;
//! 6. the call: retries, re-resolution, at-most-once and the provider's allow-list are the
//!    call path's, as from code; the provider sees the gateway's node name as the caller;
//! 7. the answer (`status.rs`): `200` with the value as JSON, `422` for the function's `Err`,
//!    a status for each way the framework failed; `x-cluster-request-id` on every answer to a
//!    `POST` from step 2 on, `x-cluster-attempts` once a call was made, `x-cluster-call-id` for
//!    an at-most-once call.

mod budget;
mod config;
mod describe;
mod edge;
mod request;
mod status;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Method, Request, Response, StatusCode, header};
use cluster::context::TraceParent;
use cluster::json::{Answer, Functions};
use cluster::{CallReport, Node, VersionReq};
use hyper::body::Incoming;

pub use config::{FunctionsConfig, KeyConfig, NodeConfig, TrustedHeaderConfig};
pub use edge::{EdgeCallers, MAX_EDGE_NAME};

use request::{is_json, metadata, read_json};
use status::{json_response, refused};

/// The default budget of a call that asks for none: 30 s (as a proxied route's timeout).
pub const DEFAULT_CALL_BUDGET: Duration = Duration::from_secs(30);

/// The default longest budget a request may ask for: 5 min.
pub const DEFAULT_MAX_CALL_BUDGET: Duration = Duration::from_secs(300);

/// The default largest JSON body: 1 MiB.
pub const DEFAULT_MAX_JSON_BYTES: usize = 1 << 20;

/// The most `x-cluster-meta-*` headers a request may carry.
pub const MAX_META_HEADERS: usize = 16;

/// The most bytes of one `x-cluster-meta-*` value.
pub const MAX_META_VALUE: usize = 1024;

/// The most bytes of all `x-cluster-meta-*` keys and values: the call's own bound
/// ([`cluster::context::MAX_METADATA_BYTES`]) less room for the gateway's two entries.
pub const MAX_META_BYTES: usize = cluster::context::MAX_METADATA_BYTES - 512;

/// How long a request's body may take to arrive by default, whatever its budget: a body that
/// stops arriving (a client holding a connection open) is `408` after this, and the connection
/// closed (`FunctionRoute::body_read_timeout`).
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Bodies parsed as JSON at once, on each route: a parsed body takes tens of times its size
/// (a `serde_json::Value` per number), so a flood of large bodies waits here rather than
/// growing the gateway's memory with every connection.
pub const PARSED_AT_ONCE: usize = 4;

/// The metadata key the edge caller's name travels under.
pub const EDGE_CALLER_KEY: &str = "edge-caller";

/// The metadata key the gateway's request id travels under.
pub const GATEWAY_REQUEST_KEY: &str = "gateway-request";

const META_PREFIX: &str = "x-cluster-meta-";
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-cluster-request-id");
const X_CALL_ID: HeaderName = HeaderName::from_static("x-cluster-call-id");
const X_ATTEMPTS: HeaderName = HeaderName::from_static("x-cluster-attempts");

/// Where a function route's calls go: the services in a cluster node's registry, called by
/// name with JSON ([`Gateway::functions`](super::Gateway::functions)).
///
/// ```no_run
/// # async fn demo(node: cluster::Node) -> std::io::Result<()> {
/// use cluster_discovery::gateway::{EdgeCallers, FunctionRoute, Gateway};
///
/// let callers = EdgeCallers::new().key("shop-web", "a-long-random-api-key", ["inventory.*"]);
/// let gateway = Gateway::new()
///     .functions("/api/*", FunctionRoute::new(&node, callers))
///     .start(([0, 0, 0, 0], 8080).into())
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FunctionRoute {
    functions: Arc<Functions>,
    edge: EdgeCallers,
    requirement: Option<VersionReq>,
    default_budget: Duration,
    max_budget: Duration,
    max_body_bytes: usize,
    body_read_timeout: Duration,
    parsing: Arc<tokio::sync::Semaphore>,
}

impl FunctionRoute {
    /// Calls through `node`, from the callers `edge` admits. A route whose `edge` admits
    /// nobody is refused at start: say [`EdgeCallers::open_to_anyone`] to open it.
    pub fn new(node: &Node, edge: EdgeCallers) -> Self {
        Self {
            functions: Arc::new(Functions::new(node)),
            edge,
            requirement: None,
            default_budget: DEFAULT_CALL_BUDGET,
            max_budget: DEFAULT_MAX_CALL_BUDGET,
            max_body_bytes: DEFAULT_MAX_JSON_BYTES,
            body_read_timeout: BODY_READ_TIMEOUT,
            parsing: Arc::new(tokio::sync::Semaphore::new(PARSED_AT_ONCE)),
        }
    }

    /// Only providers within `requirement` (by default: the newest version's, when every
    /// provider can serve its clients; else calls are `409`).
    pub fn require(mut self, requirement: VersionReq) -> Self {
        self.requirement = Some(requirement);
        self
    }

    /// The budget of a call whose request asks for none ([`DEFAULT_CALL_BUDGET`]), and the
    /// longest a request may ask for ([`DEFAULT_MAX_CALL_BUDGET`]): a longer one is cut to it.
    pub fn budgets(mut self, default: Duration, max: Duration) -> Self {
        self.max_budget = max.max(Duration::from_millis(1));
        self.default_budget = default.clamp(Duration::from_millis(1), self.max_budget);
        self
    }

    /// The largest JSON body ([`DEFAULT_MAX_JSON_BYTES`]; never more than the gateway's
    /// `max_body_bytes`): more is `413`.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// How long a request's body may take to arrive ([`BODY_READ_TIMEOUT`]): past it, `408`.
    pub fn body_read_timeout(mut self, timeout: Duration) -> Self {
        self.body_read_timeout = timeout;
        self
    }

    /// Why the route cannot start, if it cannot.
    pub(crate) fn check(&self) -> Result<(), String> {
        if let Some(why) = self.edge.refused() {
            return Err(format!("a function route's callers: {why}"));
        }
        if !self.edge.configured() {
            return Err(
                "a function route admits no edge caller: configure API keys, client \
                 certificates or a trusted header, or say EdgeCallers::open_to_anyone()"
                    .to_owned(),
            );
        }
        Ok(())
    }

    /// One request whose path is `rest` under the route's `prefix`.
    pub(crate) async fn handle(
        &self,
        req: Request<Incoming>,
        prefix: &str,
        rest: &str,
        gateway_max_body: usize,
        certificate: Option<&str>,
    ) -> Response<Body> {
        let segments: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
        match segments.as_slice() {
            ["_describe"] => {
                if req.method() != Method::GET && req.method() != Method::HEAD {
                    return not_allowed("GET");
                }
                match self.edge.identify(req.headers(), certificate) {
                    Ok(caller) => json_response(
                        StatusCode::OK,
                        &describe::describe(self.functions.node(), prefix, &caller),
                    ),
                    Err(_) => unauthorized(),
                }
            }
            [service, function] if !service.is_empty() && !function.is_empty() => {
                if req.method() != Method::POST {
                    return not_allowed("POST");
                }
                let request_id = fastrand::u128(..);
                let mut response = self
                    .call(
                        req,
                        service,
                        function,
                        request_id,
                        gateway_max_body,
                        certificate,
                    )
                    .await;
                if let Ok(v) = HeaderValue::from_str(&format!("{request_id:032x}")) {
                    response.headers_mut().insert(X_REQUEST_ID, v);
                }
                response
            }
            _ => refused(
                StatusCode::NOT_FOUND,
                "no function",
                &format!("a function's path is {prefix}/SERVICE/FUNCTION"),
            ),
        }
    }

    async fn call(
        &self,
        req: Request<Incoming>,
        service: &str,
        function: &str,
        request_id: u128,
        gateway_max_body: usize,
        certificate: Option<&str>,
    ) -> Response<Body> {
        let target = format!("{service}.{function}");
        let caller = match self.edge.admit(req.headers(), certificate, &target) {
            Ok(caller) => caller,
            Err(edge::Refusal::Unknown) => return unauthorized(),
            Err(edge::Refusal::NotAllowed(name)) => {
                return refused(
                    StatusCode::FORBIDDEN,
                    "not allowed",
                    &format!("`{name}` may not call {target}"),
                );
            }
        };
        let budget = match budget::requested(req.headers()) {
            Ok(Some(asked)) => asked.min(self.max_budget),
            Ok(None) => self.default_budget,
            Err(why) => return refused(StatusCode::BAD_REQUEST, "bad timeout", &why),
        };
        let metadata = match metadata(req.headers()) {
            Ok(m) => m,
            Err(why) => return refused(StatusCode::BAD_REQUEST, "bad metadata", &why),
        };
        let trace = req
            .headers()
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .and_then(TraceParent::parse);
        if !is_json(req.headers()) {
            return refused(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "not json",
                "the arguments are sent as `Content-Type: application/json`",
            );
        }
        let limit = self.max_body_bytes.min(gateway_max_body);
        let input = match read_json(
            req.into_body(),
            limit,
            self.body_read_timeout,
            &self.parsing,
        )
        .await
        {
            Ok(v) => v,
            Err(r) => return r,
        };
        let found = match self
            .functions
            .find(service, function, self.requirement.as_ref())
        {
            Ok(found) => found,
            Err(e) => return status::not_found(&e),
        };
        let (parsed, _permit) = input;
        let args = match found.arguments(&parsed) {
            Ok(args) => args,
            Err(why) => {
                let f = found.function();
                return refused(
                    StatusCode::BAD_REQUEST,
                    "bad arguments",
                    &format!("{why} ({target}: {})", f.signature),
                );
            }
        };
        // The parsed body is not kept for the call's duration, nor its parse permit.
        drop((parsed, _permit));
        let mut call = found
            .call(&args)
            .budget(budget)
            .metadata(EDGE_CALLER_KEY, caller.name)
            .metadata(GATEWAY_REQUEST_KEY, format!("{request_id:032x}"));
        for (key, value) in metadata {
            call = call.metadata(key, value);
        }
        if let Some(trace) = trace {
            call = call.trace(trace);
        }
        // The budget bounds every attempt and pause; this is a backstop for a call the budget
        // does not bound (one attempt with retries off), a little after it so that the call
        // path's own timeout, with its report, comes first.
        let backstop = budget.saturating_add(Duration::from_millis(250));
        let answered = match tokio::time::timeout(backstop, call.reported()).await {
            Ok(answered) => answered,
            Err(_) => {
                return refused(
                    StatusCode::GATEWAY_TIMEOUT,
                    "timeout",
                    &format!("{target} did not answer within {budget:?}"),
                );
            }
        };
        match answered {
            Ok((answer, report)) => {
                let mut r = match found.answer(answer) {
                    Answer::Ok(value) => status::answered(&value),
                    Answer::Err(error) => status::app_error(&error, &report),
                };
                add_report(&mut r, &report);
                r
            }
            Err(e) => {
                tracing::debug!("the call {target} through the gateway failed: {e}");
                let mut r = status::call_failed(&e);
                add_report(&mut r, e.report());
                r
            }
        }
    }
}

/// What the call's report says that a client may know: its attempts, and the call id of an
/// at-most-once call (what to reconcile with after a failure that may have run).
fn add_report(r: &mut Response<Body>, report: &CallReport) {
    let attempts = report.attempts.len() + report.attempts_left_out;
    r.headers_mut()
        .insert(X_ATTEMPTS, HeaderValue::from(attempts));
    if let Some(id) = report.call_id
        && let Ok(v) = HeaderValue::from_str(&format!("{id:032x}"))
    {
        r.headers_mut().insert(X_CALL_ID, v);
    }
}

fn unauthorized() -> Response<Body> {
    refused(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "an API key is sent as `Authorization: Bearer KEY` or `X-Api-Key: KEY`",
    )
}

fn not_allowed(allow: &'static str) -> Response<Body> {
    let mut r = refused(
        StatusCode::METHOD_NOT_ALLOWED,
        "method",
        &format!("this path takes {allow}"),
    );
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}
