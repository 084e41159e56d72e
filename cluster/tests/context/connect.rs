//! Connections: a connect timeout of their own, one connection attempt per peer at a time,
//! requests in flight bounded on this side, and each caller's reply limit. Real TCP.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cluster::registry::{NodeInfo, ServiceEntry};
use cluster::{CallError, Registry, RpcErrorKind};

use crate::support::{Cluster, Engine, Mode, SearchClient, SearchServer};
use crate::{Net, OrdersClient};

/// A listener that accepts connections, counts them, and never says a word.
async fn silent_peer() -> (
    std::net::SocketAddr,
    Arc<AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(stream);
        }
    });
    (addr, accepted, task)
}

#[tokio::test]
async fn a_silent_peer_costs_the_connect_timeout_once_for_all_waiting_calls() {
    let net = Net::tcp();
    let (addr, accepted, silent) = silent_peer().await;
    let ghost = ServiceEntry::new(
        NodeInfo::new("ghost", addr, 1).with_wire(Some(1..=2)),
        Arc::new(OrdersClient::description().clone()),
    );
    net.registry.register(ghost).await.unwrap();
    let web = net
        .builder("web-1")
        .connect_timeout(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let client = OrdersClient::new(&web);

    let start = Instant::now();
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.whoami().no_retry().await })
        })
        .collect();
    for call in calls {
        let err = call.await.unwrap().unwrap_err();
        let CallError::Rpc(e) = &err else {
            panic!("expected an RpcError, got {err:?}")
        };
        assert_eq!(e.kind(), RpcErrorKind::NoConnection, "{err}");
        assert!(e.detail().contains("connect timeout"), "{err}");
    }
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "the attempt's timeout is 10 s; the connect timeout 200 ms: {took:?}"
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "ten calls waited for one connection attempt"
    );
    silent.abort();
}

#[tokio::test]
async fn a_request_waiting_behind_the_in_flight_limit_was_never_sent() {
    let cluster = Cluster::tcp();
    let (_provider, engine) = cluster.provider("search-1", Mode::Hang).await;
    let web = cluster::Node::builder()
        .name("web-1")
        .identity(crate::support::identity("web-1"))
        .registry(cluster.registry.clone())
        .max_in_flight_per_connection(1)
        .start()
        .await
        .unwrap();
    let client = SearchClient::new(&web);
    let hanging = tokio::spawn({
        let client = client.clone();
        async move { client.reindex(true).await }
    });
    crate::support::until("the first call runs", || engine.counters.started() == 1).await;

    let err = client
        .reindex(true)
        .no_retry()
        .timeout(Duration::from_millis(200))
        .await
        .unwrap_err();
    let CallError::Rpc(e) = &err else {
        panic!("expected an RpcError, got {err:?}")
    };
    assert_eq!(e.kind(), RpcErrorKind::NoConnection, "{err}");
    assert!(!err.may_have_run(), "it waited on this side: {err}");
    assert_eq!(engine.counters.started(), 1);
    hanging.abort();
}

#[tokio::test]
async fn a_reply_too_large_for_one_caller_fails_that_call_alone() {
    let cluster = Cluster::tcp();
    let provider = cluster.node("search-1").await;
    let engine = Arc::new(Engine::new(
        "search-1",
        Mode::Slow(Duration::from_millis(300)),
    ));
    let _r = provider
        .serve(SearchServer::new(engine.clone()))
        .await
        .unwrap();
    let small = cluster::Node::builder()
        .name("small-frames")
        .identity(crate::support::identity("small-frames"))
        .registry(cluster.registry.clone())
        .max_frame(64 * 1024)
        .start()
        .await
        .unwrap();
    let client = SearchClient::new(&small);

    // A call that may not run twice, in flight on the same connection.
    let deposit = tokio::spawn({
        let client = client.clone();
        async move { client.reindex(true).await }
    });
    crate::support::until("the deposit runs", || engine.counters.started() == 1).await;

    let err = client.repeat(1, 200_000).await.unwrap_err();
    let CallError::Rpc(e) = &err else {
        panic!("expected an RpcError, got {err:?}")
    };
    assert_eq!(e.kind(), RpcErrorKind::ReplyTooLarge, "{err}");
    assert_eq!(e.report().attempts.len(), 1, "it ran; it is not run again");
    assert!(e.detail().contains("more than the caller reads"), "{err}");
    assert_eq!(
        deposit.await.unwrap().unwrap(),
        42,
        "the other call was untouched"
    );
    assert_eq!(client.repeat(1, 1000).await.unwrap().len(), 1000);
    assert_eq!(engine.counters.started(), 1, "the deposit ran once");
}

