//! Eureka's routes, status codes and shapes, as its clients expect them.

use axum::body::Body;
use axum::http::{Method, StatusCode};
use cluster_discovery::server::{Clock, RegistryServer};

use crate::support::{call, get_json, heartbeat, ids, register};

fn server() -> cluster_discovery::server::Service {
    RegistryServer::new()
        .clock(Clock::manual(1_000_000))
        .service()
}

#[tokio::test]
async fn register_is_204_with_an_empty_body_under_both_prefixes_and_with_trailing_slashes() {
    let svc = server();
    let a = register(&svc, "orders", "o-1").await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    assert!(a.body.is_empty());
    let b = call(
        &svc,
        Method::POST,
        "/eureka/v2/apps/ORDERS/",
        &[("content-type", "application/json")],
        crate::support::js_body("orders", "o-2", 81),
    )
    .await;
    assert_eq!(b.status, StatusCode::NO_CONTENT);
    let all = get_json(&svc, "/eureka/v2/apps/").await;
    assert_eq!(ids(&all.json()), ["o-1", "o-2"]);
    assert_eq!(all.json()["applications"]["apps__hashcode"], "UP_2_");
    assert_eq!(all.json()["applications"]["versions__delta"], "1");
}

#[tokio::test]
async fn heartbeat_is_200_empty_and_404_empty_when_unknown() {
    let svc = server();
    register(&svc, "orders", "o-1").await;
    let ok = call(
        &svc,
        Method::PUT,
        "/eureka/apps/orders/o-1?status=UP",
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK);
    assert!(ok.body.is_empty());
    let unknown = call(
        &svc,
        Method::PUT,
        "/eureka/apps/orders/o-9",
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert!(
        unknown.body.is_empty(),
        "a 404 body breaks the Java clients"
    );
    // The client holds newer information than the server (1 ms newer than the registration,
    // on this clock): it must re-register.
    let newer = call(
        &svc,
        Method::PUT,
        "/eureka/apps/orders/o-1?lastDirtyTimestamp=1000001",
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(newer.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn json_only_when_accept_asks_for_it_and_arrays_are_always_arrays() {
    let svc = server();
    let empty = get_json(&svc, "/eureka/apps").await;
    assert_eq!(
        empty.text(),
        r#"{"applications":{"versions__delta":"1","apps__hashcode":"","application":[]}}"#
    );
    register(&svc, "orders", "o-1").await;
    let xml = call(&svc, Method::GET, "/eureka/apps/", &[], Body::empty()).await;
    assert_eq!(xml.content_type(), "application/xml");
    assert!(
        xml.text()
            .starts_with("<applications><versions__delta>1</versions__delta>")
    );
    let star = call(
        &svc,
        Method::GET,
        "/eureka/apps/",
        &[("accept", "*/*")],
        Body::empty(),
    )
    .await;
    assert_eq!(star.content_type(), "application/xml");
    let json = get_json(&svc, "/eureka/apps/ORDERS").await;
    assert_eq!(json.content_type(), "application/json");
    let app = json.json();
    assert!(
        app["application"]["instance"].is_array(),
        "one instance is still an array"
    );
    let i = &app["application"]["instance"][0];
    assert_eq!(
        i["port"],
        serde_json::json!({"$": 8080, "@enabled": "true"})
    );
    assert_eq!(i["leaseInfo"]["durationInSecs"], 90);
    assert_eq!(i["leaseInfo"]["renewalIntervalInSecs"], 30);
    assert_eq!(
        i["securePort"]["$"], 7002,
        "Eureka's default for a missing securePort"
    );
    assert!(i["lastDirtyTimestamp"].is_string());
}

#[tokio::test]
async fn reads_by_instance_id_vip_and_secure_vip() {
    let svc = server();
    register(&svc, "orders", "o-1").await;
    register(&svc, "billing", "b-1").await;
    let one = get_json(&svc, "/eureka/apps/ORDERS/o-1").await;
    assert_eq!(one.json()["instance"]["instanceId"], "o-1");
    let by_id = get_json(&svc, "/eureka/instances/b-1").await;
    assert_eq!(by_id.json()["instance"]["app"], "BILLING");
    let vip = get_json(&svc, "/eureka/vips/orders").await.json();
    assert_eq!(ids(&vip), ["o-1"]);
    assert_eq!(vip["applications"]["versions__delta"], "-1");
    let none = get_json(&svc, "/eureka/svips/orders").await;
    assert_eq!(
        none.status,
        StatusCode::OK,
        "an unknown VIP is an empty list, as Eureka's code"
    );
    assert!(ids(&none.json()).is_empty());
    for path in [
        "/eureka/apps/NOPE",
        "/eureka/apps/ORDERS/nope",
        "/eureka/instances/nope",
    ] {
        let a = get_json(&svc, path).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{path}");
        assert!(a.body.is_empty());
    }
}

#[tokio::test]
async fn delta_shows_changes_with_the_hashcode_of_the_whole_registry() {
    let svc = server();
    register(&svc, "orders", "o-1").await;
    register(&svc, "orders", "o-2").await;
    heartbeat(&svc, "orders", "o-1").await;
    call(
        &svc,
        Method::PUT,
        "/eureka/apps/orders/o-2/status?value=OUT_OF_SERVICE",
        &[],
        Body::empty(),
    )
    .await;
    call(
        &svc,
        Method::DELETE,
        "/eureka/apps/orders/o-1",
        &[],
        Body::empty(),
    )
    .await;
    let delta = get_json(&svc, "/eureka/apps/delta").await.json();
    let actions: Vec<(String, String)> = delta["applications"]["application"][0]["instance"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["instanceId"].as_str().unwrap().to_owned(),
                i["actionType"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    // The latest change of each instance (a client applying them all ends up the same).
    let expected = [("o-2", "MODIFIED"), ("o-1", "DELETED")];
    assert_eq!(
        actions,
        expected.map(|(a, b)| (a.to_owned(), b.to_owned())),
        "heartbeats are not changes"
    );
    assert_eq!(delta["applications"]["apps__hashcode"], "OUT_OF_SERVICE_1_");
    assert_eq!(delta["applications"]["versions__delta"], "4");
}

#[tokio::test]
async fn status_override_then_removal_without_a_status_makes_the_next_heartbeat_404() {
    let svc = server();
    register(&svc, "orders", "o-1").await;
    let set = call(
        &svc,
        Method::PUT,
        "/eureka/apps/orders/o-1/status?value=OUT_OF_SERVICE",
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(set.status, StatusCode::OK);
    let i = get_json(&svc, "/eureka/apps/ORDERS/o-1").await.json();
    assert_eq!(i["instance"]["status"], "OUT_OF_SERVICE");
    assert_eq!(i["instance"]["overriddenStatus"], "OUT_OF_SERVICE");
    // A re-registration does not undo an operator's override.
    register(&svc, "orders", "o-1").await;
    let i = get_json(&svc, "/eureka/apps/ORDERS/o-1").await.json();
    assert_eq!(i["instance"]["status"], "OUT_OF_SERVICE");
    let overrides = get_json(&svc, "/eureka/serverinfo/statusoverrides")
        .await
        .json();
    assert_eq!(overrides["o-1"], "OUT_OF_SERVICE");

    let removed = call(
        &svc,
        Method::DELETE,
        "/eureka/apps/orders/o-1/status",
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(removed.status, StatusCode::OK);
    assert_eq!(
        heartbeat(&svc, "orders", "o-1").await,
        StatusCode::NOT_FOUND
    );
    register(&svc, "orders", "o-1").await;
    assert_eq!(heartbeat(&svc, "orders", "o-1").await, StatusCode::OK);
    let i = get_json(&svc, "/eureka/apps/ORDERS/o-1").await.json();
    assert_eq!(i["instance"]["status"], "UP");

    let unknown = call(
        &svc,
        Method::PUT,
        "/eureka/apps/orders/o-9/status?value=UP",
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn metadata_update_merges_pairs_first_value_wins() {
    let svc = server();
    register(&svc, "orders", "o-1").await;
    let a = call(
        &svc,
        Method::PUT,
        "/eureka/apps/orders/o-1/metadata?zone=a&zone=b&team=x",
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    let i = get_json(&svc, "/eureka/apps/ORDERS/o-1").await.json();
    assert_eq!(
        i["instance"]["metadata"],
        serde_json::json!({"team": "x", "zone": "a"})
    );
    let missing = call(
        &svc,
        Method::PUT,
        "/eureka/apps/orders/o-9/metadata?a=b",
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn cancel_is_200_then_404() {
    let svc = server();
    register(&svc, "orders", "o-1").await;
    let del = |svc| {
        call(
            svc,
            Method::DELETE,
            "/eureka/apps/orders/o-1",
            &[],
            Body::empty(),
        )
    };
    assert_eq!(del(&svc).await.status, StatusCode::OK);
    assert_eq!(del(&svc).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn an_xml_registration_is_read_like_a_json_one() {
    let svc = server();
    let body = r#"<instance><instanceId>x-1</instanceId><hostName>h</hostName><app>XAPP</app><ipAddr>10.0.0.5</ipAddr><status>UP</status><port enabled="true">9000</port><dataCenterInfo class="com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo"><name>MyOwn</name></dataCenterInfo><metadata><zone__name>a</zone__name></metadata></instance>"#;
    let a = call(
        &svc,
        Method::POST,
        "/eureka/apps/XAPP",
        &[("content-type", "application/xml")],
        body,
    )
    .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT, "{}", a.text());
    let i = get_json(&svc, "/eureka/apps/XAPP/x-1").await.json();
    assert_eq!(i["instance"]["port"]["$"], 9000);
    assert_eq!(i["instance"]["metadata"]["zone_name"], "a");
}

#[tokio::test]
async fn a_404_on_the_status_route_leaves_the_override_of_the_same_id_elsewhere_alone() {
    let svc = server();
    register(&svc, "A", "x").await;
    let set = "/eureka/apps/A/x/status?value=OUT_OF_SERVICE";
    let a = call(&svc, Method::PUT, set, &[], Body::empty()).await;
    assert_eq!(a.status, StatusCode::OK);
    for method in [Method::PUT, Method::DELETE] {
        let typo = "/eureka/apps/TYPO/x/status?value=UP";
        let a = call(&svc, method.clone(), typo, &[], Body::empty()).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{method}");
        let overrides = get_json(&svc, "/eureka/serverinfo/statusoverrides").await;
        assert_eq!(
            overrides.json(),
            serde_json::json!({"x": "OUT_OF_SERVICE"}),
            "{method}"
        );
    }
    // The override still wins over the status of a re-registration.
    register(&svc, "A", "x").await;
    let x = get_json(&svc, "/eureka/apps/A/x").await.json();
    assert_eq!(x["instance"]["status"], "OUT_OF_SERVICE");
}

#[tokio::test]
async fn the_delta_keeps_only_the_latest_change_of_each_instance() {
    let svc = server();
    register(&svc, "A", "x").await;
    register(&svc, "A", "y").await;
    for k in 0..100 {
        let path = format!("/eureka/apps/A/x/metadata?n={k}");
        let a = call(&svc, Method::PUT, &path, &[], Body::empty()).await;
        assert_eq!(a.status, StatusCode::OK);
    }
    let delta = get_json(&svc, "/eureka/apps/delta").await.json();
    let entries = delta["applications"]["application"][0]["instance"]
        .as_array()
        .unwrap()
        .clone();
    let order: Vec<&str> = entries
        .iter()
        .map(|i| i["instanceId"].as_str().unwrap())
        .collect();
    assert_eq!(
        order,
        ["y", "x"],
        "one entry each, in the order of their last change"
    );
    assert_eq!(entries[1]["metadata"]["n"], "99");
    assert_eq!(
        delta["applications"]["versions__delta"], "102",
        "the version still counts every change"
    );
}

/// An instance id is unique within its application only: an override set on `APPA/x` is
/// `APPA/x`'s, and goes with its cancel.
#[tokio::test]
async fn an_override_belongs_to_one_application_s_instance_and_goes_with_its_cancel() {
    let svc = server();
    register(&svc, "APPA", "x").await;
    register(&svc, "APPB", "x").await;
    let set = "/eureka/apps/APPA/x/status?value=OUT_OF_SERVICE";
    let a = call(&svc, Method::PUT, set, &[], Body::empty()).await;
    assert_eq!(a.status, StatusCode::OK);
    let b = get_json(&svc, "/eureka/apps/APPB/x").await.json();
    assert_eq!(b["instance"]["status"], "UP", "APPB/x is not overridden");
    assert_eq!(heartbeat(&svc, "APPB", "x").await, StatusCode::OK);
    register(&svc, "APPB", "x").await;
    let b = get_json(&svc, "/eureka/apps/APPB/x").await.json();
    assert_eq!(b["instance"]["status"], "UP", "nor after re-registering");

    let gone = call(
        &svc,
        Method::DELETE,
        "/eureka/apps/APPA/x",
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(gone.status, StatusCode::OK);
    let overrides = get_json(&svc, "/eureka/serverinfo/statusoverrides").await;
    assert_eq!(overrides.json(), serde_json::json!({}), "cancelled with it");
    register(&svc, "APPA", "x").await;
    let a = get_json(&svc, "/eureka/apps/APPA/x").await.json();
    assert_eq!(
        a["instance"]["status"], "UP",
        "a new APPA/x starts without it"
    );
}
