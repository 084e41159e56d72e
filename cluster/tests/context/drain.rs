//! A draining node stops being offered but keeps reading the registry: its running handlers
//! can still call others. Gossip on real UDP, calls on real TCP.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::support::{gossip_node, seen};
use crate::{Bank, OrdersClient, OrdersServer, PaymentsServer, Plan, Shop};

#[tokio::test]
async fn a_handler_that_calls_another_service_during_its_nodes_drain_succeeds() {
    let (payments, registry) = gossip_node("payments-1", &[]).await;
    let seed = registry.gossip_addr().unwrap();
    let bank = Arc::new(Bank::new(&payments, Duration::ZERO));
    let _p = payments
        .serve(PaymentsServer::new(bank.clone()))
        .await
        .unwrap();

    let (orders, _) = gossip_node("orders-1", &[seed]).await;
    let gate = Arc::new(Notify::new());
    let mut shop = Shop::new(&orders, Plan::Pay);
    shop.gate = Some(gate.clone());
    let shop = Arc::new(shop);
    let _o = orders.serve(OrdersServer::new(shop.clone())).await.unwrap();
    let (web, _) = gossip_node("web-1", &[seed]).await;

    let limit = Duration::from_secs(10);
    seen(&web, limit, |n| n.registry().lookup("orders").len() == 1)
        .await
        .unwrap();
    seen(&orders, limit, |n| {
        n.registry().lookup("payments").len() == 1
    })
    .await
    .unwrap();

    let call = tokio::spawn({
        let client = OrdersClient::new(&web);
        async move { client.place("book".into()).timeout(limit).await }
    });
    crate::support::until("the order is being placed", || {
        shop.started.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    let shutdown = tokio::spawn({
        let orders = orders.clone();
        async move { orders.shutdown().await }
    });
    // Out of every lookup first; still draining its running call.
    seen(&web, limit, |n| n.registry().lookup("orders").is_empty())
        .await
        .unwrap();
    // The first release left gossip here and, two rounds (400 ms) later, emptied its own copy;
    // give that time to happen, then check that the draining node still sees its peers.
    tokio::time::sleep(3 * cluster::registry::GossipConfig::new().gossip_interval).await;
    assert!(!shutdown.is_finished());
    assert_eq!(orders.registry().lookup("payments").len(), 1);
    gate.notify_one();

    let (_, payment) = call.await.unwrap().expect("the order went through");
    assert_eq!(payment.node, "payments-1");
    shutdown.await.unwrap();
    payments.shutdown().await;
    web.shutdown().await;
}