#[tokio::test]
async fn a_panic_message_too_large_for_the_caller_is_cut_to_fit_and_the_connection_survives() {
    let net = Net::tcp();
    let stock = net.node("inventory-1").await;
    let _r = stock
        .serve(crate::InventoryServer::new(crate::Stock(
            "inventory-1".into(),
        )))
        .await
        .unwrap();
    let small = net
        .builder("small-frames")
        .max_frame(64 * 1024)
        .start()
        .await
        .unwrap();
    let client = crate::InventoryClient::new(&small);
    let err = client.reserve("panic:100000".into()).await.unwrap_err();
    let CallError::Service(e) = &err else {
        panic!("expected a ServiceError, got {err:?}")
    };
    assert_eq!(e.reason(), cluster::Reason::Panicked);
    assert!(
        e.detail().ends_with("bytes cut)"),
        "{}",
        &e.detail()[e.detail().len() - 40..]
    );
    assert!(e.detail().len() < 64 * 1024);
    let seen = client.reserve("book".into()).await.unwrap();
    assert_eq!(seen.node, "inventory-1", "the connection still serves");
}

#[tokio::test]
async fn a_timeout_of_years_means_no_limit_and_breaks_nothing() {
    let cluster = Cluster::tcp();
    let (_provider, _engine) = cluster.provider("search-1", Mode::Answer).await;
    let client = SearchClient::new(&cluster.node("web-1").await);
    let calls = async {
        for timeout in [Duration::MAX, Duration::from_secs(3 * 365 * 24 * 3600)] {
            let hits = client.search("rust".into()).timeout(timeout).await.unwrap();
            assert_eq!(hits.len(), 1);
            assert_eq!(client.reindex(true).timeout(timeout).await.unwrap(), 42);
        }
    };
    // Broken, the connection dies on every attempt and an idempotent call retries forever.
    tokio::time::timeout(Duration::from_secs(10), calls)
        .await
        .expect("the calls end");
}

#[tokio::test]
async fn a_handler_whose_caller_has_gone_is_stopped() {
    let net = Net::tcp();
    let (_payments, bank) = net.bank("payments-1", Duration::from_secs(30)).await;
    let web = net.node("web-1").await;
    let call = tokio::spawn({
        let client = crate::PaymentsClient::new(&web);
        async move { client.charge(1).await }
    });
    crate::support::until("the charge runs", || bank.counters.started() == 1).await;
    // The caller crashes: its connections close, and nobody will read the reply.
    web.kill().await;
    crate::support::until("the handler is stopped", || {
        bank.counters.dropped.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(bank.counters.finished.load(Ordering::SeqCst), 0);
    call.abort();
}

#[tokio::test]
async fn past_the_opening_limit_the_oldest_silent_connection_is_closed_and_callers_get_through() {
    use tokio::io::AsyncReadExt;
    let net = Net::tcp();
    let orders = net
        .builder("orders-1")
        .max_opening_connections(8)
        .start()
        .await
        .unwrap();
    let shop = Arc::new(crate::Shop::new(&orders, crate::Plan::Pay));
    let _r = orders.serve(crate::OrdersServer::new(shop)).await.unwrap();
    // Twenty connections that never say a word, held open.
    let mut silent = Vec::new();
    for _ in 0..20 {
        silent.push(tokio::net::TcpStream::connect(orders.addr()).await.unwrap());
    }
    let client = OrdersClient::new(&net.node("web-1").await);
    let start = Instant::now();
    let seen = client
        .whoami()
        .await
        .expect("a legitimate caller gets through");
    assert_eq!(seen.node, "orders-1");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    // The oldest silent ones were closed to make room.
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(Duration::from_secs(5), silent[0].read(&mut byte)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
}

#[tokio::test]
async fn a_provider_at_its_in_flight_bound_serves_again_once_a_stopped_request_is_forgotten() {
    // One request in flight per connection on the provider: while it runs, the provider reads
    // nothing more from that caller.
    let cluster = Cluster::tcp();
    let provider = cluster::Node::builder()
        .name("search-1")
        .identity(crate::support::identity("search-1"))
        .registry(cluster.registry.clone())
        .max_in_flight_per_connection(1)
        .start()
        .await
        .unwrap();
    let engine = Arc::new(Engine::new("search-1", Mode::Hang));
    let _r = provider
        .serve(SearchServer::new(engine.clone()))
        .await
        .unwrap();
    let client = SearchClient::new(&cluster.node("web-1").await);
    let first = client
        .reindex(true)
        .no_retry()
        .timeout(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(&first, CallError::Rpc(e) if e.kind() == RpcErrorKind::Timeout));
    // tarpc stops the handler at its deadline and sends nothing; the request's place comes
    // back when it is forgotten (its deadline and a second's grace), not never.
    let started = Instant::now();
    let second = client
        .reindex(true)
        .no_retry()
        .timeout(Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(matches!(&second, CallError::Rpc(e) if e.kind() == RpcErrorKind::Timeout));
    assert_eq!(
        engine.counters.started(),
        2,
        "the second request was read and run"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "it ran until its own deadline"
    );
}
