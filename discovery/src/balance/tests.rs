//! The balancer's choices, on tokio's paused clock (the cool-downs) and with the resolvers
//! themselves (`Static`, and `Discovery` over an in-process registry for statuses).

use std::collections::HashMap;

use axum::body::Body;
use axum::http::{Method, Request};

use super::*;
use crate::client::EurekaClient;
use crate::model::Instance;
use crate::resolve::{Discovery, Static};

fn three() -> Balancer {
    Balancer::new(Static::new().service("orders", (1..=3).map(|p| Endpoint::new("127.0.0.1", p))))
}

fn port(p: &Pick) -> u16 {
    p.endpoint().port
}

#[tokio::test(start_paused = true)]
async fn the_instance_with_fewer_requests_in_flight_is_chosen() {
    let b = Balancer::new(
        Static::new().service("orders", [Endpoint::new("a", 1), Endpoint::new("b", 1)]),
    );
    // With two instances both are compared each time: the busier one is never chosen.
    let first = b.pick("orders", &[]).await.unwrap();
    for _ in 0..20 {
        let next = b.pick("orders", &[]).await.unwrap();
        assert_ne!(next.endpoint(), first.endpoint());
    }
}

#[tokio::test(start_paused = true)]
async fn requests_held_in_flight_spread_evenly() {
    let b = three();
    let mut held = Vec::new();
    for _ in 0..300 {
        held.push(b.pick("orders", &[]).await.unwrap());
    }
    let mut per: HashMap<u16, usize> = HashMap::new();
    for p in &held {
        *per.entry(port(p)).or_default() += 1;
    }
    let (min, max) = (per.values().min().unwrap(), per.values().max().unwrap());
    assert_eq!(per.len(), 3);
    assert!(max - min <= 3, "uneven: {per:?}");
    drop(held);
    // Dropped picks are no longer in flight.
    let map = b.services.lock().unwrap();
    assert!(map["orders"].values().all(|s| s.in_flight() == 0));
}

#[tokio::test(start_paused = true)]
async fn short_requests_reach_every_instance() {
    let b = three();
    let mut per: HashMap<u16, usize> = HashMap::new();
    for _ in 0..3000 {
        *per.entry(port(&b.pick("orders", &[]).await.unwrap()))
            .or_default() += 1;
    }
    assert!(per.values().all(|n| *n > 600), "{per:?}");
}

#[tokio::test(start_paused = true)]
async fn a_failed_connection_cools_the_instance_down_doubling_in_a_row() {
    let b = three();
    let failed = b.pick("orders", &[]).await.unwrap();
    let bad = failed.endpoint().clone();
    failed.connect_failed();
    drop(failed);
    assert!(never_chosen(&b, &bad).await);
    tokio::time::advance(DEFAULT_COOL_DOWN).await;
    assert!(!never_chosen(&b, &bad).await, "back after the cool-down");

    // A second failure in a row: twice as long.
    let p = pick_exactly(&b, &bad).await;
    p.connect_failed();
    drop(p);
    tokio::time::advance(DEFAULT_COOL_DOWN * 3 / 2).await;
    assert!(
        never_chosen(&b, &bad).await,
        "still cooling after 1.5 cool-downs"
    );
    tokio::time::advance(DEFAULT_COOL_DOWN).await;
    // Reached: the record is clean, and the next failure cools for one cool-down again.
    let p = pick_exactly(&b, &bad).await;
    p.reached();
    p.connect_failed();
    drop(p);
    tokio::time::advance(DEFAULT_COOL_DOWN).await;
    assert!(!never_chosen(&b, &bad).await);
}

/// Whether 100 picks avoid `bad`.
async fn never_chosen(b: &Balancer, bad: &Endpoint) -> bool {
    for _ in 0..100 {
        if b.pick("orders", &[]).await.unwrap().endpoint() == bad {
            return false;
        }
    }
    true
}

/// A pick of `want`, by setting the others aside.
async fn pick_exactly(b: &Balancer, want: &Endpoint) -> Pick {
    let others: Vec<Endpoint> = (1..=3)
        .map(|p| Endpoint::new("127.0.0.1", p))
        .filter(|e| e != want)
        .collect();
    let p = b.pick("orders", &others).await.unwrap();
    assert_eq!(p.endpoint(), want);
    p
}

#[tokio::test(start_paused = true)]
async fn tried_instances_are_set_aside_until_none_is_left() {
    let b = three();
    let mut tried = Vec::new();
    for _ in 0..3 {
        let p = b.pick("orders", &tried).await.unwrap();
        assert!(!tried.contains(p.endpoint()));
        tried.push(p.endpoint().clone());
    }
    assert!(matches!(
        b.pick("orders", &tried).await,
        Err(PickError::AllTried { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn when_every_instance_cools_down_one_is_chosen_anyway() {
    let b = three();
    for p in 1..=3 {
        pick_exactly(&b, &Endpoint::new("127.0.0.1", p))
            .await
            .connect_failed();
    }
    {
        let map = b.services.lock().unwrap();
        assert!(
            map["orders"]
                .values()
                .all(|s| s.cooling(tokio::time::Instant::now()))
        );
    }
    // Every one is cooling, yet picks are made, still spread by load (two choices of three:
    // the third may land on a busy one).
    let held: Vec<Pick> = futures::future::join_all((0..3).map(|_| b.pick("orders", &[])))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let mut ports: Vec<u16> = held.iter().map(port).collect();
    ports.sort();
    ports.dedup();
    assert!(ports.len() >= 2, "all on one: {ports:?}");
}

#[tokio::test(start_paused = true)]
async fn an_unknown_service_is_a_resolve_error() {
    let e = three().pick("billing", &[]).await.unwrap_err();
    assert!(
        matches!(e, PickError::Resolve(ref r) if r.is_no_service()),
        "{e}"
    );
}

#[tokio::test]
async fn instances_out_of_service_or_down_in_eureka_are_never_chosen() {
    let server = crate::server::RegistryServer::new().service();
    let client = EurekaClient::in_process(server.clone());
    for (id, port) in [("o-1", 9001), ("o-2", 9002), ("o-3", 9003)] {
        client
            .register(&Instance::new("orders", "127.0.0.1", port).with_id(id))
            .await
            .unwrap();
    }
    let set = |id: &str, value: &str| {
        Request::builder()
            .method(Method::PUT)
            .uri(format!("/eureka/apps/ORDERS/{id}/status?value={value}"))
            .body(Body::empty())
            .unwrap()
    };
    assert!(
        server
            .call(set("o-2", "OUT_OF_SERVICE"))
            .await
            .status()
            .is_success()
    );
    let mut down = Instance::new("orders", "127.0.0.1", 9004).with_id("o-4");
    down.status = crate::model::Status::Down;
    client.register(&down).await.unwrap();
    let b = Balancer::new(Discovery::new(client));
    for _ in 0..200 {
        let p = b.pick("orders", &[]).await.unwrap();
        assert!([9001, 9003].contains(&port(&p)), "chose {}", p.endpoint());
    }
}
