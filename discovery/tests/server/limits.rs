//! Numbers and sizes from the wire, on a real server: leases of 0 or `u64::MAX` seconds,
//! timestamps years ahead, huge counts, and the caps on what a client can make the server hold
//! (applications, instances, metadata, batches, the delta window, a peer's queue).

use std::time::Duration;

use cluster_discovery::server::{Clock, Limits, RunningServer, ServerConfig};
use reqwest::{Method, StatusCode};

/// 2021-01-01, on a clock that only moves when told.
const NOW: u64 = 1_609_459_200_000;

fn config(limits: Limits) -> ServerConfig {
    let mut config = ServerConfig::default();
    config.warm_up = false;
    config.peer_timeout = Duration::from_secs(10);
    config.limits = limits;
    config
}

async fn start(clock: &Clock, limits: Limits) -> RunningServer {
    crate::support::open_server()
        .clock(clock.clone())
        .config(config(limits))
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

/// A request, its status and body.
async fn send(
    server: &RunningServer,
    method: Method,
    path: &str,
    body: Option<String>,
) -> (StatusCode, String) {
    let mut req = reqwest::Client::new()
        .request(method, format!("{}{path}", server.url()))
        .header("accept", "application/json");
    if let Some(body) = body {
        req = req.header("content-type", "application/json").body(body);
    }
    let r = req.send().await.unwrap();
    (r.status(), r.text().await.unwrap())
}

/// A registration of `id` in `app`, with these fields merged into the instance.
fn body(app: &str, id: &str, extra: serde_json::Value) -> String {
    let mut doc: serde_json::Value =
        serde_json::from_str(&crate::support::js_body(app, id, 8080)).unwrap();
    if let (Some(i), serde_json::Value::Object(extra)) = (doc["instance"].as_object_mut(), extra) {
        i.extend(extra);
    }
    doc.to_string()
}

async fn register(
    server: &RunningServer,
    app: &str,
    id: &str,
    extra: serde_json::Value,
) -> (StatusCode, String) {
    send(
        server,
        Method::POST,
        &format!("apps/{app}"),
        Some(body(app, id, extra)),
    )
    .await
}

async fn instance(server: &RunningServer, app: &str, id: &str) -> serde_json::Value {
    let (status, text) = send(server, Method::GET, &format!("apps/{app}/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["instance"].clone()
}

async fn ids(server: &RunningServer) -> Vec<String> {
    let (_, text) = send(server, Method::GET, "apps/", None).await;
    crate::support::ids(&serde_json::from_str(&text).unwrap())
}

#[tokio::test]
async fn a_lease_of_zero_or_of_a_java_int_s_seconds_is_kept_in_range_and_still_expires() {
    let clock = Clock::manual(NOW);
    let server = start(&clock, Limits::default()).await;
    let leases = [
        (
            "zero",
            serde_json::json!({"renewalIntervalInSecs": 0, "durationInSecs": 0}),
            30,
            90,
        ),
        (
            "max",
            serde_json::json!({"renewalIntervalInSecs": i32::MAX, "durationInSecs": i32::MAX}),
            86_400,
            86_400,
        ),
        (
            "string",
            serde_json::json!({"durationInSecs": "2147483647"}),
            30,
            86_400,
        ),
    ];
    for (id, lease, interval, duration) in &leases {
        let (status, text) = register(
            &server,
            "orders",
            id,
            serde_json::json!({"leaseInfo": lease}),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{id}: {text}");
        let i = instance(&server, "orders", id).await;
        assert_eq!(i["leaseInfo"]["renewalIntervalInSecs"], *interval, "{id}");
        assert_eq!(i["leaseInfo"]["durationInSecs"], *duration, "{id}");
    }
    // Past a Java int, negative or not whole: refused, never saturated into a lease.
    for lease in [
        serde_json::json!({"durationInSecs": u64::MAX}),
        serde_json::json!({"durationInSecs": "18446744073709551615"}),
        serde_json::json!({"durationInSecs": 1e300}),
        serde_json::json!({"durationInSecs": -5}),
        serde_json::json!({"renewalIntervalInSecs": u64::MAX}),
    ] {
        let body = serde_json::json!({"leaseInfo": lease});
        let (status, text) = register(&server, "orders", "refused", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{lease}: {text}");
    }
    clock.advance(Duration::from_secs(86_400));
    assert_eq!(
        ids(&server).await,
        ["max", "string"],
        "a day: only the longest leases left"
    );
    clock.advance(Duration::from_millis(1));
    assert!(
        ids(&server).await.is_empty(),
        "no lease outlives a day: none is immortal"
    );
}

#[tokio::test]
async fn a_timestamp_years_ahead_is_400_with_the_reason_and_changes_nothing() {
    let clock = Clock::manual(NOW);
    let server = start(&clock, Limits::default()).await;
    let (status, _) = register(&server, "orders", "o-1", serde_json::json!({})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let before = instance(&server, "orders", "o-1").await;

    let (status, text) = register(
        &server,
        "orders",
        "o-1",
        serde_json::json!({"lastDirtyTimestamp": u64::MAX, "port": {"$": 9999}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(text.contains("ahead of this server's clock"), "{text}");
    let far = u64::MAX.to_string();
    for (method, path) in [
        (
            Method::PUT,
            format!("apps/ORDERS/o-1?lastDirtyTimestamp={far}"),
        ),
        (
            Method::PUT,
            format!("apps/ORDERS/o-1/status?value=DOWN&lastDirtyTimestamp={far}"),
        ),
        (
            Method::DELETE,
            format!("apps/ORDERS/o-1/status?lastDirtyTimestamp={far}"),
        ),
    ] {
        let (status, text) = send(&server, method.clone(), &path, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}");
        assert!(text.contains("ahead"), "{text}");
    }
    let after = instance(&server, "orders", "o-1").await;
    assert_eq!(after["port"], before["port"]);
    assert_eq!(after["status"], "UP");
    assert_eq!(after["lastDirtyTimestamp"], before["lastDirtyTimestamp"]);

    // Within a day ahead is a clock a little fast: taken. Not a number at all: ignored, as before.
    let soon = NOW + 3_600_000;
    let (status, _) = register(
        &server,
        "orders",
        "o-1",
        serde_json::json!({"lastDirtyTimestamp": soon}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let overflowing = "apps/ORDERS/o-1?lastDirtyTimestamp=99999999999999999999999";
    assert_eq!(
        send(&server, Method::PUT, overflowing, None).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn numbers_out_of_range_are_refused_never_a_panic() {
    let clock = Clock::manual(NOW);
    let server = start(&clock, Limits::default()).await;
    let (status, text) = register(
        &server,
        "orders",
        "o-1",
        serde_json::json!({"countryId": u64::MAX}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "not an int to Java");
    assert!(text.contains("countryId"), "{text}");
    let (status, _) = register(&server, "orders", "o-1", serde_json::json!({})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    for port in [
        serde_json::json!(70_000),
        serde_json::json!(-1),
        serde_json::json!({"$": u64::MAX}),
    ] {
        let (status, text) =
            register(&server, "orders", "o-2", serde_json::json!({"port": port})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{port}: {text}");
    }
    // Big numbers where a server reads counts and timestamps from a batch.
    let batch = serde_json::json!({"replicationList": [
        {"appName": "ORDERS", "id": "o-1", "action": "Heartbeat", "lastDirtyTimestamp": u64::MAX},
        {"appName": "ORDERS", "id": "o-1", "action": "Heartbeat", "lastDirtyTimestamp": "1e400"},
        {"appName": "ORDERS", "id": "o-1", "action": "Register", "instanceInfo":
            {"app": "ORDERS", "instanceId": "o-1", "hostName": "h", "ipAddr": "1.1.1.1",
             "leaseInfo": {"durationInSecs": u64::MAX}, "lastDirtyTimestamp": u64::MAX}},
    ]});
    let (status, text) = send(
        &server,
        Method::POST,
        "peerreplication/batch/",
        Some(batch.to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let codes: Vec<u64> = serde_json::from_str::<serde_json::Value>(&text).unwrap()["responseList"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["statusCode"].as_u64().unwrap())
        .collect();
    assert_eq!(
        codes,
        [400, 200, 400],
        "a timestamp ahead refused per item; an unreadable one ignored"
    );
    assert_eq!(
        instance(&server, "orders", "o-1").await["hostName"],
        "127.0.0.1"
    );
}

#[tokio::test]
async fn the_registry_is_capped_per_application_in_applications_and_in_all_429_past_it() {
    let clock = Clock::manual(NOW);
    let mut limits = Limits::default();
    limits.max_apps = 2;
    limits.max_instances_per_app = 2;
    limits.max_instances = 3;
    let server = start(&clock, limits).await;
    let ok = StatusCode::NO_CONTENT;
    assert_eq!(
        register(&server, "a", "a-1", serde_json::json!({})).await.0,
        ok
    );
    assert_eq!(
        register(&server, "a", "a-2", serde_json::json!({})).await.0,
        ok
    );
    let (status, text) = register(&server, "a", "a-3", serde_json::json!({})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        text.contains("instances of this application") && text.contains("--max-instances-per-app"),
        "{text}"
    );
    assert_eq!(
        register(&server, "b", "b-1", serde_json::json!({})).await.0,
        ok
    );
    let (status, text) = register(&server, "b", "b-2", serde_json::json!({})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(text.contains("--max-instances"), "{text}");
    assert_eq!(
        register(&server, "a", "a-1", serde_json::json!({})).await.0,
        ok,
        "re-registering always works"
    );
    assert_eq!(
        send(&server, Method::DELETE, "apps/A/a-2", None).await.0,
        StatusCode::OK
    );
    let (status, text) = register(&server, "c", "c-1", serde_json::json!({})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        text.contains("applications") && text.contains("--max-apps"),
        "{text}"
    );
    assert_eq!(
        register(&server, "b", "b-2", serde_json::json!({})).await.0,
        ok,
        "room again"
    );
    assert_eq!(ids(&server).await, ["a-1", "b-1", "b-2"]);

    // A replicated registration meets the same caps.
    let batch = serde_json::json!({"replicationList": [{"appName": "C", "id": "c-1", "action": "Register",
        "instanceInfo": serde_json::from_str::<serde_json::Value>(&body("c", "c-1", serde_json::json!({}))).unwrap()}]});
    let (_, text) = send(
        &server,
        Method::POST,
        "peerreplication/batch/",
        Some(batch.to_string()),
    )
    .await;
    assert!(text.contains("\"statusCode\":429"), "{text}");
    assert_eq!(ids(&server).await.len(), 3);
}

#[tokio::test]
async fn metadata_and_text_past_their_limits_are_413_in_a_registration_or_an_update() {
    let clock = Clock::manual(NOW);
    let mut limits = Limits::default();
    limits.max_metadata_entries = 4;
    limits.max_instance_bytes = 2_048;
    let server = start(&clock, limits).await;
    let five: serde_json::Map<String, serde_json::Value> =
        (0..5).map(|k| (format!("k{k}"), "v".into())).collect();
    let (status, text) = register(
        &server,
        "orders",
        "o-1",
        serde_json::json!({"metadata": five}),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(text.contains("5 metadata entries, at most 4"), "{text}");
    let (status, text) = register(
        &server,
        "orders",
        "o-1",
        serde_json::json!({"metadata": {"k": "x".repeat(3_000)}}),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(text.contains("bytes of text"), "{text}");
    let (status, _) = register(
        &server,
        "orders",
        "o-1",
        serde_json::json!({"metadata": {"k0": "v"}}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    let (status, _) = send(
        &server,
        Method::PUT,
        "apps/ORDERS/o-1/metadata?k1=v&k2=v&k3=v",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "4 entries: at the limit");
    let (status, text) = send(&server, Method::PUT, "apps/ORDERS/o-1/metadata?k4=v", None).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{text}");
    let (status, _) = send(
        &server,
        Method::PUT,
        &format!("apps/ORDERS/o-1/metadata?k1={}", "x".repeat(3_000)),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let meta = instance(&server, "orders", "o-1").await["metadata"].clone();
    assert_eq!(
        meta,
        serde_json::json!({"k0": "v", "k1": "v", "k2": "v", "k3": "v"}),
        "nothing applied"
    );
}

#[tokio::test]
async fn a_batch_of_more_items_than_the_limit_is_413_and_applies_nothing() {
    let clock = Clock::manual(NOW);
    let mut limits = Limits::default();
    limits.max_batch_items = 3;
    let server = start(&clock, limits).await;
    register(&server, "orders", "o-1", serde_json::json!({})).await;
    let items: Vec<_> = (0..4)
        .map(|_| serde_json::json!({"appName": "ORDERS", "id": "o-1", "action": "Cancel"}))
        .collect();
    let batch = serde_json::json!({ "replicationList": items }).to_string();
    let (status, text) = send(&server, Method::POST, "peerreplication/batch/", Some(batch)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(text.contains("4 items, at most 3"), "{text}");
    assert_eq!(ids(&server).await, ["o-1"]);
}

#[tokio::test]
async fn instances_registered_and_cancelled_under_new_ids_do_not_grow_the_delta_window() {
    let clock = Clock::manual(NOW);
    let mut limits = Limits::default();
    limits.max_instances = 5; // a window of 10 entries
    let server = start(&clock, limits).await;
    for k in 0..50 {
        let id = format!("gone-{k}");
        assert_eq!(
            register(&server, "orders", &id, serde_json::json!({}))
                .await
                .0,
            StatusCode::NO_CONTENT
        );
        assert_eq!(
            send(&server, Method::DELETE, &format!("apps/ORDERS/{id}"), None)
                .await
                .0,
            StatusCode::OK
        );
    }
    let (_, text) = send(&server, Method::GET, "apps/delta", None).await;
    let delta: serde_json::Value = serde_json::from_str(&text).unwrap();
    let entries = delta["applications"]["application"][0]["instance"]
        .as_array()
        .unwrap();
    assert_eq!(entries.len(), 10);
    assert_eq!(entries[9]["instanceId"], "gone-49", "the newest kept");
    assert_eq!(
        delta["applications"]["versions__delta"], "100",
        "every change still counted"
    );
}

#[tokio::test]
async fn a_peer_away_holds_at_most_its_queue_the_oldest_writes_given_up() {
    // A peer that answers the start-up pull with 404 and never answers a batch: the first one
    // waits 10 s, longer than the test.
    let away = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let peer = away.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut held = Vec::new();
        while let Ok((mut tcp, _)) = away.accept().await {
            let mut head = [0u8; 3];
            if tcp.read_exact(&mut head).await.is_ok() && &head == b"GET" {
                let _ = tcp
                    .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
            held.push(tcp);
        }
    });
    let mut limits = Limits::default();
    limits.max_peer_queue = 5;
    let server = crate::support::open_server()
        .clock(Clock::manual(NOW))
        .config(config(limits))
        .peers([format!("http://{peer}/eureka/")])
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    for k in 0..50 {
        let id = format!("gone-{k}");
        register(&server, "orders", &id, serde_json::json!({})).await;
        send(&server, Method::DELETE, &format!("apps/ORDERS/{id}"), None).await;
    }
    let stats = server.replication();
    assert_eq!(stats.forwarded, 100);
    // A cancellation supersedes its instance's queued registration: 50 writes queued one after
    // the other, of which at most 5 in the batch in flight and 5 in the queue.
    assert!((40..=50).contains(&stats.failed), "{stats:?}");
}
