//! The headers a proxy must rewrite (RFC 9110 §7.6): the hop-by-hop ones removed each way, the
//! `X-Forwarded-*` and `Forwarded` (RFC 7239) ones added, so the instance learns who called and
//! by what name.

use std::net::IpAddr;
use std::sync::Mutex;

use axum::body::Bytes;
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Headers that describe one connection, not the message: never forwarded (RFC 9110 §7.6.1),
/// with `Proxy-Connection` and `Keep-Alive` that old clients still send.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            // HTTP/2's upgrade settings (RFC 7540 §3.2.1): only for the next hop.
            | "http2-settings"
    )
}

/// Whether the message asks for a protocol upgrade (`Connection: upgrade` with `Upgrade`)
/// that the gateway passes through. `h2c` is not one: it would turn the connection to the
/// instance into HTTP/2, which the gateway does not speak, and RFC 9113 retired it; such a
/// request goes on as plain HTTP/1.1, its `Upgrade` removed, as nginx does.
pub(crate) fn is_upgrade(headers: &HeaderMap) -> bool {
    let mut upgrades = headers.get_all(header::UPGRADE).iter().peekable();
    upgrades.peek().is_some()
        && !upgrades.any(|u| {
            u.as_bytes()
                .split(|b| *b == b',')
                .any(|p| p.trim_ascii().eq_ignore_ascii_case(b"h2c"))
        })
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// Removes the hop-by-hop headers, those the `Connection` header names among them. An upgrade
/// keeps `Connection: upgrade` and `Upgrade`: the next hop must see the request for it.
pub(crate) fn remove_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages have none, and most of the rest only `Connection: keep-alive` (every
    // answer of nginx's) or `close`, with `Keep-Alive`: one pass over the fields, and those
    // two removed by name, without the general case's lists.
    let (mut connection, mut keep_alive) = (false, false);
    let general = headers.iter().any(|(name, value)| {
        if name == header::CONNECTION && only_usual_tokens(value) {
            connection = true;
        } else if name == KEEP_ALIVE {
            keep_alive = true;
        } else {
            return name == header::UPGRADE || is_hop_by_hop(name);
        }
        false
    });
    if general {
        remove_hop_by_hop_in_general(headers);
        return;
    }
    if connection {
        headers.remove(header::CONNECTION);
    }
    if keep_alive {
        headers.remove(KEEP_ALIVE);
    }
}

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");

/// Whether a `Connection` value names nothing but `keep-alive` and `close` (no header to
/// remove by name, no upgrade).
fn only_usual_tokens(value: &HeaderValue) -> bool {
    value.as_bytes().split(|b| *b == b',').all(|t| {
        let t = t.trim_ascii();
        t.eq_ignore_ascii_case(b"keep-alive") || t.eq_ignore_ascii_case(b"close")
    })
}

/// [`remove_hop_by_hop`] for a message with an upgrade, other hop-by-hop headers, or a
/// `Connection` that names headers.
fn remove_hop_by_hop_in_general(headers: &mut HeaderMap) {
    let upgrade = is_upgrade(headers);
    // Names `Connection` lists beyond the fixed ones (`keep-alive`, `close`, `upgrade` are the
    // usual tokens, and cost nothing here).
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| {
            !["close", "keep-alive", "upgrade"]
                .iter()
                .any(|usual| t.eq_ignore_ascii_case(usual))
        })
        // `from_bytes` takes any case.
        .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
        .collect();
    for name in &named {
        headers.remove(name);
    }
    remove_where(headers, is_hop_by_hop);
    if upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        headers.remove(header::UPGRADE);
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// What the forwarded headers say of one client connection, written once when it opens
/// rather than for each of its requests.
#[derive(Debug)]
pub(crate) struct Caller {
    /// `X-Forwarded-For`'s element: `192.0.2.9`, `::1`.
    address: HeaderValue,
    /// `Forwarded`'s element, without the host (RFC 7239: an IPv6 address is quoted and
    /// bracketed): `for=192.0.2.9;proto=https`.
    forwarded: String,
    /// Whether the client's `X-Forwarded-For` and `Forwarded` are kept (a proxy of the
    /// operator's in front) or replaced (the gateway is the edge).
    trusted: bool,
    /// The node name the client's TLS certificate carries, verified against the listener's
    /// client CA; `None` without one.
    certificate: Option<String>,
    /// At the edge, the last `Forwarded` value written and the `Host` it names.
    edge_forwarded: Mutex<Option<(Option<HeaderValue>, HeaderValue)>>,
}

impl Caller {
    pub(crate) fn new(peer: IpAddr, proto: &'static str, trusted: bool) -> Self {
        let address = HeaderValue::from_maybe_shared(Bytes::from(peer.to_string()))
            .expect("an IP address is a valid header value");
        let forwarded = match peer {
            IpAddr::V4(a) => format!("for={a};proto={proto}"),
            IpAddr::V6(a) => format!("for=\"[{a}]\";proto={proto}"),
        };
        Self {
            address,
            forwarded,
            trusted,
            certificate: None,
            edge_forwarded: Mutex::new(None),
        }
    }

    /// The same, with the name its verified client certificate carries.
    pub(crate) fn with_certificate(mut self, certificate: Option<String>) -> Self {
        self.certificate = certificate;
        self
    }

    /// The name its verified client certificate carries.
    pub(crate) fn certificate(&self) -> Option<&str> {
        self.certificate.as_deref()
    }
}

/// Headers by which some framework learns the client's address, scheme, host, port or path
/// from a proxy, and which the gateway does not set (`X-Forwarded-Prefix` only when it
/// strips a prefix, after this): removed, whoever sent them, since an
/// instance behind it would believe them (Spring's `ForwardedHeaderFilter`, Rack,
/// Symfony and IIS's URL rewriting).
const NOT_THE_CLIENTS: [&str; 18] = [
    "x-forwarded-port",
    "x-forwarded-prefix",
    "x-forwarded-server",
    "x-forwarded-ssl",
    "x-forwarded-scheme",
    "x-forwarded-protocol",
    "x-forwarded-uri",
    "x-url-scheme",
    "front-end-https",
    "x-real-ip",
    "x-client-ip",
    "true-client-ip",
    "x-original-url",
    "x-rewrite-url",
    "x-original-host",
    "x-host",
    "x-forwarded-client-cert",
    "cf-connecting-ip",
];

/// Adds who called, over what and by which name: `X-Forwarded-For`, `X-Forwarded-Proto`,
/// `X-Forwarded-Host` and `Forwarded`. `host` is the `Host` the client sent, if any.
///
/// A trusted caller's `X-Forwarded-For` and `Forwarded` are appended to (as nginx's
/// `$proxy_add_x_forwarded_for`), a list sent on several lines joined into one first
/// (RFC 9110 §5.3) so that no hop is lost, and a `Forwarded` with an unclosed quote (which
/// would swallow the gateway's element) dropped. Otherwise they are replaced.
pub(crate) fn add_forwarded(
    headers: &mut HeaderMap,
    caller: &Caller,
    proto: &'static str,
    host: Option<&HeaderValue>,
) {
    // Names with a `_` (nginx's `underscores_in_headers off`: CGI, WSGI and ASGI servers read
    // `X_Forwarded_Proto` as `X-Forwarded-Proto`), and at the edge the forwarding family: one
    // pass over the names, not a lookup of each of the 18 per request.
    let trusted = caller.trusted;
    remove_where(headers, |n| {
        n.as_str().contains('_') || (!trusted && NOT_THE_CLIENTS.contains(&n.as_str()))
    });
    if !trusted {
        headers.remove(&X_FORWARDED_FOR);
        headers.remove(header::FORWARDED);
    }
    if headers.contains_key(&X_FORWARDED_FOR) {
        let mut xff = joined(headers, &X_FORWARDED_FOR);
        xff.push_str(caller.address.to_str().unwrap_or_default());
        set(headers, X_FORWARDED_FOR, xff);
    } else {
        headers.insert(X_FORWARDED_FOR, caller.address.clone());
    }
    // A trusted proxy in front knows the scheme and host the client used (it may have ended
    // TLS): what it says is kept. Otherwise the gateway says what it saw.
    if !(caller.trusted && headers.contains_key(&X_FORWARDED_PROTO)) {
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
    }
    if !(caller.trusted && headers.contains_key(&X_FORWARDED_HOST)) {
        match host {
            Some(h) => headers.insert(X_FORWARDED_HOST, h.clone()),
            None => headers.remove(X_FORWARDED_HOST),
        };
    }
    if !trusted {
        // The gateway's element alone: the same for every request of the connection that
        // names the same host, so written once for them.
        let mut last = caller
            .edge_forwarded
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let value = match &*last {
            Some((named, value)) if named.as_ref() == host => value.clone(),
            _ => {
                let value = forwarded_element(String::new(), caller, host);
                let Ok(value) = HeaderValue::from_maybe_shared(Bytes::from(value)) else {
                    return;
                };
                *last = Some((host.cloned(), value.clone()));
                value
            }
        };
        headers.insert(header::FORWARDED, value);
        return;
    }
    let mut forwarded = joined(headers, &header::FORWARDED);
    if !quotes_closed(&forwarded) {
        forwarded.clear();
    }
    set(
        headers,
        header::FORWARDED,
        forwarded_element(forwarded, caller, host),
    );
}

/// `before` followed by the gateway's `Forwarded` element: `for=…;proto=…`, and `host="…"`
/// when the host can be quoted as it is.
fn forwarded_element(mut before: String, caller: &Caller, host: Option<&HeaderValue>) -> String {
    before.push_str(&caller.forwarded);
    if let Some(h) = host.and_then(|h| h.to_str().ok())
        && h.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
    {
        before.push_str(";host=\"");
        before.push_str(h);
        before.push('"');
    }
    before
}

/// Removes every header whose name `unwanted` says so of. Most requests have none: one pass
/// over the names, nothing hashed, unless one is there.
fn remove_where(headers: &mut HeaderMap, unwanted: impl Fn(&HeaderName) -> bool) {
    if !headers.keys().any(&unwanted) {
        return;
    }
    let found: Vec<HeaderName> = headers.keys().filter(|n| unwanted(n)).cloned().collect();
    for name in found {
        headers.remove(name);
    }
}

/// Whether every quoted string in `s` ends (RFC 9110 §5.6.4: `\\` escapes inside one).
fn quotes_closed(s: &str) -> bool {
    let (mut quoted, mut escaped) = (false, false);
    for b in s.bytes() {
        match (quoted, escaped, b) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (_, _, b'"') => quoted = !quoted,
            _ => {}
        }
    }
    !quoted
}

