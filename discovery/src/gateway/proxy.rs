//! One request through the gateway. In order:
//!
//! 1. the route: the most specific pattern matching the path, else `404`;
//! 2. a body declared larger than the limit is `413` before anything is sent; one that grows
//!    past it while streaming fails its request to the instance, and is `413` too;
//! 3. the request's head is rewritten once (`headers.rs`: hop-by-hop headers out, forwarded
//!    headers in; the prefix stripped), the `Host` per attempt;
//! 4. an instance from the balancer, other than those already tried; nothing resolves: `503`
//!    with the service's name;
//! 5. the attempt, within what is left of the route's timeout (one clock for all attempts, as
//!    Envoy's route timeout): past it, `504`, never retried (the instance may be working on it);
//! 6. no connection (refused, unreachable): the instance cools down and the request goes to
//!    another, whatever its method: it never reached one. The connection broke after it was
//!    made: the instance may have seen the request, so it is retried only if its method is
//!    idempotent (RFC 9110 §9.2.2), its body can be sent again (none, or a copy of one read
//!    whole within `max_replay_bytes`: `body.rs`), the route has attempts left and
//!    the retry budget allows (Finagle's and Tower's: 20 % of requests, plus 10 a second); else
//!    `502`;
//! 7. the answer streams back, hop-by-hop headers removed; a `101` joins the two upgraded
//!    connections (`upgrade.rs`).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::body::Bytes;
use axum::http::uri::PathAndQuery;
use axum::http::{
    HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri, header,
};
use hyper::body::Incoming;
use tokio::time::Instant;
use tower::retry::budget::{Budget as _, TpsBudget};

use super::body::{Held, Once};
use super::headers::{Caller, add_forwarded, is_upgrade, remove_hop_by_hop};
use super::pool::{Failure, Lease, Pool};
use super::route::{Host, Routes, Target, Upstream, under};
use crate::balance::{Pick, PickError};
use crate::resolve::Endpoint;
use crate::server::limits::warn::{Throttle, throttled_warn};

/// What every worker shares: the routes, the retry budget, the limits, the log's throttle.
pub(crate) struct Shared {
    pub(crate) routes: Routes,
    pub(crate) budget: TpsBudget,
    pub(crate) max_body_bytes: usize,
    pub(crate) max_replay_bytes: usize,
    pub(crate) tunnel_idle_timeout: std::time::Duration,
    /// `http` or `https`: what the client spoke, for `X-Forwarded-Proto`.
    pub(crate) proto: &'static str,
    /// Whether the client's `X-Forwarded-For` and `Forwarded` are kept and appended to.
    pub(crate) trust_forwarded: bool,
    pub(crate) warn: Throttle,
}

/// One worker's proxy (`serve.rs`): what all share, and the worker's own pool of connections
/// to instances, so that a request and the connection it goes out on stay on one thread.
pub(crate) struct Proxy {
    pub(crate) shared: Arc<Shared>,
    pub(crate) pool: Arc<Pool>,
}

/// The request's head, rewritten once for every attempt.
struct Head {
    method: Method,
    path_and_query: PathAndQuery,
    headers: HeaderMap,
    client_host: Option<HeaderValue>,
}

/// Marks the answers the gateway made itself (not the instance's): the failures it logs.
#[derive(Debug, Clone, Copy)]
struct Ours;

