//! Malformed documents, mismatched or unknown applications, huge bodies: a clear 4xx, and the
//! registry unchanged.

use axum::body::Body;
use axum::http::{Method, StatusCode};
use cluster_discovery::server::{RegistryServer, ServerConfig, Service};

use crate::support::{call, get_json, register};

fn server() -> Service {
    let mut config = ServerConfig::default();
    config.limits.max_body_bytes = 64 * 1024;
    RegistryServer::new().config(config).service()
}

async fn registry(svc: &Service) -> String {
    // Without the lease timestamps, which move with every read.
    let doc = get_json(svc, "/eureka/apps").await.json();
    format!(
        "{} {}",
        doc["applications"]["apps__hashcode"],
        crate::support::ids(&doc).join(",")
    )
}

async fn refused(svc: &Service, content_type: &str, body: impl Into<Body>) -> (StatusCode, String) {
    let a = call(
        svc,
        Method::POST,
        "/eureka/apps/ORDERS",
        &[("content-type", content_type)],
        body,
    )
    .await;
    (a.status, a.text())
}

#[tokio::test]
async fn malformed_json_and_xml_are_400_with_a_reason_and_change_nothing() {
    let svc = server();
    register(&svc, "orders", "o-1").await;
    let before = registry(&svc).await;
    let cases: [(&str, &str, &str); 7] = [
        ("application/json", "{\"instance\": {", "malformed JSON"),
        ("application/json", "[1,2,3]", "unexpected document"),
        (
            "application/json",
            r#"{"instance":{"app":"ORDERS","hostName":"h","ipAddr":"1.1.1.1","port":{"$":"eighty"}}}"#,
            "port",
        ),
        (
            "application/xml",
            "<instance><app>ORDERS</app>",
            "malformed XML",
        ),
        ("application/xml", "<applications/>", "not <instance>"),
        (
            "application/json",
            r#"{"instance":{"app":"ORDERS","ipAddr":"1.1.1.1"}}"#,
            "Missing hostname",
        ),
        (
            "application/json",
            r#"{"instance":{"app":"BILLING","hostName":"h","ipAddr":"1.1.1.1"}}"#,
            "Mismatched appName",
        ),
    ];
    for (ct, body, reason) in cases {
        let (status, text) = refused(&svc, ct, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(text.contains(reason), "{body}: {text}");
    }
    let (status, text) = refused(&svc, "application/json", "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(text.contains("empty"), "{text}");
    assert_eq!(registry(&svc).await, before);
}

#[tokio::test]
async fn a_huge_body_is_413_and_changes_nothing() {
    let svc = server();
    let before = registry(&svc).await;
    let huge = format!(
        r#"{{"instance":{{"app":"ORDERS","hostName":"h","ipAddr":"1.1.1.1","metadata":{{"x":"{}"}}}}}}"#,
        "a".repeat(100 * 1024)
    );
    let (status, text) = refused(&svc, "application/json", huge).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{text}");
    assert!(text.contains("length limit"), "{text}");
    assert_eq!(registry(&svc).await, before);
}

#[tokio::test]
async fn unknown_apps_and_instances_are_404_and_bad_statuses_400() {
    let svc = server();
    register(&svc, "orders", "o-1").await;
    let before = registry(&svc).await;
    for (method, path) in [
        (Method::PUT, "/eureka/apps/NOPE/o-1"),
        (Method::DELETE, "/eureka/apps/NOPE/o-1"),
        (Method::PUT, "/eureka/apps/NOPE/o-1/status?value=DOWN"),
        (Method::DELETE, "/eureka/apps/NOPE/o-1/status"),
        (Method::PUT, "/eureka/apps/NOPE/o-1/metadata?a=b"),
        (Method::GET, "/eureka/apps/NOPE"),
    ] {
        let a = call(&svc, method.clone(), path, &[], Body::empty()).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{method} {path}");
    }
    for path in [
        "/eureka/apps/ORDERS/o-1/status?value=SLEEPING",
        "/eureka/apps/ORDERS/o-1/status",
    ] {
        let a = call(&svc, Method::PUT, path, &[], Body::empty()).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{path}");
        assert!(!a.text().is_empty());
    }
    let batch = call(
        &svc,
        Method::POST,
        "/eureka/peerreplication/batch/",
        &[("content-type", "application/json")],
        "{\"replicationList\": 3}",
    )
    .await;
    assert_eq!(batch.status, StatusCode::BAD_REQUEST);
    assert_eq!(registry(&svc).await, before);
}

/// Text XML cannot carry, accepted once, would break every XML read of the registry (the
/// Python client reads nothing else): refused at the door, in either input format.
#[tokio::test]
async fn characters_xml_cannot_carry_are_refused_with_400_and_change_nothing() {
    let svc = server();
    register(&svc, "orders", "o-1").await;
    let before = registry(&svc).await;
    let json_bodies = [
        (
            r#"{"instance":{"app":"ORDERS","instanceId":"evil","hostName":"h\u0001","ipAddr":"1.1.1.1"}}"#,
            "hostName",
        ),
        (
            r#"{"instance":{"app":"ORDERS","instanceId":"evil","hostName":"h","ipAddr":"1.1.1.1","metadata":{"k":"v\u0000"}}}"#,
            "metadata.k",
        ),
    ];
    for (body, field) in json_bodies {
        let (status, text) = refused(&svc, "application/json", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(text.contains(field) && text.contains("XML"), "{text}");
    }
    let xml = "<instance><instanceId>evil</instanceId><hostName>h</hostName><app>ORDERS</app>\
               <ipAddr>1.1.1.1</ipAddr><metadata><k>v&#1;</k></metadata></instance>";
    let (status, text) = refused(&svc, "application/xml", xml).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");

    let meta = call(
        &svc,
        Method::PUT,
        "/eureka/apps/ORDERS/o-1/metadata?ok=1&k=v%00",
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(meta.status, StatusCode::BAD_REQUEST);
    assert!(meta.text().contains("metadata.k"), "{}", meta.text());
    let o1 = get_json(&svc, "/eureka/apps/ORDERS/o-1").await.json();
    assert!(
        o1["instance"]["metadata"].get("ok").is_none(),
        "no pair applied"
    );

    assert_eq!(registry(&svc).await, before);
    let xml_read = call(&svc, Method::GET, "/eureka/apps", &[], Body::empty()).await;
    assert_eq!(xml_read.status, StatusCode::OK);
    cluster_discovery::model::xml::read_applications(&xml_read.body, 0)
        .expect("the XML registry still reads");
}

fn instance_with(extra: &str) -> String {
    format!(
        r#"{{"instance":{{"app":"ORDERS","instanceId":"n","hostName":"h","ipAddr":"1.1.1.1",{extra}}}}}"#
    )
}

/// Numbers Eureka holds as Java `int`s, out of range, are refused rather than saturated: a
/// lease of 2^63 s would never end, and a `countryId` past `i32::MAX` breaks Java readers.
#[tokio::test]
async fn numbers_out_of_their_java_range_are_400_not_saturated() {
    let svc = server();
    register(&svc, "orders", "o-1").await;
    let before = registry(&svc).await;
    let json = [
        (
            r#""leaseInfo":{"durationInSecs":9223372036854775808}"#,
            "durationInSecs",
        ),
        (
            r#""leaseInfo":{"durationInSecs":2147483648}"#,
            "durationInSecs",
        ),
        (r#""leaseInfo":{"durationInSecs":-5}"#, "durationInSecs"),
        (
            r#""leaseInfo":{"renewalIntervalInSecs":"9223372036854775807"}"#,
            "renewalIntervalInSecs",
        ),
        (r#""countryId":1099511627776"#, "countryId"),
        (r#""countryId":"2147483648""#, "countryId"),
        (r#""port":{"$":-1,"@enabled":"true"}"#, "port"),
        (r#""port":{"$":"-1","@enabled":"true"}"#, "port"),
        (r#""port":65536"#, "port"),
        (r#""securePort":{"$":4294967296}"#, "securePort"),
        (r#""port":{"$":80.5}"#, "port"),
    ];
    for (extra, field) in json {
        let (status, text) = refused(&svc, "application/json", instance_with(extra)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra}: {text}");
        assert!(text.contains(field), "{extra}: {text}");
    }
    let xml = [
        r#"<port enabled="true">-1</port>"#,
        "<countryId>1099511627776</countryId>",
        "<leaseInfo><durationInSecs>9223372036854775808</durationInSecs></leaseInfo>",
    ];
    for extra in xml {
        let body = format!(
            "<instance><instanceId>n</instanceId><hostName>h</hostName><app>ORDERS</app>\
             <ipAddr>1.1.1.1</ipAddr>{extra}</instance>"
        );
        let (status, text) = refused(&svc, "application/xml", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra}: {text}");
    }
    assert_eq!(registry(&svc).await, before);

    // The largest Java int is fine, and kept as given (up to the lease limit).
    let edge = instance_with(r#""countryId":2147483647,"port":{"$":65535,"@enabled":"true"}"#);
    let (status, text) = refused(&svc, "application/json", edge).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{text}");
    let n = get_json(&svc, "/eureka/apps/ORDERS/n").await.json();
    assert_eq!(n["instance"]["countryId"], 2147483647);
    assert_eq!(n["instance"]["port"]["$"], 65535);
}

/// A metadata key that cannot be an XML element would reach JSON clients and not XML ones:
/// refused, at registration and in a metadata update, so both formats carry the same map.
#[tokio::test]
async fn metadata_keys_xml_cannot_name_are_400_so_both_formats_agree() {
    let svc = server();
    register(&svc, "orders", "o-1").await;
    let before = registry(&svc).await;
    for key in ["with space", "1st", "a:b", "xmlns"] {
        let extra = format!(r#""metadata":{{"ok":"1","{key}":"v"}}"#);
        let (status, text) = refused(&svc, "application/json", instance_with(&extra)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{key}: {text}");
        assert!(text.contains(key) && text.contains("XML"), "{text}");
    }
    let extra = r#""dataCenterInfo":{"name":"MyOwn","metadata":{"a b":"v"}}"#;
    let (status, _) = refused(&svc, "application/json", instance_with(extra)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let update = call(
        &svc,
        Method::PUT,
        "/eureka/apps/ORDERS/o-1/metadata?ok=1&with%20space=v",
        &[],
        Body::empty(),
    )
    .await;
    assert_eq!(update.status, StatusCode::BAD_REQUEST, "{}", update.text());
    assert_eq!(registry(&svc).await, before);

    // What is accepted reads the same in both formats, `_` and `$` included.
    let extra = r#""metadata":{"zone_name":"a","cost$":"2","management.port":"9"}"#;
    let (status, text) = refused(&svc, "application/json", instance_with(extra)).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{text}");
    let json = get_json(&svc, "/eureka/apps/ORDERS/n").await.json();
    let xml = call(
        &svc,
        Method::GET,
        "/eureka/apps/ORDERS/n",
        &[],
        Body::empty(),
    )
    .await;
    let from_xml = cluster_discovery::model::xml::read_instance(&xml.body, 0).unwrap();
    let from_json: std::collections::BTreeMap<String, String> =
        serde_json::from_value(json["instance"]["metadata"].clone()).unwrap();
    assert_eq!(from_xml.metadata, from_json);
    assert_eq!(from_json.len(), 3);
}
