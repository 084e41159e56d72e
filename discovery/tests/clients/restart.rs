//! A registry server that restarts comes back empty; until its instances register again it
//! warms up (reads answer 503), and the clients keep their copy instead of taking the empty
//! registry for the truth.

use std::net::SocketAddr;
use std::time::Duration;

use cluster::Registry as _;
use cluster::registry::NodeInfo;
use cluster_discovery::backend::{EurekaRegistry, EurekaRegistryConfig};
use cluster_discovery::client::EurekaClient;
use cluster_discovery::model::Instance;
use cluster_discovery::resolve::{Discovery, Endpoint, Resolve};
use cluster_discovery::server::{Clock, RegistryServer, RunningServer, ServerConfig};

async fn get(url: &str) -> reqwest::StatusCode {
    reqwest::get(url).await.unwrap().status()
}

/// Stops `server` and starts an empty one on the same address, as a restart does.
async fn restart(server: RunningServer) -> RunningServer {
    let addr: SocketAddr = server.addr();
    server.shutdown().await;
    RegistryServer::new().start(addr).await.unwrap()
}

#[tokio::test]
async fn a_server_started_empty_answers_reads_503_until_an_instance_registers() {
    let clock = Clock::manual(1_000_000);
    let s = RegistryServer::new()
        .clock(clock.clone())
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    for path in [
        "apps/",
        "apps/delta",
        "apps/ORDERS",
        "vips/orders",
        "instances/o-1",
    ] {
        let url = format!("{}{path}", s.url());
        assert_eq!(get(&url).await, 503, "{path}");
    }
    assert_eq!(get(&format!("{}status", s.url())).await, 200);
    // One renewal interval later it serves what it has, empty or not.
    clock.advance(Duration::from_secs(30));
    assert_eq!(get(&format!("{}apps/", s.url())).await, 200);
    s.shutdown().await;

    let s = RegistryServer::new()
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let client = EurekaClient::new([s.url()]);
    client
        .register(&Instance::new("orders", "127.0.0.1", 8080))
        .await
        .expect("writes are accepted while warming up");
    assert_eq!(get(&format!("{}apps/", s.url())).await, 200);
    s.shutdown().await;

    let mut config = ServerConfig::default();
    config.warm_up = false;
    let s = RegistryServer::new()
        .config(config)
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    assert_eq!(get(&format!("{}apps/", s.url())).await, 200, "switched off");
    s.shutdown().await;
}

#[tokio::test]
async fn discovery_keeps_the_old_address_through_a_restart_and_says_it_is_stale() {
    let s = RegistryServer::new()
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let client = EurekaClient::new([s.url()]);
    let o1 = Instance::new("orders", "127.0.0.1", 8080).with_id("o1");
    client.register(&o1).await.unwrap();
    let d = Discovery::new(client.clone()).refresh(Duration::ZERO);
    let orders = [Endpoint::new("127.0.0.1", 8080)];
    assert_eq!(d.resolve("orders").await.unwrap(), orders);

    let s = restart(s).await;
    assert!(
        d.reload().await.is_err(),
        "the restarted server is warming up"
    );
    assert_eq!(d.resolve("orders").await.unwrap(), orders);
    assert!(d.is_stale());

    // o1's next heartbeat gets 404 and it registers again: the server has it, and serves.
    client.register(&o1).await.unwrap();
    d.reload().await.unwrap();
    assert!(!d.is_stale());
    assert_eq!(d.resolve("orders").await.unwrap(), orders);
    s.shutdown().await;
}

#[tokio::test]
async fn the_backend_keeps_its_nodes_through_a_restart_until_they_register_again() {
    let s = RegistryServer::new()
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let mut config = EurekaRegistryConfig::default();
    config.renewal_interval = Duration::from_secs(1);
    let r = EurekaRegistry::start(EurekaClient::new([s.url()]), config).await;
    let addr: SocketAddr = "127.0.0.1:9000".parse().unwrap();
    r.join(NodeInfo::new(String::from("n1"), addr, 1))
        .await
        .unwrap();
    assert_eq!(r.local_copy().nodes().len(), 1);

    let s = restart(s).await;
    r.refresh().await;
    assert_eq!(
        r.local_copy().nodes().len(),
        1,
        "the empty restarted server is not taken for the truth"
    );

    // The next heartbeat (within 1 s) gets 404 and registers n1 again.
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    while s.health().instances == 0 {
        assert!(
            std::time::Instant::now() < give_up,
            "n1 never registered again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    r.refresh().await;
    assert_eq!(r.local_copy().nodes().len(), 1);
    s.shutdown().await;
}