impl Proxy {
    /// One request; a failure of the gateway's own (`502`, `503`, `504`) logged at WARN, at most
    /// once per service and status every 10 s (with the count of those not logged), so that a
    /// failing service cannot flood the log.
    pub(crate) async fn handle(
        &self,
        mut req: Request<Incoming>,
        caller: &Caller,
    ) -> Response<Body> {
        if req.uri().path().contains("//") {
            merge_slashes(req.uri_mut());
        }
        if let Some(why) = unsafe_path(req.uri().path()).or_else(|| bad_host(&req)) {
            return plain(StatusCode::BAD_REQUEST, format!("{why}\n"));
        }
        let method = req.method().as_str();
        if method.eq_ignore_ascii_case("TRACE") || method.eq_ignore_ascii_case("TRACK") {
            // It echoes the request back, credentials the gateway or a proxy before it added
            // included (cross-site tracing); nginx refuses it the same way. Methods are
            // case-sensitive, but servers (and IIS's TRACK) are lenient about these two.
            let mut r = plain(
                StatusCode::METHOD_NOT_ALLOWED,
                "TRACE is not forwarded\n".into(),
            );
            r.headers_mut().insert(
                header::ALLOW,
                HeaderValue::from_static("GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS"),
            );
            return r;
        }
        let route = match self.shared.routes.find(req.uri().path()) {
            Some((_, Target::Proxy(route))) => route,
            Some((prefix, Target::Functions(functions))) => {
                let path = req.uri().path().to_owned();
                let rest = under(&path, prefix).unwrap_or_default();
                let response = functions
                    .handle(
                        req,
                        prefix,
                        rest,
                        self.shared.max_body_bytes,
                        caller.certificate(),
                    )
                    .await;
                // As a proxied route's: at most once per route and status every 10 s (the
                // route's prefix, not the client's path, names the source, so that the
                // throttle's sources stay as few as the routes).
                let status = response.status();
                if status.is_server_error() {
                    throttled_warn!(
                        self.shared.warn,
                        "gateway",
                        format!("{prefix} {}", status.as_u16()),
                        "answered {status} for a function call under {prefix}"
                    );
                }
                return response;
            }
            None => {
                return plain(
                    StatusCode::NOT_FOUND,
                    format!("no route for {}\n", req.uri().path()),
                );
            }
        };
        let response = self.forward(req, caller, route).await;
        let status = response.status();
        if response.extensions().get::<Ours>().is_some() && status.is_server_error() {
            let service = &route.service;
            let source = format!("{service} {}", status.as_u16());
            throttled_warn!(
                self.shared.warn,
                "gateway",
                source,
                "answered {status} for service `{service}`"
            );
        }
        response
    }

