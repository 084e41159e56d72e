//! Who may do what: HTTP Basic credentials for clients and for peers, checked before any route
//! runs (`guard`), as Spring's secured Eureka servers do.
//!
//! A server is given its `Access` by name before it starts ([`super::RegistryServer::access`]):
//! credentials, or [`Access::open`] (as Eureka without Spring Security), never open by default.
//! With any credentials configured:
//! - writes (register, renew, cancel, status overrides, metadata) need the client or the peer
//!   credentials;
//! - replication (`peerreplication/batch`, and any write marked `?isReplication=true` or
//!   `x-netflix-discovery-replication: true`) needs the peer credentials: without credentials
//!   it is a 401, with the client's a 403, so a client cannot make a write that is never
//!   forwarded to the other servers;
//! - reads are open, or need either credential when [`Access::protect_reads`] is set.
//!
//! A missing, malformed or wrong `Authorization` header where one is needed is a 401 with
//! `WWW-Authenticate: Basic realm="eureka"`, before the handler: nothing changes.

use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Shared;
use super::limits::warn::{Source, throttled_warn};
use super::routes::REPLICATION_HEADER;

/// A user name and password, as HTTP Basic carries them. `Debug` does not show the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    user: String,
    password: String,
}

impl Credentials {
    /// These credentials.
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            user: user.into(),
            password: password.into(),
        }
    }

    /// The user name.
    pub fn user(&self) -> &str {
        &self.user
    }

    pub(crate) fn password(&self) -> &str {
        &self.password
    }

    /// SHA-256 of `user:password`: what a presented credential is compared with, in constant
    /// time and at a constant length.
    fn digest(user: &[u8], password: &[u8]) -> [u8; 32] {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(user);
        ctx.update(b":");
        ctx.update(password);
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.finish().as_ref());
        out
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"…")
            .finish()
    }
}

/// Who may write, replicate and read. There is no default: open is [`Access::open`], said by
/// name.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Access {
    /// What clients (instances registering, operators) send to write.
    pub clients: Option<Credentials>,
    /// What peers send to replicate (and this server sends to its peers). Peers may also
    /// write and read as clients.
    pub peers: Option<Credentials>,
    /// Whether reads (apps, app, instance, vips, delta, status, overrides) need credentials too.
    /// Has no effect when no credentials are configured.
    pub protect_reads: bool,
}

impl Access {
    /// Open: no credentials, so anyone who reaches the port registers, cancels, overrides
    /// statuses and replicates. Only behind an authenticating proxy, or on a laptop; the
    /// server WARNs at start. Setting [`clients`](Self::clients) or [`peers`](Self::peers)
    /// afterwards secures it.
    pub fn open() -> Self {
        Self {
            clients: None,
            peers: None,
            protect_reads: false,
        }
    }

    /// Writes need `clients` (or the peers' credentials); replication needs `peers`.
    pub fn new(clients: Credentials, peers: Credentials) -> Self {
        Self {
            clients: Some(clients),
            peers: Some(peers),
            protect_reads: false,
        }
    }

    /// Reads need credentials too.
    #[must_use]
    pub fn protect_reads(mut self) -> Self {
        self.protect_reads = true;
        self
    }

    /// Whether any credential is configured (else everything is open).
    pub fn is_secured(&self) -> bool {
        self.clients.is_some() || self.peers.is_some()
    }

    /// Who brought `headers`.
    fn caller(&self, headers: &HeaderMap) -> Caller {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return Caller::Anonymous;
        };
        let Some((user, password)) = basic(value) else {
            return Caller::Invalid;
        };
        let presented = Credentials::digest(user.as_bytes(), password.as_bytes());
        // Both compared every time, so that the time taken says nothing about which matched.
        let is = |c: &Option<Credentials>| {
            c.as_ref().is_some_and(|c| {
                same(
                    &presented,
                    &Credentials::digest(c.user.as_bytes(), c.password.as_bytes()),
                )
            })
        };
        let (client, peer) = (is(&self.clients), is(&self.peers));
        if peer {
            Caller::Peer
        } else if client {
            Caller::Client
        } else {
            Caller::Invalid
        }
    }
}

/// Constant-time equality of two digests.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    Anonymous,
    /// An `Authorization` header that is not Basic, not base64, not UTF-8, or not a known
    /// credential.
    Invalid,
    Client,
    Peer,
}

/// What a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Nothing,
    /// Either credential.
    Client,
    Peer,
}

/// Whether this write counts as a replication: set by `guard` on every request, read by the
/// write handlers. Only ever true for a marked request from a peer (or on an open server).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Replication(pub(crate) bool);

/// `user` and `password` of an `Authorization: Basic …` header, if it is one.
fn basic(value: &HeaderValue) -> Option<(String, String)> {
    let value = value.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(base64_decode(token.trim())?).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// Standard base64 (RFC 4648, `+/`), padding optional; `None` for anything else.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let body = bytes
        .strip_suffix(b"==")
        .or_else(|| bytes.strip_suffix(b"="));
    let body = body.unwrap_or(bytes);
    if body.len() % 4 == 1 || (body.len() != bytes.len() && !bytes.len().is_multiple_of(4)) {
        return None;
    }
    let sextet = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    for chunk in body.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= sextet(c)? << (18 - 6 * i);
        }
        let [_, a, b, c] = n.to_be_bytes();
        out.push(a);
        if chunk.len() > 2 {
            out.push(b);
        }
        if chunk.len() > 3 {
            out.push(c);
        }
    }
    Some(out)
}