/// The values of `name` that read as text, joined by `, ` and followed by `, ` (empty if none).
fn joined(headers: &HeaderMap, name: &HeaderName) -> String {
    let mut s = String::with_capacity(64);
    for v in headers.get_all(name).iter().filter_map(|v| v.to_str().ok()) {
        s.push_str(v);
        s.push_str(", ");
    }
    s
}

/// `name: value`, replacing every line before; nothing if the value cannot be a header.
fn set(headers: &mut HeaderMap, name: HeaderName, value: String) {
    if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(value)) {
        headers.insert(name, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_removed() {
        let mut h = map(&[
            ("connection", "keep-alive, x-secret"),
            ("keep-alive", "timeout=5"),
            ("x-secret", "1"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("accept", "*/*"),
        ]);
        remove_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["accept"]);
    }

    #[test]
    fn connection_keep_alive_or_close_alone_is_removed_and_the_rest_kept() {
        for (connection, extra) in [
            ("keep-alive", None),
            ("Keep-Alive, close", Some(("keep-alive", "timeout=5"))),
            ("close", None),
            ("", None),
        ] {
            let mut pairs = vec![("server", "nginx"), ("connection", connection)];
            pairs.extend(extra);
            pairs.push(("content-length", "3"));
            let mut h = map(&pairs);
            remove_hop_by_hop(&mut h);
            let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
            assert_eq!(left, ["server", "content-length"], "{connection}");
        }
        // A token naming a header takes the general way: that header goes too.
        let mut h = map(&[("connection", "keep-alive, x-secret"), ("x-secret", "1")]);
        remove_hop_by_hop(&mut h);
        assert!(h.is_empty(), "{h:?}");
    }

    #[test]
    fn an_h2c_upgrade_is_not_passed_on() {
        let mut h = map(&[
            ("connection", "Upgrade, HTTP2-Settings"),
            ("upgrade", "h2c"),
            ("http2-settings", "AAMAAABkAARAAAAAAAIAAAAA"),
            ("accept", "*/*"),
        ]);
        assert!(!is_upgrade(&h));
        remove_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["accept"]);
    }

    #[test]
    fn h2c_on_a_second_upgrade_line_is_seen_too() {
        let mut h = map(&[
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
            ("upgrade", "h2c"),
            ("http2-settings", "AAMAAABkAARAAAAAAAIAAAAA"),
        ]);
        assert!(!is_upgrade(&h));
        remove_hop_by_hop(&mut h);
        assert!(h.is_empty(), "{h:?}");
    }

    #[test]
    fn forwarded_headers_the_gateway_does_not_set_are_not_passed_on() {
        let mut h = map(&[
            ("x-forwarded-host", "evil.example"),
            ("x-forwarded-prefix", "/admin"),
            ("x-forwarded-port", "443"),
        ]);
        add_forwarded(
            &mut h,
            &Caller::new("192.0.2.9".parse().unwrap(), "http", false),
            "http",
            None,
        );
        for gone in ["x-forwarded-host", "x-forwarded-prefix", "x-forwarded-port"] {
            assert!(!h.contains_key(gone), "{gone}");
        }
    }

    #[test]
    fn an_upgrade_keeps_its_two_headers() {
        let mut h = map(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket"),
        ]);
        assert!(is_upgrade(&h));
        remove_hop_by_hop(&mut h);
        assert_eq!(h["connection"], "upgrade");
        assert_eq!(h["upgrade"], "websocket");
    }

    #[test]
    fn forwarded_headers_append_to_what_came_before() {
        let mut h = map(&[
            ("x-forwarded-for", "10.0.0.1"),
            ("forwarded", "for=10.0.0.1"),
        ]);
        let host = HeaderValue::from_static("shop.example:8080");
        let caller = Caller::new("::1".parse().unwrap(), "https", true);
        add_forwarded(&mut h, &caller, "https", Some(&host));
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, ::1");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "shop.example:8080");
        assert_eq!(
            h["forwarded"],
            "for=10.0.0.1, for=\"[::1]\";proto=https;host=\"shop.example:8080\""
        );
    }

    #[test]
    fn lists_sent_on_several_lines_keep_every_hop() {
        let mut h = map(&[
            ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-for", "10.0.0.2, 10.0.0.3"),
            ("forwarded", "for=10.0.0.1"),
            ("forwarded", "for=10.0.0.2"),
        ]);
        let caller = Caller::new("192.0.2.9".parse().unwrap(), "http", true);
        add_forwarded(&mut h, &caller, "http", None);
        let all = |name: &str| h.get_all(name).iter().count();
        assert_eq!((all("x-forwarded-for"), all("forwarded")), (1, 1));
        assert_eq!(
            h["x-forwarded-for"],
            "10.0.0.1, 10.0.0.2, 10.0.0.3, 192.0.2.9"
        );
        assert_eq!(
            h["forwarded"],
            "for=10.0.0.1, for=10.0.0.2, for=192.0.2.9;proto=http"
        );
    }

    #[test]
    fn at_the_edge_the_client_s_forwarded_headers_are_replaced() {
        let mut h = map(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("forwarded", "for=6.6.6.6;proto=https;host=bank.example"),
            ("x-forwarded-ssl", "on"),
            ("x-real-ip", "6.6.6.6"),
            ("x-original-url", "/admin"),
            ("x_forwarded_proto", "https"),
            ("x_real_ip", "6.6.6.6"),
        ]);
        let caller = Caller::new("192.0.2.9".parse().unwrap(), "http", false);
        add_forwarded(&mut h, &caller, "http", None);
        assert_eq!(h["x-forwarded-for"], "192.0.2.9");
        assert_eq!(h["forwarded"], "for=192.0.2.9;proto=http");
        for gone in [
            "x-forwarded-ssl",
            "x-real-ip",
            "x-original-url",
            "x_forwarded_proto",
            "x_real_ip",
        ] {
            assert!(!h.contains_key(gone), "{gone}");
        }
    }

    #[test]
    fn at_the_edge_each_request_names_its_own_host() {
        let caller = Caller::new("192.0.2.9".parse().unwrap(), "https", false);
        for host in ["a.example", "b.example", "b.example", "a.example"] {
            let mut h = map(&[("forwarded", "for=6.6.6.6")]);
            let host = HeaderValue::from_static(host);
            add_forwarded(&mut h, &caller, "https", Some(&host));
            let want = format!(
                "for=192.0.2.9;proto=https;host=\"{}\"",
                host.to_str().unwrap()
            );
            assert_eq!(h["forwarded"], want.as_str());
        }
        let mut h = HeaderMap::new();
        add_forwarded(&mut h, &caller, "https", None);
        assert_eq!(h["forwarded"], "for=192.0.2.9;proto=https");
    }

    #[test]
    fn a_trusted_forwarded_with_an_unclosed_quote_is_dropped_not_let_swallow_ours() {
        let mut h = map(&[("forwarded", "for=\"6.6.6.6")]);
        let caller = Caller::new("192.0.2.9".parse().unwrap(), "http", true);
        add_forwarded(&mut h, &caller, "http", None);
        assert_eq!(h["forwarded"], "for=192.0.2.9;proto=http");
        assert!(quotes_closed(r#"for="a\"b", for=c"#));
        assert!(!quotes_closed(r#"for="a\""#));
    }

    #[test]
    fn a_trusted_proxy_s_scheme_host_and_port_are_kept() {
        let mut h = map(&[
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "shop.example"),
            ("x-forwarded-port", "443"),
        ]);
        let caller = Caller::new("10.0.0.2".parse().unwrap(), "http", true);
        let host = HeaderValue::from_static("gateway.internal");
        add_forwarded(&mut h, &caller, "http", Some(&host));
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "shop.example");
        assert_eq!(h["x-forwarded-port"], "443");
    }
}