    async fn forward(
        &self,
        mut req: Request<Incoming>,
        caller: &Caller,
        route: &Upstream,
    ) -> Response<Body> {
        if declared_length(req.headers()).is_some_and(|n| n > self.shared.max_body_bytes as u64) {
            return too_large(self.shared.max_body_bytes);
        }
        let client_upgrade = is_upgrade(req.headers()).then(|| hyper::upgrade::on(&mut req));
        let (parts, body) = req.into_parts();
        let body = Once::new(
            body,
            self.shared.max_body_bytes,
            self.shared.max_replay_bytes,
        );
        let head = match self.head(parts, route, caller) {
            Ok(head) => head,
            Err(e) => return plain(StatusCode::BAD_REQUEST, format!("the path: {e}\n")),
        };
        self.shared.budget.deposit();
        let deadline = after(route.timeout);
        let mut tried: Vec<Endpoint> = Vec::new();
        let mut reached = 0;
        let mut free_retry_used = false;
        let mut failed: Option<Response<Body>> = None;
        loop {
            let pick = match tokio::time::timeout_at(
                deadline,
                route.balancer.pick(&route.service, &tried),
            )
            .await
            {
                // The time went on resolving (a registry not read yet, slow): no instance was
                // asked, so the answer does not blame the service.
                Err(_) if failed.is_none() => return unresolved_in_time(route),
                Err(_) => return timed_out(route),
                Ok(Ok(p)) => p,
                // Every instance was tried: the last failure says what happened.
                Ok(Err(PickError::AllTried { .. })) => {
                    return failed.unwrap_or_else(|| bad_gateway(route, "no instance left"));
                }
                Ok(Err(PickError::Resolve(e))) => {
                    return failed.unwrap_or_else(|| {
                        plain(StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n"))
                    });
                }
            };
            let out = match outgoing(&head, route, pick.endpoint(), &self.pool, body.attempt()) {
                Ok(out) => out,
                Err(e) => {
                    // Nothing was sent: another instance is tried, as for a refused connection.
                    tracing::warn!("no request can be made to {}: {e}", pick.endpoint());
                    tried.push(pick.endpoint().clone());
                    failed = Some(bad_gateway(route, "an instance's address is not usable"));
                    continue;
                }
            };
            let answered =
                tokio::time::timeout_at(deadline, self.pool.send(pick.endpoint(), out)).await;
            let e = match answered {
                Err(_) => {
                    throttled_warn!(
                        self.shared.warn,
                        "instance",
                        pick.endpoint(),
                        "instance {} of `{}` did not answer within the route's {:?}",
                        pick.endpoint(),
                        route.service,
                        route.timeout
                    );
                    return timed_out(route);
                }
                Ok(Ok((response, lease))) => {
                    pick.reached();
                    let idle = self.shared.tunnel_idle_timeout;
                    return respond(response, pick, lease, client_upgrade, idle);
                }
                Ok(Err(e)) => e,
            };
            let connect = matches!(e, Failure::Connect(_));
            let stale = matches!(e, Failure::Broke { reused: true, .. });
            if let Failure::Local(e) = &e {
                // The gateway's own lack (file descriptors, memory): no instance is blamed.
                tracing::warn!("no connection to an instance could be opened: {e}");
                return plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the gateway is out of resources; try again\n".into(),
                );
            }
            // A kept-alive connection that broke under an idempotent request was most likely
            // closed by the instance for being idle as the request went out: one more try,
            // free (not counted, the instance not set aside), as nginx gives one.
            if stale && !free_retry_used && idempotent(&head.method) && body.can_resend() {
                free_retry_used = true;
                tracing::debug!(
                    "a kept-alive connection to {} broke: once more",
                    pick.endpoint()
                );
                continue;
            }
            tried.push(pick.endpoint().clone());
            let e = e.error();
            if let Some(limit) = body_too_large(e, self.shared.max_body_bytes) {
                return limit;
            }
            if body.client_failed() {
                // The client's body broke (malformed chunks, or the client went away): not the
                // instance's fault, nothing to retry or cool down.
                tracing::debug!(
                    "the request body from the client failed: {}",
                    super::error_chain(e)
                );
                return plain(
                    StatusCode::BAD_REQUEST,
                    "the request body could not be read\n".into(),
                );
            }
            // The details (the instance's address, the cause) go to the log, not to the
            // client: an edge gateway does not tell the Internet where its instances are. At
            // WARN, once per instance every 10 s, so that an operator finds the failing one.
            throttled_warn!(
                self.shared.warn,
                "instance",
                pick.endpoint(),
                "instance {} of `{}`: {}{}",
                pick.endpoint(),
                route.service,
                super::error_chain(e),
                if connect {
                    " (passed over for a cool-down)"
                } else {
                    ""
                }
            );
            let unreadable = e
                .downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_parse);
            let what = if connect {
                "no connection to an instance could be made"
            } else if unreadable {
                "the instance's answer could not be read (malformed, or its head too large)"
            } else {
                "the instance closed the connection without an answer"
            };
            if connect {
                pick.connect_failed();
                if body.can_resend() {
                    failed = Some(bad_gateway(route, what));
                    continue;
                }
                return bad_gateway(route, what);
            }
            reached += 1;
            let retry = idempotent(&head.method)
                && body.can_resend()
                && reached < route.attempts
                && self.shared.budget.withdraw();
            if !retry {
                return bad_gateway(route, what);
            }
            failed = Some(bad_gateway(route, what));
        }
    }

    fn head(
        &self,
        parts: axum::http::request::Parts,
        route: &Upstream,
        caller: &Caller,
    ) -> Result<Head, axum::http::uri::InvalidUri> {
        let path = route.rewrite(parts.uri.path());
        let path_and_query = match parts.uri.query() {
            Some(q) => format!("{path}?{q}"),
            None => path.into_owned(),
        };
        // Checked once here, shared (not copied) by every attempt's URI.
        let path_and_query = PathAndQuery::from_maybe_shared(Bytes::from(path_and_query))?;
        let mut headers = parts.headers;
        // RFC 9112 §3.2.2: with an absolute-form target, its authority is the host, not the
        // Host header.
        let sent_host = headers.remove(header::HOST);
        let client_host = match parts.uri.authority() {
            Some(a) => HeaderValue::from_str(a.as_str()).ok(),
            // An empty `Host` (allowed for a target without authority) names no host.
            None => sent_host.filter(|h| !h.is_empty()),
        };
        remove_hop_by_hop(&mut headers);
        add_forwarded(
            &mut headers,
            caller,
            self.shared.proto,
            client_host.as_ref(),
        );
        // The prefix the instance does not see, so that it can build links the client can
        // follow (Spring's ForwardedHeaderFilter; Spring Cloud Gateway's StripPrefix sets it).
        if let Some(prefix) = route.stripped(parts.uri.path())
            && let Ok(v) = HeaderValue::from_str(prefix)
        {
            headers.insert(X_FORWARDED_PREFIX, v);
        }
        Ok(Head {
            method: parts.method,
            path_and_query,
            headers,
            client_host,
        })
    }
}

