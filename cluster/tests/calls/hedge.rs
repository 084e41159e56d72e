//! Issue 15: hedging. After the delay without an answer, a copy goes to another replica; the
//! first answer wins and the other attempt is cancelled. On paused time.

use std::sync::atomic::Ordering;
use std::time::Duration;

use cluster::{AttemptKind, CallOptions};

use crate::support::{BankClient, Cluster};

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn a_hedge_fires_at_its_delay_and_the_slower_attempt_is_cancelled() {
    let cluster = Cluster::memory();
    let (_slow, slow) = cluster.bank("bank-slow").await;
    let (_quick, quick) = cluster.bank("bank-quick").await;
    *slow.balance_takes.lock().unwrap() = 1_000 * MS;
    *quick.balance_takes.lock().unwrap() = 10 * MS;
    let client = BankClient::new(&cluster.node("client").await);
    // Two calls: the balancer sends one's first attempt to each replica.
    for _ in 0..2 {
        let started = tokio::time::Instant::now();
        let (answer, report) = client.balance().reported().await.unwrap();
        assert_eq!(answer, "bank-quick");
        let took = started.elapsed();
        let kinds: Vec<_> = report
            .attempts
            .iter()
            .map(|a| (a.kind, a.provider.node.clone()))
            .collect();
        if report.attempts.len() == 1 {
            // The first attempt went to the quick replica: no hedge.
            assert_eq!(took, 10 * MS, "{kinds:?}");
        } else {
            // The first went to the slow one; at 50 ms a hedge to the quick one, answered at 60.
            assert_eq!(took, 60 * MS, "{kinds:?}");
            assert_eq!(kinds[0], (AttemptKind::First, "bank-slow".to_owned()));
            assert!(
                report.attempts[0].outcome.starts_with("cancelled"),
                "{:?}",
                report.attempts
            );
            assert_eq!(kinds[1], (AttemptKind::Hedge, "bank-quick".to_owned()));
        }
    }
    tokio::time::sleep(10 * MS).await;
    assert_eq!(slow.balances.load(Ordering::SeqCst), 1);
    assert_eq!(
        slow.balances_dropped.load(Ordering::SeqCst),
        1,
        "the slower attempt's handler was dropped"
    );
}

