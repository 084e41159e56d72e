//! Nodes of two wire versions in one cluster (the first release's, pinned with
//! `wire_versions(1..=1)`, and this one's), over real TCP.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::registry::ServiceEntry;
use cluster::{CallError, Reason, Registry};

use crate::{Net, OrdersClient, OrdersServer, Plan, Shop};

async fn node_on(net: &Net, name: &str, wire: std::ops::RangeInclusive<u32>) -> cluster::Node {
    net.builder(name).wire_versions(wire).start().await.unwrap()
}

async fn shop_on(net: &Net, name: &str, wire: std::ops::RangeInclusive<u32>) -> cluster::Node {
    let node = node_on(net, name, wire).await;
    let shop = Arc::new(Shop::new(&node, Plan::Pay));
    let _r = node.serve(OrdersServer::new(shop)).await.unwrap();
    node
}

#[tokio::test]
async fn a_first_release_node_and_this_one_call_each_other() {
    let net = Net::plaintext();
    let old = shop_on(&net, "old-1", 1..=1).await;
    assert_eq!(old.info().wire, Some((1, 1)));
    let new_client = net.node("new-client").await;
    let seen = OrdersClient::new(&new_client).whoami().await.unwrap();
    assert_eq!(seen.node, "old-1");
    assert_eq!(seen.caller, None, "wire 1 carries no context");
    assert_eq!(seen.attempt, 0);

    let net = Net::plaintext();
    let _new = shop_on(&net, "new-1", 1..=2).await;
    let old_client = node_on(&net, "old-client", 1..=1).await;
    let seen = OrdersClient::new(&old_client).whoami().await.unwrap();
    assert_eq!((seen.node.as_str(), seen.caller), ("new-1", None));
    let new_client = net.node("new-client").await;
    let seen = OrdersClient::new(&new_client).whoami().await.unwrap();
    assert_eq!(
        seen.caller.as_deref(),
        Some("new-client"),
        "wire 2 between new nodes"
    );
}

#[tokio::test]
async fn a_provider_without_a_common_wire_version_is_never_tried_nor_waited_for() {
    let net = Net::plaintext();
    let _old = shop_on(&net, "old-1", 1..=1).await;
    let client = node_on(&net, "new-only", 2..=2).await;
    let start = Instant::now();
    let err = OrdersClient::new(&client).whoami().await.unwrap_err();
    let CallError::Service(e) = &err else {
        panic!("expected a ServiceError, got {err:?}")
    };
    assert_eq!(e.reason(), Reason::WireVersion);
    assert!(e.report().attempts.is_empty(), "never tried");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "not waited for: {:?}",
        start.elapsed()
    );
    assert!(e.detail().contains("old-1 speaks 1..=1"), "{}", e.detail());
}

#[tokio::test]
async fn a_wire_refusal_is_not_retried_on_the_same_node() {
    let net = Net::plaintext();
    let old = shop_on(&net, "old-1", 1..=1).await;
    // Its entry claims wire 2, as a stale or forged one might: the handshake finds out.
    let claim = ServiceEntry::new(
        old.info().clone().with_wire(Some(1..=2)),
        Arc::new(OrdersClient::description().clone()),
    );
    net.registry.register(claim).await.unwrap();
    let client = node_on(&net, "new-only", 2..=2).await;
    let err = OrdersClient::new(&client).whoami().await.unwrap_err();
    let CallError::Service(e) = &err else {
        panic!("expected a ServiceError, got {err:?}")
    };
    assert_eq!(e.reason(), Reason::WireVersion);
    let attempts = &e.report().attempts;
    assert_eq!(attempts.len(), 1, "{err}");
    assert!(
        attempts[0].outcome.contains("wire protocol mismatch"),
        "{err}"
    );
    assert!(
        e.detail().contains("refused this call's wire"),
        "{}",
        e.detail()
    );

    // With a provider that speaks wire 2 beside it, the call goes there instead.
    let _new = shop_on(&net, "new-1", 1..=2).await;
    for _ in 0..4 {
        let seen = OrdersClient::new(&client).whoami().await.unwrap();
        assert_eq!(seen.node, "new-1");
    }
}