/// One attempt's request to `to`.
fn outgoing(
    head: &Head,
    route: &Upstream,
    to: &Endpoint,
    pool: &Pool,
    body: Body,
) -> Result<Request<Body>, axum::http::Error> {
    // Origin-form (`/path?query`), as HTTP/1.1 sends to a server; the instance is named by
    // the connection and the `Host` header.
    let uri = Uri::from(head.path_and_query.clone());
    let mut req = Request::builder()
        .method(head.method.clone())
        .uri(uri)
        .body(body)?;
    *req.headers_mut() = head.headers.clone();
    let host = match &route.host {
        Host::Instance => pool.host(to)?,
        Host::Preserve => match &head.client_host {
            Some(h) => h.clone(),
            None => pool.host(to)?,
        },
        Host::Fixed(name) => HeaderValue::from_str(name)?,
    };
    req.headers_mut().insert(header::HOST, host);
    Ok(req)
}

const X_FORWARDED_PREFIX: HeaderName = HeaderName::from_static("x-forwarded-prefix");

/// The instance's answer, on its way back.
fn respond(
    mut response: Response<Incoming>,
    pick: Pick,
    lease: Lease,
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    tunnel_idle_timeout: std::time::Duration,
) -> Response<Body> {
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        match client_upgrade {
            Some(client) => {
                let instance = hyper::upgrade::on(&mut response);
                super::upgrade::join(client, instance, pick, lease, tunnel_idle_timeout);
                return response.map(|_| Body::empty());
            }
            // A 101 nobody asked for cannot be passed on.
            None => {
                return plain(
                    StatusCode::BAD_GATEWAY,
                    "the instance switched protocols unasked\n".into(),
                );
            }
        }
    }
    // RFC 9112 §6.3: a message with both is framed by Transfer-Encoding, and a proxy must drop
    // Content-Length; hyper read the body chunked, so the length would cut it short.
    if response.headers().contains_key(header::TRANSFER_ENCODING) {
        response.headers_mut().remove(header::CONTENT_LENGTH);
    }
    remove_hop_by_hop(response.headers_mut());
    // An HTTP/1.0 instance's answer goes to the client as HTTP/1.1 (the gateway's own
    // version): hyper would otherwise write `HTTP/1.0` and close a client's keep-alive
    // connection for an instance's choice. Its body, framed by the close, is sent chunked.
    *response.version_mut() = axum::http::Version::HTTP_11;
    response.map(|body| Held::body(body, pick, lease))
}

/// Why a path cannot be routed, if it cannot: a `.` or `..` segment, raw or percent-encoded,
/// or an encoded `/` or `\`. A route's prefix must bound what a client reaches: the instance
/// (or a server behind it) would resolve `/orders/../admin` to `/admin`. Refused rather than
/// normalised, as no client of a route needs them.
pub(crate) fn unsafe_path(path: &str) -> Option<&'static str> {
    let bytes = path.as_bytes();
    // Most paths have no `%`, `\`, `.` or `//`, without which none of the below can be: one
    // pass over the bytes.
    let mut previous = 0;
    let plain = bytes.iter().all(|&b| {
        let special = matches!(b, b'%' | b'\\' | b'.') || (b == b'/' && previous == b'/');
        previous = b;
        !special
    });
    if plain {
        return None;
    }
    let encoded_slash = bytes.windows(3).any(|w| {
        w[0] == b'%'
            && matches!(
                (w[1], w[2].to_ascii_lowercase()),
                (b'2', b'f') | (b'5', b'c')
            )
    });
    if encoded_slash || bytes.contains(&b'\\') {
        return Some("an encoded slash or a backslash in the path");
    }
    if path.contains("//") {
        // Merged before this is asked (`merge_slashes`); a route pattern with one is refused.
        return Some("an empty segment (`//`) in the path");
    }
    path.split('/')
        .any(is_dot_segment)
        .then_some("a `.` or `..` segment in the path")
}

