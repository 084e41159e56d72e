//! What a handler sees of its call, over real TCP.

use std::time::Duration;

use crate::{Net, OrdersClient, Plan};

#[tokio::test]
async fn a_handler_reads_its_caller_request_id_attempt_metadata_and_time_left() {
    let net = Net::tcp();
    let (_orders, _shop) = net.shop("orders-1", Plan::Pay).await;
    let web = net.node("web-1").await;
    let client = OrdersClient::new(&web);

    let seen = client
        .whoami()
        .timeout(Duration::from_secs(2))
        .metadata("tenant", "acme")
        .await
        .unwrap();
    assert_eq!(seen.caller.as_deref(), Some("web-1"));
    assert_eq!(seen.tenant.as_deref(), Some("acme"));
    assert_eq!(seen.attempt, 1);
    assert!(
        seen.remaining <= Duration::from_secs(2) && seen.remaining > Duration::from_secs(1),
        "the attempt's time left: {:?}",
        seen.remaining
    );
    let budget = seen.budget.expect("the caller said its budget");
    assert!(
        budget > Duration::from_secs(9),
        "orders' 10 s budget: {budget:?}"
    );
    let other = client.whoami().await.unwrap();
    assert_ne!(
        other.request_id, seen.request_id,
        "every call has its own id"
    );
    assert_eq!(other.tenant, None, "metadata belongs to one call");
}

#[tokio::test]
async fn a_call_inside_a_handler_inherits_the_request_id_and_a_shorter_deadline() {
    let net = Net::tcp();
    let (_orders, _shop) = net.shop("orders-1", Plan::Pay).await;
    let (_payments, _bank) = net.bank("payments-1", Duration::ZERO).await;
    let web = net.node("web-1").await;

    let (order, payment) = OrdersClient::new(&web)
        .place("book".into())
        .timeout(Duration::from_secs(3))
        .metadata("tenant", "acme")
        .await
        .unwrap();
    assert_eq!(
        payment.request_id, order.request_id,
        "one id across the hops"
    );
    assert_eq!(payment.caller.as_deref(), Some("orders-1"));
    assert!(
        payment.remaining < order.remaining,
        "the nested call has what the handler had left, less a reserve: {:?} then {:?}",
        order.remaining,
        payment.remaining
    );
    assert!(
        payment.budget.unwrap() <= Duration::from_secs(3),
        "not payments' own 10 s budget: {:?}",
        payment.budget
    );
    assert_eq!(payment.tenant, None, "metadata is not inherited");

    let detached = crate::PaymentsClient::new(&web).charge(1).await.unwrap();
    assert_ne!(detached.request_id, order.request_id);
}