/// Whether a request is marked as a replication: Eureka's header or the `isReplication` query
/// flag.
pub(crate) fn is_marked(req: &Request) -> bool {
    let header = req
        .headers()
        .get(REPLICATION_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let query = req.uri().query().is_some_and(|q| {
        q.split('&').any(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            k == "isReplication" && v.eq_ignore_ascii_case("true")
        })
    });
    header || query
}

fn need(access: &Access, req: &Request, marked: bool) -> Need {
    if req.uri().path() == "/eureka/peerreplication/batch" {
        Need::Peer
    } else if req.method() == Method::GET || req.method() == Method::HEAD {
        if access.protect_reads {
            Need::Client
        } else {
            Need::Nothing
        }
    } else if marked {
        Need::Peer
    } else {
        Need::Client
    }
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [
            (header::WWW_AUTHENTICATE, r#"Basic realm="eureka""#),
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
        ],
        "credentials needed: HTTP Basic, e.g. http://user:password@host:port/eureka/\n",
    )
        .into_response()
}

fn forbidden() -> Response {
    (
        StatusCode::FORBIDDEN,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "replication (peerreplication/batch, isReplication=true, \
         x-netflix-discovery-replication) needs the peer credentials\n",
    )
        .into_response()
}

/// Checks the caller against what the route needs, before the route; marks the request as a
/// replication or not for the handlers.
pub(crate) async fn guard(
    State(shared): State<Arc<Shared>>,
    mut req: Request,
    next: Next,
) -> Response {
    let access = &shared.access;
    let marked = is_marked(&req);
    if !access.is_secured() {
        req.extensions_mut().insert(Replication(marked));
        return next.run(req).await;
    }
    let need = need(access, &req, marked);
    let caller = if need == Need::Nothing {
        Caller::Anonymous // an open read: whatever the header says is not looked at
    } else {
        access.caller(req.headers())
    };
    let source = req
        .extensions()
        .get::<Source>()
        .copied()
        .unwrap_or_default();
    match (need, caller) {
        (Need::Nothing, _)
        | (Need::Client, Caller::Client | Caller::Peer)
        | (Need::Peer, Caller::Peer) => {}
        (_, Caller::Anonymous) => {
            tracing::debug!("401 for {} {}", req.method(), req.uri().path());
            return unauthorized();
        }
        (_, Caller::Invalid) => {
            // A wrong or malformed credential: worth a warning, but a guesser in a loop must
            // not become a loop of log lines.
            throttled_warn!(
                shared.throttle,
                "credentials",
                source,
                "401 for {} {}: a wrong or malformed Authorization header",
                req.method(),
                req.uri().path()
            );
            return unauthorized();
        }
        (Need::Peer, Caller::Client) => {
            throttled_warn!(
                shared.throttle,
                "replication-as-client",
                source,
                "403 for {} {}: a replication with the client credentials",
                req.method(),
                req.uri().path()
            );
            return forbidden();
        }
    }
    req.extensions_mut()
        .insert(Replication(marked && caller == Caller::Peer));
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(v: &[u8]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_bytes(v).unwrap());
        h
    }

    fn access() -> Access {
        Access::new(
            Credentials::new("app", "pw"),
            Credentials::new("peer", "ppw"),
        )
    }

    #[test]
    fn base64_decodes_with_and_without_padding_and_refuses_the_rest() {
        assert_eq!(base64_decode("YXBwOnB3").unwrap(), b"app:pw");
        assert_eq!(base64_decode("YTpi").unwrap(), b"a:b");
        assert_eq!(base64_decode("YTpiYw==").unwrap(), b"a:bc");
        assert_eq!(base64_decode("YTpiYw").unwrap(), b"a:bc");
        assert_eq!(base64_decode("YTpiY2Q=").unwrap(), b"a:bcd");
        assert_eq!(base64_decode("").unwrap(), b"");
        for bad in ["Y", "YTpiY===", "YT!i", "YTpiYw=", "=", "YQ==YQ==", "ä"] {
            assert!(base64_decode(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn callers_are_told_apart_and_bad_headers_are_invalid_never_a_panic() {
        let a = access();
        assert_eq!(a.caller(&HeaderMap::new()), Caller::Anonymous);
        assert_eq!(a.caller(&header(b"Basic YXBwOnB3")), Caller::Client);
        assert_eq!(a.caller(&header(b"basic   cGVlcjpwcHc=")), Caller::Peer);
        for bad in [
            &b"Basic YXBwOnB4"[..], // app:px
            b"Basic",
            b"Basic ",
            b"Basic !!!!",
            b"Basic //79", // not UTF-8
            b"Basic YXBw", // no colon
            b"Bearer YXBwOnB3",
            b"YXBwOnB3",
            b"Basic \xff\xfe",
        ] {
            assert_eq!(a.caller(&header(bad)), Caller::Invalid, "{bad:?}");
        }
    }

    #[test]
    fn the_password_is_not_in_debug_output() {
        let text = format!("{:?}", access());
        assert!(!text.contains("ppw") && text.contains("peer"), "{text}");
    }
}
