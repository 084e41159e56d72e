//! One trait, three answers; moving between them is configuration.

use std::time::Duration;

use cluster_discovery::client::EurekaClient;
use cluster_discovery::model::{Instance, Port, Status};
use cluster_discovery::resolve::{Discovery, Dns, Endpoint, Resolve, ResolverConfig, Static};
use cluster_discovery::server::RunningServer;

#[tokio::test]
async fn static_answers_its_list_and_no_service_for_anything_else() {
    let s = Static::new().service(
        "orders",
        [Endpoint::new("10.0.0.1", 80), Endpoint::new("10.0.0.2", 80)],
    );
    assert_eq!(s.resolve("orders").await.unwrap().len(), 2);
    let e = s.resolve("billing").await.unwrap_err();
    assert!(e.is_no_service());
    assert_eq!(e.to_string(), "no instance of service `billing`");
}

#[tokio::test]
async fn dns_resolves_a_name_from_its_template() {
    let d = Dns::new("{service}", 8080);
    let found = d.resolve("localhost").await.unwrap();
    assert!(found.iter().all(|e| e.port == 8080));
    assert!(
        found
            .iter()
            .any(|e| e.host == "127.0.0.1" || e.host == "::1"),
        "{found:?}"
    );
}

#[tokio::test]
async fn the_resolver_is_chosen_by_configuration() {
    let configs = [
        r#"{"kind": "static", "services": {"localhost": ["127.0.0.1:8080"]}}"#,
        r#"{"kind": "dns", "name": "{service}", "port": 8080}"#,
    ];
    for c in configs {
        let config: ResolverConfig = serde_json::from_str(c).unwrap();
        let r = config.build().unwrap();
        let found = r.resolve("localhost").await.unwrap();
        assert!(found.iter().all(|e| e.port == 8080), "{c}");
    }
    let bad: ResolverConfig =
        serde_json::from_str(r#"{"kind": "static", "services": {"a": ["nope"]}}"#).unwrap();
    assert!(bad.build().is_err());
    let none: ResolverConfig =
        serde_json::from_str(r#"{"kind": "discovery", "servers": []}"#).unwrap();
    assert!(none.build().is_err());
}

/// A server that answers reads at once (no warm-up: nothing registered with it before).
async fn server() -> RunningServer {
    crate::support::answering_server().await
}

async fn register(client: &EurekaClient, app: &str, id: &str, port: u16, status: Status) {
    let mut i = Instance::new(app, "127.0.0.1", port).with_id(id);
    i.status = status;
    client.register(&i).await.unwrap();
}

#[tokio::test]
async fn discovery_serves_its_last_read_when_no_server_answers_and_says_it_is_stale() {
    let server = server().await;
    let client = EurekaClient::new([server.url()]).timeout(Duration::from_secs(2));
    register(&client, "orders", "o-1", 8081, Status::Up).await;
    register(&client, "orders", "o-2", 8082, Status::Down).await;

    let config = format!(
        r#"{{"kind": "discovery", "servers": ["{}"], "refresh_secs": 1}}"#,
        server.url()
    );
    let config: ResolverConfig = serde_json::from_str(&config).unwrap();
    let via_config = config.build().unwrap();
    assert_eq!(
        via_config.resolve("orders").await.unwrap(),
        [Endpoint::new("127.0.0.1", 8081)]
    );

    let d = Discovery::new(client.clone()).refresh(Duration::ZERO);
    assert_eq!(
        d.resolve("orders").await.unwrap(),
        [Endpoint::new("127.0.0.1", 8081)],
        "only UP instances"
    );
    assert!(
        d.resolve("ORDERS").await.is_ok(),
        "application names are case-insensitive"
    );
    assert!(d.resolve("billing").await.unwrap_err().is_no_service());
    assert!(!d.is_stale());

    server.shutdown().await;
    assert!(d.reload().await.is_err());
    assert_eq!(
        d.resolve("orders").await.unwrap(),
        [Endpoint::new("127.0.0.1", 8081)],
        "the registry is down: the last read is served"
    );
    assert!(d.is_stale());
    assert!(d.resolve("billing").await.unwrap_err().is_no_service());
}

#[tokio::test]
async fn discovery_does_not_offer_an_instance_whose_plain_port_is_disabled() {
    let server = server().await;
    let client = EurekaClient::new([server.url()]);
    // (app, id, plain port and whether it is enabled, secure port and whether it is enabled)
    for (app, id, plain, secure) in [
        ("orders", "o-plain", (8081, true), (443, false)),
        ("orders", "o-tls-only", (8082, false), (8443, true)),
        ("orders", "o-both", (8083, true), (8444, true)),
        ("vault", "v-tls-only", (8084, false), (8445, true)),
    ] {
        let mut i = Instance::new(app, "127.0.0.1", plain.0).with_id(id);
        i.port = Port {
            port: plain.0,
            enabled: plain.1,
        };
        i.secure_port = Port {
            port: secure.0,
            enabled: secure.1,
        };
        client.register(&i).await.unwrap();
    }
    let d = Discovery::new(client);
    assert_eq!(
        d.resolve("orders").await.unwrap(),
        [
            Endpoint::new("127.0.0.1", 8081),
            Endpoint::new("127.0.0.1", 8083)
        ],
        "neither the disabled plain port nor the secure one: it is spoken to in plain HTTP"
    );
    assert!(
        d.resolve("vault").await.unwrap_err().is_no_service(),
        "a service served over TLS only resolves to nothing"
    );
}

#[tokio::test]
async fn discovery_that_never_read_anything_says_unavailable_not_an_address() {
    // A port held but never listened on refuses connections; a port given up could be taken
    // (by another test's server) before the request.
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let url = format!("http://{}/eureka/", held.local_addr().unwrap());
    let d = Discovery::new(EurekaClient::new([url]));
    let e = d.resolve("orders").await.unwrap_err();
    assert!(!e.is_no_service());
    assert!(
        e.to_string().contains("cannot resolve service `orders`"),
        "{e}"
    );
}