/// Runs of `/` in the path made one, as nginx's `merge_slashes` does: `/api//orders/7` (a
/// base URL ending in `/` joined with `/orders/7`) is `/api/orders/7`, and no instance sees a
/// path starting `//`, which some frameworks' redirects read as a scheme-relative URL to
/// another host. The query is kept as sent.
fn merge_slashes(uri: &mut Uri) {
    let mut path = String::with_capacity(uri.path().len());
    for c in uri.path().chars() {
        if !(c == '/' && path.ends_with('/')) {
            path.push(c);
        }
    }
    if let Some(q) = uri.query() {
        path.push('?');
        path.push_str(q);
    }
    let mut parts = std::mem::take(uri).into_parts();
    parts.path_and_query = PathAndQuery::from_maybe_shared(Bytes::from(path)).ok();
    if let Ok(merged) = Uri::from_parts(parts) {
        *uri = merged;
    }
}

/// `.` or `..`, each dot raw or as `%2e`, before any `;` parameters (raw or `%3b`): Tomcat
/// (so Spring Boot) drops a segment's parameters before resolving dots, so `..;x` is `..`.
fn is_dot_segment(segment: &str) -> bool {
    let lower = segment.as_bytes();
    let end = (0..lower.len())
        .find(|&i| {
            lower[i] == b';'
                || lower[i..].len() >= 3 && lower[i..i + 3].eq_ignore_ascii_case(b"%3b")
        })
        .unwrap_or(lower.len());
    let (mut rest, mut dots) = (&lower[..end], 0);
    while !rest.is_empty() {
        rest = match rest {
            [b'.', tail @ ..] => tail,
            [b'%', b'2', e, tail @ ..] if e.eq_ignore_ascii_case(&b'e') => tail,
            _ => return false,
        };
        dots += 1;
    }
    matches!(dots, 1 | 2)
}

/// Why the request's `Host` is unusable, if it is: RFC 9112 §3.2 has a server answer 400 to an
/// HTTP/1.1 request without one, to any request with more than one (which of the two an
/// instance or a cache behind it believes is how requests are smuggled past a route), and to
/// one whose value is not a host (`evil, good` is the same ambiguity on one line). An
/// absolute-form target with user information (`http://user:pw@host/`) is refused too
/// (RFC 9110 §4.2.4: treat it as an error), rather than sent on as a `Host`.
fn bad_host<B>(req: &Request<B>) -> Option<&'static str> {
    if let Some(a) = req.uri().authority() {
        if a.as_str().contains('@') {
            return Some("user information in the request target");
        }
        if !is_authority(a.as_str().as_bytes()) {
            return Some("a request target whose host is not a host");
        }
    }
    let mut hosts = req.headers().get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(_), Some(_)) => Some("more than one Host header"),
        (None, _) if req.version() == axum::http::Version::HTTP_11 => {
            Some("an HTTP/1.1 request without a Host header")
        }
        (Some(h), None) if !h.is_empty() && !is_authority(h.as_bytes()) => {
            Some("a Host header that is not a host")
        }
        _ => None,
    }
}

/// `host` or `host:port` (RFC 9110 §7.2), without user information or a list, the port a
/// number up to 65,535: what a `Host` header, an absolute-form target's authority and a
/// route's fixed `host` may be.
pub(crate) fn is_authority(value: &[u8]) -> bool {
    // A name or IPv4 address with a port, or none: letters, digits, `.` and `-`, and at most
    // one `:` followed by the port. Such a name is an authority's host; checked without the
    // copy `Authority` parses.
    if let Some((&first, rest)) = value.split_first()
        && first.is_ascii_alphanumeric()
    {
        let (name, port) = match rest.iter().position(|b| *b == b':') {
            Some(at) => (&rest[..at], Some(&rest[at + 1..])),
            None => (rest, None),
        };
        if name
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'))
        {
            return port.is_none_or(|p| {
                std::str::from_utf8(p).is_ok_and(|d| !d.is_empty() && d.parse::<u16>().is_ok())
            });
        }
    }
    // After an IPv6 literal's `]`, or after the first `:` of a name or IPv4 address.
    let port = match value.first() {
        Some(b'[') => value
            .iter()
            .position(|b| *b == b']')
            .map(|end| &value[end + 1..]),
        _ => Some(
            value
                .iter()
                .position(|b| *b == b':')
                .map_or(&[][..], |at| &value[at..]),
        ),
    };
    let port_ok = port.is_some_and(|p| {
        p.is_empty()
            || p.strip_prefix(b":")
                .and_then(|digits| std::str::from_utf8(digits).ok())
                .is_some_and(|d| !d.is_empty() && d.parse::<u16>().is_ok())
    });
    port_ok
        && !value.contains(&b'@')
        && !value.contains(&b',')
        && axum::http::uri::Authority::try_from(value).is_ok()
}

