//! Issue 15: `#[call(at_most_once)]`. A retry after the call may have run goes to the process it
//! may have run on, which answers from its record instead of running it again; on paused time.

use std::time::Duration;

use cluster::{AttemptKind, CallError, RpcErrorKind};

use crate::support::{BankClient, Cluster};

const S: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

fn kinds(report: &cluster::CallReport) -> Vec<(AttemptKind, String)> {
    report
        .attempts
        .iter()
        .map(|a| (a.kind, a.outcome.clone()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_a_timeout_is_answered_from_the_record_and_the_deposit_runs_once() {
    let cluster = Cluster::memory();
    let (_provider, vault) = cluster.bank("bank-1").await;
    // The deposit takes 8 s; each attempt 5 s. The first times out, its handler runs on.
    *vault.deposit_takes.lock().unwrap() = 8 * S;
    let client = BankClient::new(&cluster.node("client").await);
    let started = tokio::time::Instant::now();
    let (balance, report) = client.deposit(7).reported().await.expect("answered");
    assert_eq!(balance, 1);
    assert_eq!(vault.ran(), [7], "ran once");
    // The retry (at 6 s, after the 1 s pause) waited for the first to end at 8 s.
    assert_eq!(started.elapsed().as_secs(), 8);
    let kinds = kinds(&report);
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert_eq!(kinds[0], (AttemptKind::First, "timeout".to_owned()));
    assert_eq!(kinds[1].0, AttemptKind::SameProcess);
    assert!(
        kinds[1].1.contains("from the provider's record"),
        "{kinds:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_goes_only_to_the_process_the_call_may_have_run_on() {
    let cluster = Cluster::memory();
    let (_a, a) = cluster.bank("bank-a").await;
    let (_b, b) = cluster.bank("bank-b").await;
    for vault in [&a, &b] {
        *vault.deposit_takes.lock().unwrap() = 3600 * S;
    }
    let client = BankClient::new(&cluster.node("client").await);
    let err = client
        .deposit(7)
        .await
        .expect_err("never ends within the budget");
    let CallError::Rpc(e) = &err else {
        panic!("{err}");
    };
    assert_eq!(e.kind(), RpcErrorKind::Timeout);
    assert!(e.may_have_run());
    let attempts = &e.report().attempts;
    assert!(attempts.len() >= 4, "{attempts:?}");
    let first = &attempts[0].provider.node;
    assert!(
        attempts.iter().all(|a| &a.provider.node == first),
        "every retry went to {first}: {attempts:?}"
    );
    assert!(
        attempts[1..]
            .iter()
            .all(|a| a.kind == AttemptKind::SameProcess)
    );
    // The other replica never saw it; neither ran it to its end.
    assert_eq!((a.ran(), b.ran()), (vec![], vec![]));
}

#[tokio::test(start_paused = true)]
async fn a_new_generation_of_the_node_is_not_asked_and_the_call_fails_as_it_may_have_run() {
    let cluster = Cluster::memory();
    let (old, vault) = cluster.bank("bank-1").await;
    *vault.deposit_takes.lock().unwrap() = 3600 * S;
    let client = BankClient::new(&cluster.node("client").await);
    let call = tokio::spawn(async move { client.deposit(7).await });
    // The first attempt times out at 5 s; before the retry at 6 s the node crashes and a new
    // process starts under the same name.
    tokio::time::sleep(5 * S + Duration::from_millis(100)).await;
    old.kill().await;
    let (_new, fresh) = cluster.bank("bank-1").await;
    let err = call.await.unwrap().expect_err("its process is gone");
    let CallError::Rpc(e) = &err else {
        panic!("{err}");
    };
    assert_eq!(
        e.kind(),
        RpcErrorKind::Timeout,
        "as the attempt that may have run: {err}"
    );
    assert!(e.detail().contains("restarted"), "{}", e.detail());
    assert_eq!(
        fresh.ran(),
        Vec::<u64>::new(),
        "the new process never ran it"
    );
    assert_eq!(e.report().attempts.len(), 1, "no attempt after the first");
}

#[tokio::test(start_paused = true)]
async fn a_deposit_that_answers_runs_once_and_is_not_recorded_past_its_budget() {
    let cluster = Cluster::memory();
    let (_provider, vault) = cluster.bank("bank-1").await;
    let client = BankClient::new(&cluster.node("client").await);
    for id in 0..100 {
        assert_eq!(client.deposit(id).await.unwrap(), id + 1);
    }
    assert_eq!(vault.ran(), (0..100).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn a_process_the_registry_dropped_while_it_ran_the_call_is_still_asked_and_answers() {
    use cluster::Registry;
    let cluster = Cluster::memory();
    let (provider, vault) = cluster.bank("bank-1").await;
    *vault.deposit_takes.lock().unwrap() = 8 * S;
    let client = BankClient::new(&cluster.node("client").await);
    let call = tokio::spawn(async move { client.deposit(7).reported().await });
    // A stall past `dead_after` takes a node out of every lookup, though it still runs: here
    // its entry goes while the deposit runs.
    tokio::time::sleep(S).await;
    cluster
        .registry
        .deregister(provider.name(), "bank")
        .await
        .unwrap();
    let (_, report) = call
        .await
        .unwrap()
        .expect("answered by the process it ran on");
    assert_eq!(vault.ran(), [7]);
    let last = report.attempts.last().unwrap();
    assert_eq!(last.kind, AttemptKind::SameProcess);
    assert!(last.outcome.contains("record"), "{:?}", report.attempts);
}

#[tokio::test(start_paused = true)]
async fn a_retry_to_the_process_it_may_have_run_on_is_not_throttled() {
    let cluster = Cluster::memory();
    let (_provider, vault) = cluster.bank("bank-1").await;
    *vault.deposit_takes.lock().unwrap() = 8 * S;
    // No retries at all, by the throttle: the retry on the same process asks for a reply, it
    // runs nothing, and goes all the same.
    let no_room = cluster::CallOptions::new().retry_ratio(0.0).retry_floor(0);
    let client = BankClient::new(&cluster.node("client").await).with_options(no_room);
    let (_, report) = client
        .deposit(7)
        .reported()
        .await
        .expect("answered from the record");
    assert_eq!(vault.ran(), [7]);
    assert!(
        report.attempts.last().unwrap().recalled,
        "{:?}",
        report.attempts
    );
    assert_ne!(report.call_id, None, "the report names the call");
}

/// A ledger as its first release declared it: `post` idempotent, and hedged.
#[cluster::service(
    name = "ledger",
    version = "1.0.0",
    timeout = "5s",
    retry(after = "1s", budget = "30s", factor = 1.0, jitter = false)
)]
pub trait LedgerOld {
    #[call(idempotent, hedge(after = "50ms", max = 2))]
    async fn post(&self, id: u64) -> u64;
}

/// The next release: `post` was found not to be idempotent, and runs at most once.
#[cluster::service(
    name = "ledger",
    version = "1.1.0",
    timeout = "5s",
    retry(after = "1s", budget = "30s", factor = 1.0, jitter = false)
)]
pub trait LedgerNew {
    #[call(at_most_once)]
    async fn post(&self, id: u64) -> u64;
    /// Panics after `ms` milliseconds.
    #[call(at_most_once)]
    async fn explode(&self, ms: u64) -> u64;
}

/// A ledger replica of either release: how long a post takes, and what was posted.
struct Book {
    takes: Duration,
    posted: std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
}

impl LedgerOld for std::sync::Arc<Book> {
    async fn post(&self, id: u64) -> u64 {
        tokio::time::sleep(self.takes).await;
        self.posted.lock().unwrap().push(id);
        id
    }
}

impl LedgerNew for std::sync::Arc<Book> {
    async fn post(&self, id: u64) -> u64 {
        LedgerOld::post(self, id).await
    }
    async fn explode(&self, ms: u64) -> u64 {
        self.posted.lock().unwrap().push(ms);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        panic!("the ledger is corrupt");
    }
}

fn book(
    takes: Duration,
    posted: &std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
) -> std::sync::Arc<Book> {
    std::sync::Arc::new(Book {
        takes,
        posted: posted.clone(),
    })
}

#[tokio::test(start_paused = true)]
async fn an_old_providers_entry_does_not_hedge_what_the_clients_release_runs_at_most_once() {
    let cluster = Cluster::memory();
    let posted = std::sync::Arc::default();
    let old = cluster.node("ledger-old").await;
    let _old = old
        .serve(LedgerOldServer::new(book(S, &posted)))
        .await
        .unwrap();
    // A client of the new release: its build declares `post` at most once.
    let client = LedgerNewClient::new(&cluster.node("client").await);
    let call = tokio::spawn(async move { client.post(7).reported().await });
    // The deploy goes on: two replicas of the new release register while the call runs.
    tokio::time::sleep(10 * MS).await;
    let mut new = Vec::new();
    for name in ["ledger-new-a", "ledger-new-b"] {
        let node = cluster.node(name).await;
        let registration = node
            .serve(LedgerNewServer::new(book(500 * MS, &posted)))
            .await
            .unwrap();
        new.push((node, registration));
    }
    let (_, report) = call.await.unwrap().expect("answered");
    tokio::time::sleep(10 * S).await;
    assert_eq!(report.attempts.len(), 1, "not hedged: {report}");
    assert_eq!(*posted.lock().unwrap(), [7], "posted once");
}

#[tokio::test(start_paused = true)]
async fn a_retry_answered_from_the_record_with_a_panic_ends_the_call() {
    let cluster = Cluster::memory();
    let posted = std::sync::Arc::default();
    let provider = cluster.node("ledger-1").await;
    let _r = provider
        .serve(LedgerNewServer::new(book(S, &posted)))
        .await
        .unwrap();
    let client = LedgerNewClient::new(&cluster.node("client").await);
    // Attempts of 5 s; the handler panics at 6 s, while the retry (sent at 6 s) waits on it.
    let started = tokio::time::Instant::now();
    let err = client.explode(6_000).await.expect_err("it panicked");
    let CallError::Service(e) = &err else {
        panic!("{err}");
    };
    assert_eq!(e.reason(), cluster::Reason::Panicked, "{err}");
    assert_eq!(*posted.lock().unwrap(), [6_000], "ran once");
    assert_eq!(started.elapsed(), 6 * S, "not asked again: {err}");
    assert_eq!(kinds(err.report()).len(), 2, "{err}");
}
