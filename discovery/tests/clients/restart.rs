//! A registry server that restarts comes back empty; for one renewal interval it warms up (reads
//! answer 503) while its instances register again, however many of them already have, and the
//! clients keep their copy instead of taking a registry missing the rest for the truth.
//!
//! The servers run on real sockets with a manual clock: the warm-up's window is measured on the
//! server's clock, so the tests move it instead of waiting 30 s.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cluster::Registry as _;
use cluster::registry::NodeInfo;
use cluster_discovery::backend::{EurekaRegistry, EurekaRegistryConfig};
use cluster_discovery::client::{EurekaClient, Heartbeat};
use cluster_discovery::model::Instance;
use cluster_discovery::resolve::{Discovery, Endpoint, Resolve};
use cluster_discovery::server::{Clock, RunningServer, ServerConfig};

/// The read paths a warm-up answers 503 on.
const READS: [&str; 5] = [
    "apps/",
    "apps/delta",
    "apps/ORDERS",
    "vips/orders",
    "instances/o-1",
];

async fn get(url: &str) -> reqwest::Response {
    reqwest::get(url).await.unwrap()
}

/// A manual clock at the system's time: the clients date their registrations by the system's
/// clock, which the server checks against its own.
fn clock_now() -> Clock {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    Clock::manual(u64::try_from(now.as_millis()).unwrap())
}

/// A server that has been up for a while: it answers reads at once.
async fn running() -> RunningServer {
    crate::support::answering_server().await
}

/// Stops `server` and starts an empty one on the same address, as a restart does (with the
/// default warm-up, on `clock`).
async fn restart(server: RunningServer, clock: &Clock) -> RunningServer {
    let addr: SocketAddr = server.addr();
    server.shutdown().await;
    crate::support::open_server()
        .clock(clock.clone())
        .start(addr)
        .await
        .unwrap()
}

/// The ids in the server's `GET apps` (JSON), which must answer 200.
async fn ids(server: &RunningServer) -> Vec<String> {
    let r = reqwest::Client::new()
        .get(format!("{}apps/", server.url()))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    crate::support::ids(&r.json().await.unwrap())
}

#[tokio::test]
async fn a_server_started_empty_answers_reads_503_for_its_whole_window_while_instances_register() {
    let clock = clock_now();
    let s = crate::support::open_server()
        .clock(clock.clone())
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    for path in READS {
        assert_eq!(
            get(&format!("{}{path}", s.url())).await.status(),
            503,
            "{path}"
        );
    }
    let status: serde_json::Value = get(&format!("{}status", s.url()))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(status["warmingUp"], true);

    // Writes go through and rebuild the registry; the reads stay 503 all the same.
    let client = EurekaClient::new([s.url()]);
    let o1 = Instance::new("orders", "127.0.0.1", 8080).with_id("o-1");
    client
        .register(&o1)
        .await
        .expect("writes are accepted while warming up");
    assert_eq!(
        client.heartbeat(&o1).await.unwrap(),
        Heartbeat::Renewed,
        "and heartbeats"
    );
    let unknown = Instance::new("catalog", "127.0.0.1", 7070).with_id("c-1");
    assert_eq!(
        client.heartbeat(&unknown).await.unwrap(),
        Heartbeat::Unknown,
        "an instance not registered again yet is told to (404)"
    );
    for path in READS {
        let r = get(&format!("{}{path}", s.url())).await;
        assert_eq!(r.status(), 503, "{path}: a registration does not end it");
        assert_eq!(r.headers()["retry-after"], "30", "{path}");
    }
    clock.advance(Duration::from_secs(29));
    let b1 = Instance::new("billing", "127.0.0.1", 9090).with_id("b-1");
    client.register(&b1).await.unwrap();
    let r = get(&format!("{}apps/", s.url())).await;
    assert_eq!(r.status(), 503, "a second before the end");
    assert_eq!(r.headers()["retry-after"], "1");

    // One renewal interval after the start: the registry as rebuilt, every instance in it.
    clock.advance(Duration::from_secs(1));
    for path in READS {
        assert_eq!(
            get(&format!("{}{path}", s.url())).await.status(),
            200,
            "{path}"
        );
    }
    assert_eq!(ids(&s).await, ["b-1", "o-1"]);
    let status: serde_json::Value = get(&format!("{}status", s.url()))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(status["warmingUp"], false);
    s.shutdown().await;
}

