//! A call inside a call, on the paused clock: the deadline crosses hops, a missing downstream
//! fails with its own reason within the outer budget, and cancellation reaches nested calls.

use std::sync::atomic::Ordering;
use std::time::Duration;

use cluster::CallError;
use tokio::time::Instant;

use crate::{Net, OrderError, OrdersClient, Plan};

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn the_deadline_crosses_two_hops_and_the_slow_third_service_is_stopped_with_it() {
    let net = Net::memory();
    let (_orders, _shop) = net.shop("orders-1", Plan::Pay).await;
    let (_payments, bank) = net.bank("payments-1", Duration::from_secs(3)).await;
    let web = net.node("web-1").await;

    let start = Instant::now();
    let result = OrdersClient::new(&web)
        .place("book".into())
        .timeout(Duration::from_secs(1))
        .await;
    let took = start.elapsed();
    let Err(CallError::App {
        error: OrderError::Downstream(d),
        ..
    }) = result
    else {
        panic!("expected the downstream failure, got {result:?}");
    };
    assert_eq!(d.call, "payments.charge/1");
    assert_eq!(d.kind, "timeout");
    assert_eq!(d.provider.as_deref(), Some("payments-1"));
    // Payments' own options say 10 s per attempt and a 10 s budget; the client gave 1 s, and
    // the nested call ended a reserve before that, so orders could still answer in time.
    assert_eq!(
        took,
        900 * MS,
        "the nested call's failure arrived before the client gave up"
    );
    assert!(
        d.message.contains("the calling handler's deadline"),
        "{}",
        d.message
    );
    assert_eq!(bank.counters.started(), 1);
    assert_eq!(
        bank.counters.dropped.load(Ordering::SeqCst),
        1,
        "the slow handler was stopped, not left running"
    );
}

#[tokio::test(start_paused = true)]
async fn a_missing_downstream_fails_with_its_own_reason_within_the_outer_budget() {
    let net = Net::memory();
    let (_orders, _shop) = net.shop("orders-1", Plan::Reserve).await;
    let web = net.node("web-1").await;

    let start = Instant::now();
    let result = OrdersClient::new(&web)
        .place("book".into())
        .timeout(Duration::from_secs(5))
        .await;
    let Err(CallError::App {
        error: OrderError::Downstream(d),
        ..
    }) = result
    else {
        panic!("expected the downstream failure, got {result:?}");
    };
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(d.kind, "no service");
    assert_eq!(d.call, "inventory.reserve/1");
    assert!(
        d.message.contains("no entry named `inventory`"),
        "{}",
        d.message
    );
    assert!(d.transient && !d.may_have_run);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_call_cancels_the_calls_its_handler_made_from_a_spawned_task() {
    let net = Net::memory();
    let (_orders, shop) = net.shop("orders-1", Plan::PayFromTask).await;
    let (_payments, bank) = net.bank("payments-1", Duration::from_secs(3)).await;
    let web = net.node("web-1").await;

    // The caller gives up after 200 ms (its future is dropped), well before any deadline.
    let call = OrdersClient::new(&web).place("book".into());
    assert!(tokio::time::timeout(200 * MS, call).await.is_err());
    tokio::time::sleep(MS).await;
    assert_eq!(shop.spawned.lock().unwrap().as_deref(), Some("cancelled"));
    assert_eq!(bank.counters.dropped.load(Ordering::SeqCst), 1);
    assert_eq!(bank.counters.finished.load(Ordering::SeqCst), 0);
}
