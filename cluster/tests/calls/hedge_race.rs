//! Attacks on the hedged attempts raced by `Racing` (hedge.rs): attempts that answer in an
//! order other than they were sent, only the last hedge answering, and the call dropped while
//! every copy is out (each provider must see its handler dropped). On paused time.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use cluster::{AttemptKind, CallOptions, Node};
use tokio::time::Instant;

use crate::support::{BankClient, Cluster, Vault};

const MS: Duration = Duration::from_millis(1);

/// Four replicas whose balance takes `takes`, and a client hedging every 10 ms, 3 copies at most.
async fn four(takes: Duration) -> (Cluster, Vec<Node>, Vec<Arc<Vault>>, BankClient) {
    let cluster = Cluster::memory();
    let mut nodes = Vec::new();
    let mut vaults = Vec::new();
    for name in ["bank-a", "bank-b", "bank-c", "bank-d"] {
        let (node, vault) = cluster.bank(name).await;
        *vault.balance_takes.lock().unwrap() = takes;
        nodes.push(node);
        vaults.push(vault);
    }
    let options = CallOptions::new()
        .hedge(10 * MS, 3)
        .retry_ratio(1.0)
        .retry_floor(100);
    let client = BankClient::new(&cluster.node("client").await).with_options(options);
    (cluster, nodes, vaults, client)
}

fn set_all(vaults: &[Arc<Vault>], takes: Duration) {
    for vault in vaults {
        *vault.balance_takes.lock().unwrap() = takes;
    }
}

fn started(vaults: &[Arc<Vault>]) -> usize {
    vaults
        .iter()
        .map(|v| v.balances.load(Ordering::SeqCst))
        .sum()
}

fn dropped(vaults: &[Arc<Vault>]) -> usize {
    vaults
        .iter()
        .map(|v| v.balances_dropped.load(Ordering::SeqCst))
        .sum()
}

#[tokio::test(start_paused = true)]
async fn dropping_a_hedged_call_cancels_every_copy_out() {
    let (_cluster, _nodes, vaults, client) = four(10_000 * MS).await;
    let call = tokio::spawn(async move { client.balance().reported().await });
    tokio::time::sleep(35 * MS).await;
    assert_eq!(started(&vaults), 4, "the first and three hedges are out");
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    tokio::time::sleep(10 * MS).await;
    assert_eq!(
        dropped(&vaults),
        4,
        "every provider saw its handler dropped"
    );
}

#[tokio::test(start_paused = true)]
async fn only_the_last_hedge_answers() {
    let (_cluster, _nodes, vaults, client) = four(10_000 * MS).await;
    let started_at = Instant::now();
    let call = tokio::spawn(async move { client.balance().reported().await });
    // Attempts start at 0, 10, 20, 30 ms; only the one at 30 reads a short time.
    tokio::time::sleep(25 * MS).await;
    set_all(&vaults, 5 * MS);
    let (_, report) = call.await.unwrap().expect("the last hedge answers");
    assert_eq!(started_at.elapsed(), 35 * MS, "{:?}", report.attempts);
    assert_eq!(report.attempts.len(), 4, "{:?}", report.attempts);
    assert_eq!(report.attempts[0].kind, AttemptKind::First);
    for attempt in &report.attempts[..3] {
        assert!(
            attempt.outcome.starts_with("cancelled"),
            "{:?}",
            report.attempts
        );
    }
    tokio::time::sleep(MS).await;
    assert_eq!(started(&vaults), 4);
    assert_eq!(dropped(&vaults), 3, "the three slower copies were dropped");
}

#[tokio::test(start_paused = true)]
async fn attempts_that_answer_in_reverse_order_the_earliest_answer_wins() {
    let (_cluster, _nodes, vaults, client) = four(100 * MS).await;
    let started_at = Instant::now();
    let call = tokio::spawn(async move { client.balance().reported().await });
    // Sent at 0 (100 ms: answers at 100), 10 (50: at 60), 20 (20: at 40), 30 (1 s).
    tokio::time::sleep(5 * MS).await;
    set_all(&vaults, 50 * MS);
    tokio::time::sleep(10 * MS).await;
    set_all(&vaults, 20 * MS);
    tokio::time::sleep(10 * MS).await;
    set_all(&vaults, 1_000 * MS);
    let (_, report) = call.await.unwrap().expect("answered");
    assert_eq!(started_at.elapsed(), 40 * MS, "{:?}", report.attempts);
    assert_eq!(report.attempts.len(), 4, "{:?}", report.attempts);
    let cancelled = report
        .attempts
        .iter()
        .filter(|a| a.outcome.starts_with("cancelled"))
        .count();
    assert_eq!(cancelled, 3, "{:?}", report.attempts);
    tokio::time::sleep(MS).await;
    assert_eq!(dropped(&vaults), 3);
}

#[tokio::test(start_paused = true)]
async fn many_hedged_calls_dropped_at_random_points_leave_no_handler_running() {
    let (_cluster, _nodes, vaults, client) = four(10_000 * MS).await;
    let mut calls = Vec::new();
    for i in 0..40u64 {
        let client = client.clone();
        calls.push((
            i,
            tokio::spawn(async move { client.balance().reported().await }),
        ));
    }
    // Dropped at 0..39 ms: before, between and after each hedge.
    for (i, call) in calls {
        tokio::time::sleep(MS).await;
        let _ = i;
        call.abort();
    }
    tokio::time::sleep(10 * MS).await;
    assert_eq!(
        dropped(&vaults),
        started(&vaults),
        "every handler started was dropped"
    );
}