/// RFC 9110 §9.2.2: methods whose repetition has the effect of one.
fn idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE
    )
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `Instant::now() + d`, saturating at a year.
fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or(now + Duration::from_secs(365 * 24 * 3600))
}

/// A `413` if the attempt failed because the client's body grew past the limit.
fn body_too_large(e: &(dyn std::error::Error + 'static), limit: usize) -> Option<Response<Body>> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(cause) = next {
        if cause.is::<http_body_util::LengthLimitError>() {
            return Some(too_large(limit));
        }
        next = cause.source();
    }
    None
}

pub(crate) fn plain(status: StatusCode, text: String) -> Response<Body> {
    let mut r = Response::new(Body::from(text));
    *r.status_mut() = status;
    r.extensions_mut().insert(Ours);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn bad_gateway(route: &Upstream, what: &str) -> Response<Body> {
    plain(
        StatusCode::BAD_GATEWAY,
        format!("service `{}`: {what}\n", route.service),
    )
}

fn timed_out(route: &Upstream) -> Response<Body> {
    plain(
        StatusCode::GATEWAY_TIMEOUT,
        format!(
            "service `{}` did not answer within {:?}\n",
            route.service, route.timeout
        ),
    )
}

fn unresolved_in_time(route: &Upstream) -> Response<Body> {
    plain(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "service `{}` could not be resolved within {:?}: its resolver has not answered (no \
             instance was asked)\n",
            route.service, route.timeout
        ),
    )
}

fn too_large(limit: usize) -> Response<Body> {
    let mut r = plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the body is larger than {limit} bytes\n"),
    );
    // The rest of the body is not read: the connection cannot carry another request.
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

#[cfg(test)]
mod tests {
    /// The short way for plain names agrees with the general one (what `Authority` parses).
    #[test]
    fn plain_authorities_are_judged_as_in_general() {
        let general = |v: &str| {
            let b = v.as_bytes();
            let port = b
                .iter()
                .position(|c| *c == b':')
                .map_or(&b[b.len()..], |at| &b[at..]);
            let port_ok = port.is_empty()
                || port
                    .strip_prefix(b":")
                    .and_then(|d| std::str::from_utf8(d).ok())
                    .is_some_and(|d| !d.is_empty() && d.parse::<u16>().is_ok());
            port_ok && axum::http::uri::Authority::try_from(b).is_ok()
        };
        for v in [
            "a",
            "shop.example",
            "shop.example:8080",
            "127.0.0.1:65535",
            "127.0.0.1:65536",
            "127.0.0.1:",
            "127.0.0.1:+80",
            "127.0.0.1:0x50",
            "a-b.c:1",
            "a:1:2",
            "x..y",
            "9",
            "a.:80",
            "a-:00080",
        ] {
            assert_eq!(super::is_authority(v.as_bytes()), general(v), "{v}");
        }
        for bad in ["", "a b", "a,b", "a@b", ":80", "-a", ".a"] {
            assert!(
                !super::is_authority(bad.as_bytes()) || general(bad),
                "{bad}"
            );
        }
    }

    #[test]
    fn dot_segments_and_encoded_slashes_are_refused() {
        for bad in [
            "/orders/../admin",
            "/orders/%2e%2e/admin",
            "/orders/%2E./admin",
            "/orders/./x",
            "/orders/..%2fadmin",
            "/orders/%5c..",
            "/..",
            "/orders/..;/admin",
            "/orders/.;x=1/admin",
            "/orders/%2e%2e;x/admin",
            "/orders/..%3B/admin",
        ] {
            assert!(super::unsafe_path(bad).is_some(), "{bad}");
        }
        for good in [
            "/orders/a..b",
            "/orders/.well-known",
            "/",
            "/orders/x%20y",
            "/orders/...",
        ] {
            assert!(super::unsafe_path(good).is_none(), "{good}");
        }
    }
}
