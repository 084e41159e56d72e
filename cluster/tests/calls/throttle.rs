//! Issue 15: retry throttling. Retries (and hedges) add at most a share of a node's calls of a
//! service; past it, a call that would be retried fails at once. On paused time.

use std::time::Duration;

use cluster::{CallError, CallOptions, RpcErrorKind};

use crate::support::{BankClient, Cluster, Mode, SearchClient};

fn throttled<E: std::fmt::Debug>(e: &CallError<E>) -> bool {
    matches!(e, CallError::Rpc(e) if e.kind() == RpcErrorKind::RetryThrottled)
}

#[tokio::test(start_paused = true)]
async fn past_the_ratio_a_call_that_would_be_retried_fails_at_once() {
    let cluster = Cluster::memory();
    // Registered, then killed: every attempt finds no connection, and would be retried.
    let (provider, _engine) = cluster.provider("search-1", Mode::Answer).await;
    provider.kill().await;
    let options = CallOptions::new()
        .retry_ratio(0.1)
        .retry_window(Duration::from_secs(10))
        .retry_floor(0);
    let client = SearchClient::new(&cluster.node("client").await).with_options(options);
    let (mut attempts, mut fast) = (0, 0);
    for _ in 0..100 {
        let started = tokio::time::Instant::now();
        let err = client.search("rust".into()).await.unwrap_err();
        let made = err.report().attempts.len();
        attempts += made;
        if throttled(&err) {
            fast += 1;
            // A pause of 1 s before each retry that was let through, none after the last.
            let pauses = Duration::from_secs(made as u64 - 1);
            assert_eq!(
                started.elapsed(),
                pauses,
                "failed at once after its last attempt"
            );
            assert!(!err.to_string().is_empty());
            let CallError::Rpc(e) = &err else {
                unreachable!()
            };
            assert!(!e.may_have_run(), "its attempt never ran");
            assert!(e.detail().contains("10% of its calls"), "{}", e.detail());
        }
    }
    assert!(attempts <= 110, "100 calls made {attempts} attempts");
    assert!(fast >= 90, "{fast} of 100 throttled");
}

#[tokio::test(start_paused = true)]
async fn the_floor_lets_a_node_that_calls_rarely_retry() {
    let cluster = Cluster::memory();
    let (provider, _engine) = cluster.provider("search-1", Mode::Answer).await;
    provider.kill().await;
    // One call, retried a second apart for its 21 s budget: the floor of 10 a second allows it.
    let client = SearchClient::new(&cluster.node("client").await);
    let err = client.search("rust".into()).await.unwrap_err();
    assert!(!throttled(&err), "{err}");
    assert!(
        err.report().attempts.len() > 15,
        "{}",
        err.report().attempts.len()
    );
}

#[tokio::test(start_paused = true)]
async fn a_provider_failing_every_call_gets_at_most_a_fifth_more_attempts_than_calls() {
    let cluster = Cluster::memory();
    let (provider, _engine) = cluster.provider("search-1", Mode::Answer).await;
    provider.kill().await;
    let client = SearchClient::new(&cluster.node("client").await);
    // 1,000 calls a second for a second, each retried a second apart for its 21 s budget
    // unless throttled: the library's 20 % of calls over 10 s, and 10 a second.
    let mut calls = Vec::new();
    for _ in 0..1_000 {
        let call = client.clone();
        calls.push(tokio::spawn(async move {
            call.search("rust".into())
                .await
                .unwrap_err()
                .report()
                .attempts
                .len()
        }));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut attempts = 0;
    for call in calls {
        attempts += call.await.unwrap();
    }
    // 200 from the ratio, and the floor's 10 a second over the 21 s the calls can last.
    assert!(
        attempts <= 1_000 + 200 + 210,
        "1,000 calls made {attempts} attempts"
    );
    // Without throttling each would have made 21.
    assert!(
        attempts >= 1_000 + 200,
        "{attempts}: the floor and ratio are used"
    );
}

/// bank-a, slow, with the usual frame; bank-b, quick, whose frames hold 4 KiB.
async fn a_slow_bank_and_a_quick_one_with_small_frames(
    cluster: &Cluster,
) -> (Vec<cluster::Node>, BankClient) {
    use crate::support::{BankServer, Vault};
    let mut nodes = Vec::new();
    for (name, frame, takes) in [("bank-a", None, 5), ("bank-b", Some(4 << 10), 0)] {
        let mut builder = cluster::Node::builder()
            .name(name)
            .registry(cluster.registry.clone())
            .memory(cluster.memory.as_ref().unwrap());
        if let Some(frame) = frame {
            builder = builder.max_frame(frame);
        }
        let node = builder.start().await.unwrap();
        let vault = Vault::new(name);
        *vault.balance_takes.lock().unwrap() = Duration::from_secs(takes);
        let _registration = node.serve(BankServer::new(vault)).await.unwrap();
        nodes.push(node);
    }
    (nodes, BankClient::new(&cluster.node("client").await))
}

/// Two reads: each is answered by bank-b, at once or by its hedge after 50 ms.
async fn two_reads_answered_quickly(client: &BankClient) {
    for _ in 0..2 {
        let started = tokio::time::Instant::now();
        let (name, report) = client.balance().reported().await.unwrap();
        assert_eq!(name, "bank-b", "{report}");
        assert!(
            started.elapsed() <= Duration::from_millis(50),
            "{:?}: {report}",
            started.elapsed()
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_replica_is_hedged_to_a_quick_one_with_small_frames() {
    let cluster = Cluster::memory();
    let (_nodes, client) = a_slow_bank_and_a_quick_one_with_small_frames(&cluster).await;
    two_reads_answered_quickly(&client).await;
}

#[tokio::test(start_paused = true)]
async fn a_hedge_that_no_replica_can_take_does_not_spend_retry_throttling() {
    let cluster = Cluster::memory();
    let (_nodes, client) = a_slow_bank_and_a_quick_one_with_small_frames(&cluster).await;
    // A read whose metadata makes it larger than bank-b's frame: on bank-a it waits 5 s, and
    // no hedge goes (bank-b cannot take it); the turn that picks bank-b fails at once, TooLarge.
    let big = "x".repeat(4 << 10);
    for _ in 0..2 {
        match client
            .balance()
            .metadata("pad", big.as_str())
            .reported()
            .await
        {
            Ok((name, report)) => {
                assert_eq!(name, "bank-a");
                assert_eq!(report.attempts.len(), 1, "no hedge: {report}");
            }
            Err(e) => assert!(e.to_string().contains("frames of at most"), "{e}"),
        }
    }
    // The hedges it did not send spent nothing: the ordinary reads after it are hedged.
    two_reads_answered_quickly(&client).await;
}
