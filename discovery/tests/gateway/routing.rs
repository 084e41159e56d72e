//! Routing by name: prefixes, `strip`, the `Host` and forwarded headers, hop-by-hop headers,
//! the spread over instances, and `503` when a service resolves to nothing.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use cluster_discovery::balance::Balancer;
use cluster_discovery::gateway::{Gateway, Host, RunningGateway, Upstream as Route};
use cluster_discovery::resolve::{Endpoint, Static};

use crate::support::{Upstream, client, get, send};

async fn gateway(routes: &[(&str, Route)]) -> RunningGateway {
    let mut g = Gateway::new();
    for (p, r) in routes {
        g = g.route(p, r.clone());
    }
    g.start(([127, 0, 0, 1], 0).into()).await.unwrap()
}

fn balancer(service: &str, endpoints: impl IntoIterator<Item = Endpoint>) -> Arc<Balancer> {
    Arc::new(Balancer::new(Static::new().service(service, endpoints)))
}

#[tokio::test]
async fn paths_route_by_prefix_to_the_named_service_with_the_prefix_stripped() {
    let (orders, billing) = (Upstream::start().await, Upstream::start().await);
    let b = Arc::new(Balancer::new(
        Static::new()
            .service("orders", [orders.endpoint()])
            .service("billing", [billing.endpoint()]),
    ));
    let gw = gateway(&[
        (
            "/api/orders/*",
            Route::service("orders", b.clone()).strip("/api"),
        ),
        ("/api/billing/*", Route::service("billing", b.clone())),
    ])
    .await;
    let c = client();
    let a = get(&c, format!("{}/api/orders/7?expand=lines", gw.url())).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.port(), Some(orders.addr.port()));
    assert!(
        a.text.contains("GET /orders/7?expand=lines\n"),
        "{}",
        a.text
    );
    assert_eq!(
        a.seen("x-forwarded-prefix"),
        Some("/api"),
        "what was stripped, for the instance's links"
    );
    let a = get(&c, format!("{}/api/billing/inv/1", gw.url())).await;
    assert_eq!(a.port(), Some(billing.addr.port()));
    assert_eq!(a.seen("x-forwarded-prefix"), None, "nothing stripped");
    assert!(
        a.text.contains("GET /api/billing/inv/1\n"),
        "unstripped: {}",
        a.text
    );
    let a = get(&c, format!("{}/api/ordersx", gw.url())).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    gw.shutdown().await;
}