#[tokio::test(start_paused = true)]
async fn hedges_count_against_retry_throttling() {
    let cluster = Cluster::memory();
    let (_slow, slow) = cluster.bank("bank-slow").await;
    let (_other, other) = cluster.bank("bank-other").await;
    for vault in [&slow, &other] {
        *vault.balance_takes.lock().unwrap() = 200 * MS;
    }
    let no_room = CallOptions::new().retry_ratio(0.0).retry_floor(0);
    let client = BankClient::new(&cluster.node("client").await).with_options(no_room);
    let started = tokio::time::Instant::now();
    let (_, report) = client.balance().reported().await.unwrap();
    assert_eq!(
        report.attempts.len(),
        1,
        "no hedge past the throttle: {:?}",
        report.attempts
    );
    assert_eq!(started.elapsed(), 200 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_function_that_is_not_idempotent_is_never_hedged() {
    let cluster = Cluster::memory();
    let (_a, a) = cluster.bank("bank-a").await;
    let (_b, b) = cluster.bank("bank-b").await;
    for vault in [&a, &b] {
        *vault.deposit_takes.lock().unwrap() = 200 * MS;
    }
    let hedged = CallOptions::new().hedge(10 * MS, 3);
    let client = BankClient::new(&cluster.node("client").await).with_options(hedged);
    let (_, report) = client.deposit(1).reported().await.unwrap();
    assert_eq!(report.attempts.len(), 1, "{:?}", report.attempts);
    assert_eq!(a.ran().len() + b.ran().len(), 1);
}

/// Refuses every request as overloaded, as a provider shedding load does.
struct Shed;

impl cluster::layer::ProviderLayer for Shed {
    fn on_request(&self, _: &cluster::Context) -> Result<(), cluster::layer::Refusal> {
        Err(cluster::layer::Refusal::overloaded("shedding"))
    }
}

#[tokio::test(start_paused = true)]
async fn an_overloaded_hedged_read_is_sent_again_only_overloaded_retries_times() {
    let cluster = Cluster::memory();
    let mut nodes = Vec::new();
    for name in ["bank-a", "bank-b"] {
        let node = cluster::Node::builder()
            .name(name)
            .registry(cluster.registry.clone())
            .memory(cluster.memory.as_ref().unwrap())
            .provider_layer(Shed)
            .start()
            .await
            .unwrap();
        let _registration = node
            .serve(crate::support::BankServer::new(crate::support::Vault::new(
                name,
            )))
            .await
            .unwrap();
        nodes.push(node);
    }
    let client = BankClient::new(&cluster.node("client").await);
    let started = tokio::time::Instant::now();
    let err = client.balance().await.unwrap_err();
    assert_eq!(
        err.report().attempts.len(),
        2,
        "once more, elsewhere, as any call: {err}"
    );
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "no pause: neither ran it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hedged_read_that_never_reached_its_replica_goes_to_another_at_once() {
    let cluster = Cluster::memory();
    let (gone, _) = cluster.bank("bank-gone").await;
    gone.kill().await;
    let (_up, up) = cluster.bank("bank-up").await;
    *up.balance_takes.lock().unwrap() = 10 * MS;
    let client = BankClient::new(&cluster.node("client").await);
    // Two calls: the balancer sends one's first attempt to each replica.
    for _ in 0..2 {
        let started = tokio::time::Instant::now();
        let (answer, report) = client.balance().reported().await.unwrap();
        assert_eq!(answer, "bank-up");
        assert_eq!(
            started.elapsed(),
            10 * MS,
            "no pause after a refused connection: {:?}",
            report.attempts
        );
    }
}

/// Refuses `balance` as overloaded, and keeps the attempt number of each request it is shown.
#[derive(Clone, Default)]
struct ShedBalance(std::sync::Arc<std::sync::Mutex<Vec<u32>>>);

impl cluster::layer::ProviderLayer for ShedBalance {
    fn on_request(&self, ctx: &cluster::Context) -> Result<(), cluster::layer::Refusal> {
        self.0.lock().unwrap().push(ctx.attempt());
        if ctx.function() == "balance" {
            return Err(cluster::layer::Refusal::overloaded("shedding load"));
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_hedged_read_refused_as_overloaded_stops_at_the_bound_and_numbers_its_attempts_in_order()
{
    let cluster = Cluster::memory();
    let mut seen = Vec::new();
    let mut nodes = Vec::new();
    for name in ["bank-a", "bank-b", "bank-c"] {
        let layer = ShedBalance::default();
        let node = cluster::Node::builder()
            .name(name)
            .registry(cluster.registry.clone())
            .memory(cluster.memory.as_ref().unwrap())
            .provider_layer(layer.clone())
            .start()
            .await
            .unwrap();
        let vault = crate::support::Vault::new(name);
        *vault.balance_takes.lock().unwrap() = 100 * MS;
        let _registration = node
            .serve(crate::support::BankServer::new(vault))
            .await
            .unwrap();
        seen.push(layer);
        nodes.push(node);
    }
    let client = BankClient::new(&cluster.node("client").await);
    // Two copies allowed: still no more than `overloaded_retries` (1) sends after the first.
    let err = client.balance().hedge(MS, 2).await.unwrap_err();
    let mut numbers: Vec<u32> = seen
        .iter()
        .flat_map(|l| l.0.lock().unwrap().clone())
        .collect();
    numbers.sort_unstable();
    assert_eq!(err.report().attempts.len(), 2, "{err}");
    assert_eq!(
        numbers,
        [1, 2],
        "each provider is told its attempt's number: {err}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hedge_after_of_zero_is_taken_as_a_millisecond() {
    let cluster = Cluster::memory();
    let mut nodes = Vec::new();
    for name in ["bank-a", "bank-b", "bank-c"] {
        let (node, vault) = cluster.bank(name).await;
        *vault.balance_takes.lock().unwrap() = 100 * MS;
        nodes.push(node);
    }
    let client = BankClient::new(&cluster.node("client").await);
    let (_, report) = client
        .balance()
        .hedge(Duration::ZERO, 2)
        .reported()
        .await
        .unwrap();
    let starts: Vec<_> = report.attempts.iter().map(|a| a.started).collect();
    assert_eq!(starts, [Duration::ZERO, MS, 2 * MS], "{report}");
}
