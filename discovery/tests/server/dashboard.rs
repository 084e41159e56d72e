//! The dashboard is behind a token by default.

use axum::body::Body;
use axum::http::{Method, StatusCode};
use cluster_discovery::server::{Dashboard, RegistryServer};

use crate::support::{call, register};

#[tokio::test]
async fn by_default_the_dashboard_is_closed_with_a_clear_401() {
    let svc = RegistryServer::new().service();
    for path in ["/discovery", "/discovery/registry.json"] {
        let a = call(&svc, Method::GET, path, &[], Body::empty()).await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(a.text().contains("--dashboard-token"), "{}", a.text());
        assert!(a.headers.contains_key("www-authenticate"));
    }
}

#[tokio::test]
async fn with_a_token_only_its_bearer_sees_the_registry() {
    let svc = RegistryServer::new()
        .dashboard(Dashboard::token("s3cret"))
        .service();
    register(&svc, "orders", "o-1").await;
    let none = call(
        &svc,
        Method::GET,
        "/discovery/registry.json",
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED);
    let wrong = call(
        &svc,
        Method::GET,
        "/discovery/registry.json",
        &[("authorization", "Bearer nope")],
        Body::empty(),
    )
    .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.text().contains("wrong"));
    let ok = call(
        &svc,
        Method::GET,
        "/discovery/registry.json",
        &[("authorization", "Bearer s3cret")],
        Body::empty(),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK);
    let doc = ok.json();
    assert_eq!(doc["applications"][0]["instances"][0]["id"], "o-1");
    assert_eq!(doc["selfPreservation"], false);
    let page = call(
        &svc,
        Method::GET,
        "/discovery",
        &[("authorization", "Bearer s3cret")],
        Body::empty(),
    )
    .await;
    assert!(page.text().contains("o-1"));
}

#[tokio::test]
async fn the_dashboard_can_be_turned_off_or_opened() {
    let off = RegistryServer::new().dashboard(Dashboard::Off).service();
    let a = call(&off, Method::GET, "/discovery", &[], Body::empty()).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    let open = RegistryServer::new().dashboard(Dashboard::Open).service();
    let a = call(
        &open,
        Method::GET,
        "/discovery/registry.json",
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let svc = RegistryServer::new()
        .dashboard(Dashboard::token("s3cret"))
        .service();
    for auth in [
        "bearer s3cret",
        "BEARER s3cret",
        "Bearer  s3cret",
        "bEaReR\ts3cret",
    ] {
        let a = call(
            &svc,
            Method::GET,
            "/discovery/registry.json",
            &[("authorization", auth)],
            Body::empty(),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{auth:?}");
    }
    for auth in ["Basic s3cret", "Bearers3cret", "s3cret"] {
        let a = call(
            &svc,
            Method::GET,
            "/discovery/registry.json",
            &[("authorization", auth)],
            Body::empty(),
        )
        .await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{auth:?}");
    }
}

/// `/` is where a Spring Eureka server shows its dashboard: it leads to ours, unless the
/// dashboard is off.
#[tokio::test]
async fn the_root_redirects_to_the_dashboard_unless_it_is_off() {
    let svc = RegistryServer::new().dashboard(Dashboard::Open).service();
    let root = call(&svc, Method::GET, "/", &[], Body::empty()).await;
    assert_eq!(root.status, StatusCode::SEE_OTHER);
    assert_eq!(root.headers["location"], "/discovery");
    let page = call(&svc, Method::GET, "/discovery", &[], Body::empty()).await;
    assert_eq!(page.status, StatusCode::OK);

    let off = RegistryServer::new().dashboard(Dashboard::Off).service();
    let root = call(&off, Method::GET, "/", &[], Body::empty()).await;
    assert_eq!(root.status, StatusCode::NOT_FOUND);
}