#[tokio::test]
async fn the_instance_sees_its_own_host_who_called_and_no_hop_by_hop_headers() {
    let up = Upstream::start().await;
    let b = balancer("orders", [up.endpoint()]);
    let gw = gateway(&[
        ("/a/*", Route::service("orders", b.clone())),
        (
            "/p/*",
            Route::service("orders", b.clone()).host(Host::Preserve),
        ),
        (
            "/f/*",
            Route::service("orders", b).host(Host::Fixed("orders.internal".into())),
        ),
    ])
    .await;
    let c = client();
    let req = |path: &str| {
        Request::get(format!("{}{path}", gw.url()))
            .header("host", "shop.example")
            .header("connection", "keep-alive, x-secret")
            .header("x-secret", "for this hop only")
            .header("proxy-authorization", "Basic Zm9vOmJhcg==")
            .header("te", "trailers")
            .header("x-forwarded-for", "10.1.2.3")
            .header("forwarded", "for=10.1.2.3;proto=https;host=bank.example")
            .body(Body::empty())
            .unwrap()
    };
    let a = send(&c, req("/a/x")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.seen("host"), Some(up.addr.to_string().as_str()));
    // The gateway is the edge: who called is its peer, whatever the client claims.
    assert_eq!(a.seen("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(a.seen("x-forwarded-proto"), Some("http"));
    assert_eq!(a.seen("x-forwarded-host"), Some("shop.example"));
    assert_eq!(
        a.seen("forwarded"),
        Some("for=127.0.0.1;proto=http;host=\"shop.example\"")
    );
    for gone in ["x-secret", "proxy-authorization", "te"] {
        assert_eq!(a.seen(gone), None, "{gone} was forwarded: {}", a.text);
    }
    assert_eq!(
        send(&c, req("/p/x")).await.seen("host"),
        Some("shop.example")
    );
    assert_eq!(
        send(&c, req("/f/x")).await.seen("host"),
        Some("orders.internal")
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn requests_spread_over_three_instances() {
    let ups = [
        Upstream::start().await,
        Upstream::start().await,
        Upstream::start().await,
    ];
    let b = balancer("orders", ups.iter().map(Upstream::endpoint));
    let gw = gateway(&[("/orders/*", Route::service("orders", b))]).await;
    let c = client();
    let mut per: HashMap<u16, usize> = HashMap::new();
    // 16 at a time, so that requests in flight weigh in the choice.
    for _ in 0..20 {
        let round =
            futures::future::join_all((0..16).map(|_| get(&c, format!("{}/orders/1", gw.url()))))
                .await;
        for a in round {
            assert_eq!(a.status, StatusCode::OK);
            *per.entry(a.port().unwrap()).or_default() += 1;
        }
    }
    assert_eq!(per.len(), 3, "{per:?}");
    assert!(per.values().all(|n| *n >= 50), "uneven: {per:?}");
    gw.shutdown().await;
}

#[tokio::test]
async fn a_service_that_resolves_to_nothing_is_503_with_its_name() {
    let b = balancer("orders", [Endpoint::new("127.0.0.1", 1)]);
    let gw = gateway(&[("/billing/*", Route::service("billing", b))]).await;
    let a = get(&client(), format!("{}/billing/1", gw.url())).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(a.text.contains("billing"), "{}", a.text);
    gw.shutdown().await;
}

/// What the gateway answers to a raw request line (the path sent as is, as `curl
/// --path-as-is` would).
async fn raw(gw: &RunningGateway, path: &str) -> String {
    raw_request(
        gw,
        &format!("GET {path} HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n\r\n"),
    )
    .await
}

/// What the gateway answers to `request`, sent byte for byte (it must ask to close).
async fn raw_request(gw: &RunningGateway, request: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut tcp = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    answer
}

#[tokio::test]
async fn requests_a_server_must_refuse_are_refused_before_any_instance_sees_them() {
    let up = Upstream::start().await;
    let gw = gateway(&[("/*", Route::service("o", balancer("o", [up.endpoint()])))]).await;
    for (request, status) in [
        // RFC 9112 §3.2: an HTTP/1.1 request without Host, or any with two.
        ("GET /a HTTP/1.1\r\nconnection: close\r\n\r\n", "400"),
        (
            "GET /a HTTP/1.1\r\nhost: a\r\nhost: b\r\nconnection: close\r\n\r\n",
            "400",
        ),
        // A Host that is not one: a list, a space, user information, a path.
        (
            "GET /a HTTP/1.1\r\nhost: evil, good\r\nconnection: close\r\n\r\n",
            "400",
        ),
        (
            "GET /a HTTP/1.1\r\nhost: a b\r\nconnection: close\r\n\r\n",
            "400",
        ),
        (
            "GET /a HTTP/1.1\r\nhost: u@evil\r\nconnection: close\r\n\r\n",
            "400",
        ),
        (
            "GET /a HTTP/1.1\r\nhost: a/../b\r\nconnection: close\r\n\r\n",
            "400",
        ),
        (
            "GET http://user:pw@evil/a HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n\r\n",
            "400",
        ),
        // The same checks for an absolute-form target's authority, and a port is a number.
        (
            "GET http://evil,good/a HTTP/1.1\r\nhost: good\r\nconnection: close\r\n\r\n",
            "400",
        ),
        (
            "GET /a HTTP/1.1\r\nhost: evil:abc\r\nconnection: close\r\n\r\n",
            "400",
        ),
        (
            "GET /a HTTP/1.1\r\nhost: evil:99999\r\nconnection: close\r\n\r\n",
            "400",
        ),
        // TRACE would echo what the gateway adds: refused as nginx does, in any case, and
        // IIS's TRACK with it.
        (
            "TRACE /a HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n\r\n",
            "405",
        ),
        (
            "trace /a HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n\r\n",
            "405",
        ),
        (
            "TRACK /a HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n\r\n",
            "405",
        ),
    ] {
        let answer = raw_request(&gw, request).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{request:?}: {answer}"
        );
    }
    assert_eq!(up.hits(), 0, "no instance saw them");
    for host in [
        "[::1]:8080",
        "[::1]",
        "shop.example",
        "shop.example:8443",
        "a_b:80",
    ] {
        let answer = raw_request(
            &gw,
            &format!("GET /a HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n"),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{host}: {answer}");
    }
    // HTTP/1.0 has no Host requirement.
    let answer = raw_request(&gw, "GET /a HTTP/1.0\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    gw.shutdown().await;
}

#[tokio::test]
async fn an_h2c_upgrade_goes_on_as_plain_http() {
    let up = Upstream::start().await;
    let gw = gateway(&[("/*", Route::service("o", balancer("o", [up.endpoint()])))]).await;
    let answer = raw_request(
        &gw,
        "GET /a HTTP/1.1\r\nhost: gw\r\nconnection: Upgrade, HTTP2-Settings, close\r\n\
         upgrade: h2c\r\nhttp2-settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let seen = answer.to_ascii_lowercase();
    for gone in ["upgrade:", "http2-settings:"] {
        assert!(!seen.contains(gone), "the instance saw {gone} {answer}");
    }
    gw.shutdown().await;
}

#[tokio::test]
async fn a_path_that_climbs_out_of_its_route_is_refused_before_any_instance_sees_it() {
    let up = Upstream::start().await;
    let gw = gateway(&[(
        "/public/orders/*",
        Route::service("orders", balancer("orders", [up.endpoint()])).strip("/public"),
    )])
    .await;
    for path in [
        "/public/orders/../admin",
        "/public/orders/%2e%2e/admin",
        "/public/orders/..%2fadmin",
        "/public/orders/./x",
    ] {
        let answer = raw(&gw, path).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{path}: {answer}");
    }
    assert_eq!(up.hits(), 0, "no instance saw them");
    assert!(
        raw(&gw, "/public/orders/a..b")
            .await
            .starts_with("HTTP/1.1 200")
    );
    // Runs of `/` are merged, as nginx does: no instance sees `//evil.example/x`, which some
    // frameworks' redirects read as another host.
    let merged = raw(&gw, "/public//orders//evil.example/x?a=b//c").await;
    assert!(merged.starts_with("HTTP/1.1 200"), "{merged}");
    assert!(
        merged.contains("GET /orders/evil.example/x?a=b//c\n"),
        "{merged}"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn an_instance_with_an_unusable_address_is_passed_over_for_the_next() {
    let up = Upstream::start().await;
    let unusable = Endpoint::new("a b", 80);
    let gw = gateway(&[(
        "/*",
        Route::service("weird", balancer("weird", [unusable, up.endpoint()])),
    )])
    .await;
    let c = client();
    for _ in 0..6 {
        assert_eq!(
            get(&c, format!("{}/x", gw.url())).await.status,
            StatusCode::OK
        );
    }
    gw.shutdown().await;
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_forwarded_chains_are_appended_to() {
    let up = Upstream::start().await;
    let gw = Gateway::new()
        .route(
            "/*",
            Route::service("orders", balancer("orders", [up.endpoint()])),
        )
        .trust_forwarded(true)
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let req = Request::get(format!("{}/x", gw.url()))
        .header("host", "shop.example")
        .header("x-forwarded-for", "10.1.2.3")
        .header("forwarded", "for=10.1.2.3")
        .body(Body::empty())
        .unwrap();
    let a = send(&client(), req).await;
    assert_eq!(a.seen("x-forwarded-for"), Some("10.1.2.3, 127.0.0.1"));
    assert_eq!(
        a.seen("forwarded"),
        Some("for=10.1.2.3, for=127.0.0.1;proto=http;host=\"shop.example\"")
    );
    gw.shutdown().await;
}
