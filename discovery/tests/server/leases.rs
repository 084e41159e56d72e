//! Leases decided at read time from the last heartbeat, and self-preservation, on a manual
//! clock.

use std::time::Duration;

use axum::http::StatusCode;
use cluster_discovery::server::{Clock, RegistryServer, ServerConfig, Service};

use crate::support::{get_json, heartbeat, ids, register};

fn server(clock: &Clock, self_preservation: bool) -> Service {
    let mut config = ServerConfig::default();
    config.self_preservation = self_preservation;
    RegistryServer::new()
        .clock(clock.clone())
        .config(config)
        .service()
}

async fn fleet(svc: &Service, n: usize) -> Vec<String> {
    let mut all = Vec::new();
    for k in 0..n {
        let id = format!("w-{k:02}");
        register(svc, "worker", &id).await;
        all.push(id);
    }
    all
}

#[tokio::test]
async fn an_instance_expires_one_lease_duration_after_its_last_heartbeat_when_read() {
    let clock = Clock::manual(1_000_000);
    let svc = server(&clock, true);
    register(&svc, "orders", "o-1").await;
    clock.advance(Duration::from_secs(60));
    assert_eq!(heartbeat(&svc, "orders", "o-1").await, StatusCode::OK);
    clock.advance(Duration::from_secs(90));
    assert_eq!(
        ids(&get_json(&svc, "/eureka/apps").await.json()),
        ["o-1"],
        "exactly 90 s: still in"
    );
    clock.advance(Duration::from_millis(1));
    assert!(
        ids(&get_json(&svc, "/eureka/apps").await.json()).is_empty(),
        "past 90 s: gone"
    );
    let delta = get_json(&svc, "/eureka/apps/delta").await.json();
    let last = delta["applications"]["application"][0]["instance"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        last["actionType"], "DELETED",
        "an expiry shows in the delta"
    );
    assert_eq!(
        heartbeat(&svc, "orders", "o-1").await,
        StatusCode::NOT_FOUND,
        "so the instance re-registers"
    );
}

#[tokio::test]
async fn the_lease_an_instance_asks_for_is_the_one_it_gets() {
    let clock = Clock::manual(1_000_000);
    let svc = server(&clock, true);
    let body = serde_json::json!({"instance": {"app": "FAST", "instanceId": "f-1", "hostName": "h", "ipAddr": "1.1.1.1",
        "leaseInfo": {"renewalIntervalInSecs": 1, "durationInSecs": 3}}});
    crate::support::call(
        &svc,
        axum::http::Method::POST,
        "/eureka/apps/FAST",
        &[("content-type", "application/json")],
        body.to_string(),
    )
    .await;
    clock.advance(Duration::from_millis(3001));
    assert!(ids(&get_json(&svc, "/eureka/apps").await.json()).is_empty());
}

#[tokio::test]
async fn when_most_of_the_registry_goes_quiet_at_once_it_is_kept_and_the_server_says_so() {
    let clock = Clock::manual(1_000_000);
    let svc = server(&clock, true);
    let all = fleet(&svc, 10).await;
    clock.advance(Duration::from_secs(60));
    for id in &all[..7] {
        heartbeat(&svc, "worker", id).await;
    }
    clock.advance(Duration::from_secs(31)); // 3 of 10 now quiet: 70 % renewing < 85 %
    let read = get_json(&svc, "/eureka/apps").await;
    assert_eq!(ids(&read.json()).len(), 10, "all still served");
    assert_eq!(read.headers["x-discovery-self-preservation"], "true");
    let h = svc.health();
    assert!(h.self_preservation);
    assert_eq!((h.instances, h.quiet), (10, 3));

    // The network heals: two of the three renew, and the registry is back to normal.
    for id in &all[7..9] {
        assert_eq!(heartbeat(&svc, "worker", id).await, StatusCode::OK);
    }
    let read = get_json(&svc, "/eureka/apps").await;
    assert!(!read.headers.contains_key("x-discovery-self-preservation"));
    assert!(!svc.health().self_preservation);
    assert_eq!(
        ids(&read.json()).len(),
        10,
        "the last one gets a lease duration to renew"
    );

    // It never does: one lease duration after self-preservation ended, it is gone.
    clock.advance(Duration::from_secs(60));
    for id in &all[..9] {
        heartbeat(&svc, "worker", id).await;
    }
    clock.advance(Duration::from_secs(31));
    assert_eq!(ids(&get_json(&svc, "/eureka/apps").await.json()), all[..9]);
}

#[tokio::test]
async fn one_instance_dying_in_a_large_registry_is_expired() {
    let clock = Clock::manual(1_000_000);
    let svc = server(&clock, true);
    let all = fleet(&svc, 10).await;
    clock.advance(Duration::from_secs(60));
    for id in &all[1..] {
        heartbeat(&svc, "worker", id).await;
    }
    clock.advance(Duration::from_secs(31)); // 1 of 10 quiet: 90 % renewing
    assert_eq!(ids(&get_json(&svc, "/eureka/apps").await.json()).len(), 9);
    assert!(!svc.health().self_preservation);
}

#[tokio::test]
async fn a_registry_of_fewer_than_eight_never_preserves() {
    let clock = Clock::manual(1_000_000);
    let svc = server(&clock, true);
    fleet(&svc, 7).await;
    clock.advance(Duration::from_secs(91)); // all quiet
    assert!(ids(&get_json(&svc, "/eureka/apps").await.json()).is_empty());
    assert!(!svc.health().self_preservation);
}

#[tokio::test]
async fn self_preservation_can_be_switched_off() {
    let clock = Clock::manual(1_000_000);
    let svc = server(&clock, false);
    let all = fleet(&svc, 10).await;
    clock.advance(Duration::from_secs(60));
    for id in &all[..5] {
        heartbeat(&svc, "worker", id).await;
    }
    clock.advance(Duration::from_secs(31));
    assert_eq!(ids(&get_json(&svc, "/eureka/apps").await.json()).len(), 5);
    assert!(!svc.health().self_preservation);
}

/// A partition cuts half of a fleet off at once, but their heartbeats were staggered over the
/// renewal interval, so they go quiet one by one: each read sees one quiet instance, never
/// 15 %. Counting the ones expired within their lease with the quiet ones, the server stops
/// expiring once the share crosses the threshold, and says so.
#[tokio::test]
async fn a_partition_of_staggered_instances_turns_self_preservation_on_before_it_empties() {
    let clock = Clock::manual(1_000_000);
    let svc = server(&clock, true);
    let all = fleet(&svc, 20).await;
    // 400 s in steps of 100 ms; instance k heartbeats every 30 s, 1.5 s after instance k-1.
    // The odd ones are cut off after 40 s.
    for step in 0..4000u64 {
        clock.advance(Duration::from_millis(100));
        for (k, id) in all.iter().enumerate() {
            let cut_off = k % 2 == 1 && step > 400;
            if !cut_off && step % 300 == k as u64 * 15 {
                assert_eq!(heartbeat(&svc, "worker", id).await, StatusCode::OK);
            }
        }
        svc.health(); // a read settles the registry, as any client's would
    }
    let read = get_json(&svc, "/eureka/apps").await;
    let served = ids(&read.json()).len();
    assert!(
        served > 10,
        "only {served} served: the partition was expired one by one"
    );
    assert_eq!(read.headers["x-discovery-self-preservation"], "true");
    let h = svc.health();
    assert!(h.self_preservation);
    assert_eq!(
        h.quiet + 10,
        h.instances,
        "the cut-off ones still held are quiet"
    );
}
