//! Two servers on loopback: writes are forwarded once, marked, applied and never forwarded
//! on; a starting server pulls the registry from a peer.

use crate::until;
use std::time::Duration;

use cluster_discovery::server::{RunningServer, ServerConfig};

/// The JSON a server answers, or `null` while it is warming up (503) or otherwise not ready.
async fn get(url: &str) -> serde_json::Value {
    let response = reqwest::Client::new()
        .get(url)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    if !response.status().is_success() {
        return serde_json::Value::Null;
    }
    response.json().await.unwrap()
}

async fn ids_on(server: &RunningServer) -> Vec<String> {
    let doc = get(&format!("{}apps/", server.url())).await;
    if doc.is_null() {
        return Vec::new(); // warming up: nothing to read yet
    }
    crate::support::ids(&doc)
}

/// Eureka's defaults but the warm-up: these servers start together, and a server's reads (so a
/// peer's start-up pull) answer 503 for 30 s when it warms up
/// (`a_server_whose_peer_is_warming_up_warms_up_too`).
fn no_warm_up() -> ServerConfig {
    let mut config = ServerConfig::default();
    config.warm_up = false;
    config
}

/// A listener on a port the OS chose, held until a server takes it: a port number found free
/// and then given up could be taken by anything before the server binds it again.
async fn listener() -> (tokio::net::TcpListener, u16) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

#[tokio::test]
async fn a_write_on_one_server_is_seen_on_the_other_and_not_echoed_back() {
    // Each names the other, so both ports are bound first.
    let ((la, pa), (lb, pb)) = (listener().await, listener().await);
    let url = |p: u16| format!("http://127.0.0.1:{p}/eureka/");
    // b's port is bound but not served yet: a's start-up fetch from it can only time out.
    let mut quick = no_warm_up();
    quick.peer_timeout = Duration::from_millis(100);
    let a = crate::support::open_server()
        .config(quick)
        .peers([url(pa), url(pb)])
        .own_url(&url(pa))
        .start_on(la)
        .await
        .unwrap();
    let b = crate::support::open_server()
        .config(no_warm_up())
        .peers([url(pa), url(pb)])
        .own_url(&url(pb))
        .start_on(lb)
        .await
        .unwrap();

    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}apps/ORDERS", a.url()))
        .header("content-type", "application/json")
        .body(crate::support::js_body("orders", "o-1", 8080))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    until("b sees o-1", || async { ids_on(&b).await == ["o-1"] }).await;
    let heartbeat = http
        .put(format!("{}apps/ORDERS/o-1", a.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(heartbeat.status(), 200);
    until("b applied the heartbeat", || async {
        b.replication().applied == 2
    })
    .await;

    assert_eq!(
        a.replication().forwarded,
        2,
        "a forwarded its two client writes, once each"
    );
    assert_eq!(
        b.replication().forwarded,
        0,
        "b forwarded none of what it applied"
    );
    assert_eq!(a.replication().applied, 0, "nothing came back to a");
    assert_eq!(b.health().renewals, 1, "b counted the replicated heartbeat");

    let cancel = http
        .delete(format!("{}apps/ORDERS/o-1", b.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), 200);
    until("a drops o-1 cancelled on b", || async {
        ids_on(&a).await.is_empty()
    })
    .await;
    assert_eq!(b.replication().forwarded, 1);
    assert_eq!(
        a.replication().forwarded,
        2,
        "a did not forward b's cancel back"
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_single_write_marked_as_a_replication_is_applied_and_not_forwarded() {
    let b = crate::support::open_server()
        .config(no_warm_up())
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let a = crate::support::open_server()
        .config(no_warm_up())
        .peers([b.url()])
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let r = reqwest::Client::new()
        .post(format!("{}apps/ORDERS", a.url()))
        .header("content-type", "application/json")
        .header("x-netflix-discovery-replication", "true")
        .body(crate::support::js_body("orders", "o-1", 8080))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(ids_on(&a).await, ["o-1"]);
    assert_eq!(a.replication().forwarded, 0);
    assert_eq!(a.replication().applied, 1);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_starting_server_pulls_the_registry_from_a_peer() {
    let a = crate::support::open_server()
        .config(no_warm_up())
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let http = reqwest::Client::new();
    for id in ["o-1", "o-2"] {
        http.post(format!("{}apps/ORDERS", a.url()))
            .header("content-type", "application/json")
            .body(crate::support::js_body("orders", id, 8080))
            .send()
            .await
            .unwrap();
    }
    let b = crate::support::open_server()
        .peers([a.url()])
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    assert_eq!(
        ids_on(&b).await,
        ["o-1", "o-2"],
        "b has them as soon as it serves"
    );
    assert_eq!(
        b.replication().forwarded,
        0,
        "what it pulled is not forwarded back"
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_server_whose_peer_is_warming_up_warms_up_too() {
    // a restarted empty: an instance registered with it again, which it does not serve yet.
    let a = crate::support::open_server()
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let registered = reqwest::Client::new()
        .post(format!("{}apps/ORDERS", a.url()))
        .header("content-type", "application/json")
        .body(crate::support::js_body("orders", "o-1", 8080))
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status(), 204);
    // b starts meanwhile: a's 503 is no registry to take, so b warms up as well, rather than
    // serve the one instance back so far as the whole registry.
    let b = crate::support::open_server()
        .peers([a.url()])
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    assert!(get(&format!("{}apps/", b.url())).await.is_null(), "503");
    assert_eq!(get(&format!("{}status", b.url())).await["warmingUp"], true);
    a.shutdown().await;
    b.shutdown().await;
}
