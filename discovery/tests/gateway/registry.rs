//! The gateway over `Discovery` and our registry server (on a socket): instances set
//! `OUT_OF_SERVICE` receive nothing, and the registry going down does not stop routing.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use cluster_discovery::balance::Balancer;
use cluster_discovery::client::EurekaClient;
use cluster_discovery::gateway::{Gateway, Upstream as Route};
use cluster_discovery::model::Instance;
use cluster_discovery::resolve::Discovery;
use cluster_discovery::server::{Access, RegistryServer, ServerConfig};

use crate::support::{Upstream, client, get};

#[tokio::test]
async fn out_of_service_instances_get_nothing_and_a_registry_outage_keeps_routing() {
    // No warm-up: nothing was registered with it before.
    let mut config = ServerConfig::default();
    config.warm_up = false;
    // Open: this test is about the gateway; the credentials have their own (server/security.rs).
    let registry = RegistryServer::new()
        .access(Access::open())
        .config(config)
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let eureka = EurekaClient::new([registry.url()]);
    let ups = [
        Upstream::start().await,
        Upstream::start().await,
        Upstream::start().await,
    ];
    for u in &ups {
        let port = u.addr.port();
        let i = Instance::new("orders", "127.0.0.1", port).with_id(format!("orders-{port}"));
        eureka.register(&i).await.unwrap();
    }
    let discovery = Arc::new(Discovery::new(eureka).refresh(Duration::from_secs(3600)));
    let balancer = Arc::new(Balancer::from_arc(discovery.clone()));
    let gw = Gateway::new()
        .route("/orders/*", Route::service("orders", balancer))
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let c = client();
    let round = |n: usize| {
        let (c, url) = (c.clone(), format!("{}/orders/1", gw.url()));
        async move {
            for _ in 0..n {
                assert_eq!(get(&c, url.clone()).await.status, StatusCode::OK);
            }
        }
    };
    round(60).await;
    assert!(ups.iter().all(|u| u.hits() > 0), "every instance is used");

    // OUT_OF_SERVICE, as an operator sets it through Eureka's API.
    let out = ups[1].addr.port();
    let status = reqwest::Client::new()
        .put(format!(
            "{}apps/ORDERS/orders-{out}/status?value=OUT_OF_SERVICE",
            registry.url()
        ))
        .send()
        .await
        .unwrap()
        .status();
    assert!(status.is_success(), "{status}");
    discovery.reload().await.unwrap();
    let before = ups[1].hits();
    round(60).await;
    assert_eq!(
        ups[1].hits(),
        before,
        "an instance out of service was chosen"
    );

    // The registry goes away: the cache keeps routing, and says it is stale.
    registry.shutdown().await;
    assert!(discovery.reload().await.is_err());
    assert!(discovery.is_stale());
    let before = ups[0].hits() + ups[2].hits();
    round(30).await;
    assert_eq!(ups[0].hits() + ups[2].hits(), before + 30);
    gw.shutdown().await;
}

/// A registry whose reads of the whole registry wait until the test lets them through, then
/// answer `ORDERS` at `port`.
async fn gated_registry(port: u16, gate: Arc<tokio::sync::Semaphore>) -> String {
    let doc = format!(
        r#"{{"applications":{{"versions__delta":"1","apps__hashcode":"UP_1_","application":[{{"name":"ORDERS","instance":[{{"instanceId":"o-1","hostName":"127.0.0.1","app":"ORDERS","ipAddr":"127.0.0.1","status":"UP","port":{{"$":{port},"@enabled":"true"}},"vipAddress":"orders"}}]}}]}}}}"#
    );
    let app = axum::Router::new().route(
        "/eureka/apps/",
        axum::routing::get(move || {
            let (gate, doc) = (gate.clone(), doc.clone());
            async move {
                gate.acquire().await.unwrap().forget();
                ([("content-type", "application/json")], doc)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/eureka/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn a_registry_slower_than_the_route_is_503_not_the_service_s_504_then_routes() {
    let up = Upstream::start().await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let registry = gated_registry(up.addr.port(), gate.clone()).await;
    let balancer = Arc::new(Balancer::new(Discovery::new(EurekaClient::new([registry]))));
    let gw = Gateway::new()
        .route(
            "/orders/*",
            Route::service("orders", balancer).timeout(Duration::from_millis(100)),
        )
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let c = client();
    let url = format!("{}/orders/1", gw.url());

    // The registry holds the first read past the route's timeout: no instance was asked.
    let first = get(&c, url.clone()).await;
    assert_eq!(
        first.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        first.text
    );
    assert!(
        first.text.contains("could not be resolved"),
        "{}",
        first.text
    );
    assert_eq!(up.hits(), 0);

    // The read went on without the request that started it: once the registry answers, the
    // cache is filled and requests are routed.
    gate.add_permits(1);
    let routed = tokio::time::timeout(Duration::from_secs(10), async {
        while get(&c, url.clone()).await.status != StatusCode::OK {}
    })
    .await;
    assert!(routed.is_ok(), "never routed once the registry answered");
    gw.shutdown().await;
}
