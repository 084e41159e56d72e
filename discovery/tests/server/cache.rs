//! `GET apps` and `GET apps/delta` from the response cache: gzipped for those who accept it,
//! current after every change, unchanged by heartbeats.

use std::io::Read as _;

use axum::body::Body;
use axum::http::{Method, StatusCode};
use cluster_discovery::server::{Clock, RegistryServer, Service};

use crate::support::{Answer, call, heartbeat, ids, register};

fn server() -> Service {
    RegistryServer::new()
        .clock(Clock::manual(1_000_000))
        .service()
}

async fn read(svc: &Service, path: &str, accept: &str, encoding: Option<&str>) -> Answer {
    let mut headers = vec![("accept", accept)];
    if let Some(e) = encoding {
        headers.push(("accept-encoding", e));
    }
    call(svc, Method::GET, path, &headers, Body::empty()).await
}

fn gunzip(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body)
        .read_to_end(&mut out)
        .expect("a gzip stream");
    out
}

#[tokio::test]
async fn both_documents_are_gzipped_for_clients_that_accept_it_and_plain_for_others() {
    let svc = server();
    for k in 0..50 {
        register(&svc, "orders", &format!("o-{k}")).await;
    }
    for path in ["/eureka/apps", "/eureka/apps/delta"] {
        for accept in ["application/json", "application/xml"] {
            let plain = read(&svc, path, accept, None).await;
            assert_eq!(plain.status, StatusCode::OK);
            assert!(!plain.headers.contains_key("content-encoding"));
            assert_eq!(plain.headers["vary"], "accept-encoding");
            let packed = read(&svc, path, accept, Some("gzip, deflate")).await;
            assert_eq!(packed.status, StatusCode::OK);
            assert_eq!(
                packed.headers["content-encoding"], "gzip",
                "{path} {accept}"
            );
            assert_eq!(packed.content_type(), plain.content_type());
            assert!(packed.body.len() * 5 < plain.body.len(), "{path} {accept}");
            assert_eq!(gunzip(&packed.body), plain.body.to_vec(), "{path} {accept}");
            let refused = read(&svc, path, accept, Some("gzip;q=0")).await;
            assert_eq!(refused.body, plain.body);
        }
    }
}

#[tokio::test]
async fn every_change_is_in_the_next_read_and_a_heartbeat_changes_nothing_served() {
    let svc = server();
    register(&svc, "orders", "o-1").await;
    let json = "application/json";
    let first = read(&svc, "/eureka/apps", json, None).await;
    assert_eq!(ids(&first.json()), ["o-1"]);

    // A heartbeat moves only the renewal timestamp, which the cache does not follow (as
    // Eureka's): the same payload, byte for byte.
    assert_eq!(heartbeat(&svc, "orders", "o-1").await, StatusCode::OK);
    assert_eq!(
        read(&svc, "/eureka/apps", json, None).await.body,
        first.body
    );

    register(&svc, "billing", "b-1").await;
    let apps = read(&svc, "/eureka/apps", json, Some("gzip")).await;
    let apps: serde_json::Value = serde_json::from_slice(&gunzip(&apps.body)).unwrap();
    assert_eq!(
        ids(&apps),
        ["b-1", "o-1"],
        "gzip is of the current version too"
    );

    let set = "/eureka/apps/ORDERS/o-1/status?value=OUT_OF_SERVICE";
    assert_eq!(
        call(&svc, Method::PUT, set, &[], Body::empty())
            .await
            .status,
        StatusCode::OK
    );
    let apps = read(&svc, "/eureka/apps", json, None).await.json();
    let statuses: Vec<_> = apps["applications"]["application"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["instance"][0]["status"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(statuses, ["UP", "OUT_OF_SERVICE"]);
    assert_eq!(
        apps["applications"]["apps__hashcode"],
        "OUT_OF_SERVICE_1_UP_1_"
    );

    let gone = "/eureka/apps/BILLING/b-1";
    assert_eq!(
        call(&svc, Method::DELETE, gone, &[], Body::empty())
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        ids(&read(&svc, "/eureka/apps", json, None).await.json()),
        ["o-1"]
    );
    let xml = read(&svc, "/eureka/apps", "application/xml", None).await;
    let xml = cluster_discovery::model::xml::read_applications(&xml.body, 0).unwrap();
    assert_eq!(xml.instances().count(), 1, "XML's payload follows too");

    let delta = read(&svc, "/eureka/apps/delta", json, None).await.json();
    let actions: Vec<_> = delta["applications"]["application"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|a| a["instance"].as_array().unwrap().clone())
        .map(|i| {
            format!(
                "{} {}",
                i["instanceId"].as_str().unwrap(),
                i["actionType"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(actions, ["b-1 DELETED", "o-1 MODIFIED"]);
}

/// The delta's window drops old changes with time alone, no write: the cached delta follows.
#[tokio::test]
async fn the_cached_delta_follows_its_window_as_it_ages() {
    let clock = Clock::manual(1_000_000);
    let svc = RegistryServer::new().clock(clock.clone()).service();
    register(&svc, "orders", "o-1").await;
    let json = "application/json";
    let delta = read(&svc, "/eureka/apps/delta", json, None).await.json();
    assert_eq!(ids(&delta), ["o-1"]);
    for _ in 0..3 {
        clock.advance(std::time::Duration::from_secs(60));
        assert_eq!(heartbeat(&svc, "orders", "o-1").await, StatusCode::OK);
    }
    clock.advance(std::time::Duration::from_secs(1));
    let delta = read(&svc, "/eureka/apps/delta", json, None).await.json();
    assert!(ids(&delta).is_empty(), "past 180 s: {delta}");
    assert_eq!(
        ids(&read(&svc, "/eureka/apps", json, None).await.json()),
        ["o-1"]
    );
}

/// Past 1,000 instances a payload is kept gzipped only: a reader that does not accept gzip
/// gets it inflated as it is sent, whole, with its length said (`Content-Length`), and the
/// same text as the gzip holds.
#[tokio::test]
async fn a_large_registry_is_read_whole_without_gzip_from_its_gzip() {
    let svc = server();
    for k in 0..1_001 {
        let app = format!("app-{}", k / 500);
        assert_eq!(
            register(&svc, &app, &format!("i-{k}")).await.status,
            StatusCode::NO_CONTENT
        );
    }
    for accept in ["application/json", "application/xml"] {
        let packed = read(&svc, "/eureka/apps", accept, Some("gzip")).await;
        let plain = read(&svc, "/eureka/apps", accept, None).await;
        assert_eq!(plain.status, StatusCode::OK);
        assert!(!plain.headers.contains_key("content-encoding"));
        assert_eq!(
            plain.headers["content-length"],
            plain.body.len().to_string(),
            "{accept}"
        );
        assert!(plain.body.len() > 500_000, "{accept}: the whole registry");
        assert_eq!(gunzip(&packed.body), plain.body.to_vec(), "{accept}");
    }
}
