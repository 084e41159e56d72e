//! The headers a proxy must rewrite (RFC 9110 §7.6): the hop-by-hop ones removed each way, the
//! `X-Forwarded-*` and `Forwarded` (RFC 7239) ones added, so the instance learns who called and
//! by what name.

use std::net::IpAddr;

use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Headers that describe one connection, not the message: never forwarded (RFC 9110 §7.6.1),
/// with `Proxy-Connection` and `Keep-Alive` that old clients still send.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Whether the message asks for a protocol upgrade (`Connection: upgrade` with `Upgrade`).
pub(crate) fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
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
    let upgrade = is_upgrade(headers);
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().to_ascii_lowercase().as_bytes()).ok())
        // `Connection: upgrade` names the header an upgrade must keep.
        .filter(|n| !(upgrade && n == header::UPGRADE))
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    if upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        headers.remove(header::UPGRADE);
    }
}

/// Adds who called, over what and by which name: `X-Forwarded-For` (appended, as nginx's
/// `$proxy_add_x_forwarded_for`), `X-Forwarded-Proto`, `X-Forwarded-Host` and `Forwarded`
/// (appended). `host` is the `Host` the client sent, if any.
pub(crate) fn add_forwarded(
    headers: &mut HeaderMap,
    peer: IpAddr,
    proto: &'static str,
    host: Option<&HeaderValue>,
) {
    let xff = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(before) => format!("{before}, {peer}"),
        None => peer.to_string(),
    };
    if let Ok(v) = HeaderValue::from_str(&xff) {
        headers.insert("x-forwarded-for", v);
    }
    headers.insert("x-forwarded-proto", HeaderValue::from_static(proto));
    if let Some(h) = host {
        headers.insert("x-forwarded-host", h.clone());
    }
    // RFC 7239: an IPv6 address is quoted and bracketed, a host a quoted-string when needed.
    let node = match peer {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("\"[{a}]\""),
    };
    let mut element = format!("for={node};proto={proto}");
    if let Some(h) = host.and_then(|h| h.to_str().ok())
        && h.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
    {
        element.push_str(&format!(";host=\"{h}\""));
    }
    let forwarded = match headers.get(header::FORWARDED).and_then(|v| v.to_str().ok()) {
        Some(before) => format!("{before}, {element}"),
        None => element,
    };
    if let Ok(v) = HeaderValue::from_str(&forwarded) {
        headers.insert(header::FORWARDED, v);
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
        add_forwarded(&mut h, "::1".parse().unwrap(), "https", Some(&host));
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, ::1");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "shop.example:8080");
        assert_eq!(
            h["forwarded"],
            "for=10.0.0.1, for=\"[::1]\";proto=https;host=\"shop.example:8080\""
        );
    }
}