#[tokio::test]
async fn the_window_can_be_set_or_switched_off() {
    let clock = clock_now();
    let mut config = ServerConfig::default();
    config.warm_up_window = Some(Duration::from_secs(5));
    let s = crate::support::open_server()
        .clock(clock.clone())
        .config(config)
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let r = get(&format!("{}apps/", s.url())).await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "5");
    clock.advance(Duration::from_secs(5));
    assert_eq!(get(&format!("{}apps/", s.url())).await.status(), 200);
    s.shutdown().await;

    let mut config = ServerConfig::default();
    config.warm_up_window = Some(Duration::MAX);
    let s = crate::support::open_server()
        .clock(clock.clone())
        .config(config)
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let r = get(&format!("{}apps/", s.url())).await;
    assert_eq!(
        r.headers()["retry-after"],
        "86400",
        "at most the longest renewal interval an instance gets (Limits::max_lease)"
    );
    s.shutdown().await;

    let s = running().await;
    assert_eq!(
        get(&format!("{}apps/", s.url())).await.status(),
        200,
        "switched off"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn discovery_keeps_resolving_a_service_not_yet_registered_again_until_the_window_ends() {
    let s = running().await;
    let client = EurekaClient::new([s.url()]);
    let o1 = Instance::new("orders", "127.0.0.1", 8080).with_id("o1");
    let b1 = Instance::new("billing", "127.0.0.1", 9090).with_id("b1");
    let c1 = Instance::new("catalog", "127.0.0.1", 7070).with_id("c1");
    for i in [&o1, &b1, &c1] {
        client.register(i).await.unwrap();
    }
    let d = Discovery::new(client.clone()).refresh(Duration::ZERO);
    let orders = [Endpoint::new("127.0.0.1", 8080)];
    let billing = [Endpoint::new("127.0.0.1", 9090)];
    let catalog = [Endpoint::new("127.0.0.1", 7070)];
    assert_eq!(d.resolve("orders").await.unwrap(), orders);

    let clock = clock_now();
    let s = restart(s, &clock).await;
    // o1's heartbeat comes first, gets 404, and o1 registers again. Before, that ended the
    // warm-up: the next read saw orders alone, and billing and catalog resolved to nothing
    // (the gateway's 503) until their own heartbeats.
    client.register(&o1).await.unwrap();
    assert!(d.reload().await.is_err(), "still warming up");
    assert!(d.is_stale());
    assert_eq!(d.resolve("orders").await.unwrap(), orders);
    assert_eq!(
        d.resolve("billing").await.unwrap(),
        billing,
        "not registered again yet: still resolved from the copy"
    );
    assert_eq!(d.resolve("catalog").await.unwrap(), catalog);

    // b1's heartbeat comes within the interval; c1's never does (it was stopped meanwhile).
    clock.advance(Duration::from_secs(20));
    client.register(&b1).await.unwrap();
    assert!(d.reload().await.is_err(), "still warming up");
    assert_eq!(d.resolve("billing").await.unwrap(), billing);

    // The window over, the rebuilt registry is the truth: c1 is gone, the others are there.
    clock.advance(Duration::from_secs(10));
    d.reload().await.unwrap();
    assert!(!d.is_stale());
    assert_eq!(d.resolve("orders").await.unwrap(), orders);
    assert_eq!(d.resolve("billing").await.unwrap(), billing);
    assert!(d.resolve("catalog").await.unwrap_err().is_no_service());
    s.shutdown().await;
}

#[tokio::test]
async fn the_backend_keeps_its_nodes_through_a_restart_until_the_window_ends() {
    let s = running().await;
    let mut config = EurekaRegistryConfig::default();
    config.renewal_interval = Duration::from_secs(1);
    let start = || EurekaRegistry::start(EurekaClient::new([s.url()]), config.clone());
    let (r, gone) = (start().await, start().await);
    let node = |name: &str, port| NodeInfo::new(name.to_owned(), ([127, 0, 0, 1], port).into(), 1);
    r.join(node("n1", 9001)).await.unwrap();
    gone.join(node("n2", 9002)).await.unwrap();
    r.refresh().await;
    assert_eq!(r.local_copy().nodes().len(), 2);
    // n2's process ends without leaving (its heartbeats stop with it) while the server restarts.
    drop(gone);

    let clock = clock_now();
    let s = restart(s, &clock).await;
    r.refresh().await;
    assert_eq!(
        r.local_copy().nodes().len(),
        2,
        "the empty restarted server is not taken for the truth"
    );

    // n1's next heartbeat (within 1 s) gets 404 and registers it again.
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    while s.health().instances == 0 {
        assert!(
            std::time::Instant::now() < give_up,
            "n1 never registered again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    r.refresh().await;
    assert_eq!(
        r.local_copy().nodes().len(),
        2,
        "nor is one holding only the nodes back so far"
    );

    // The window over: the rebuilt registry, without n2.
    clock.advance(Duration::from_secs(30));
    r.refresh().await;
    let nodes = r.local_copy().nodes();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    s.shutdown().await;
}
