//! Step 3: one budget clock, on tokio's paused clock with the seed's numbers at 1/10 scale
//! (timeout 6 s, pause 1 s, budget 21 s).

use std::time::Duration;

use cluster::{CallError, RpcErrorKind, Source};
use tokio::time::Instant;

use crate::support::{Cluster, Mode, SearchClient};

const S: Duration = Duration::from_secs(1);

fn starts(e: &CallError<impl std::fmt::Debug>) -> Vec<Duration> {
    e.report().attempts.iter().map(|a| a.started).collect()
}

/// Rounds to 10 ms: tokio's timer wheel fires each timer up to 1 ms late, and a call of many
/// attempts adds those up.
fn ms(d: Duration) -> Duration {
    Duration::from_millis(((d.as_millis() + 5) / 10 * 10) as u64)
}

fn rpc_kind<E: std::fmt::Debug>(e: &CallError<E>) -> RpcErrorKind {
    match e {
        CallError::Rpc(e) => e.kind(),
        other => panic!("expected an RpcError, got {other:?}"),
    }
}

/// One row of the timing table in docs/calls.md.
struct Row {
    call: &'static str,
    starts: Vec<Duration>,
    failed_at: Duration,
    error: String,
}

fn secs(d: Duration) -> String {
    format!("{} s", ms(d).as_secs_f64())
}

fn render(rows: &[Row]) -> String {
    let mut out =
        String::from("| call | attempts start at | fails at | error |\n|---|---|---|---|\n");
    for r in rows {
        let starts = if r.starts.len() > 4 {
            let last = r.starts.last().copied().unwrap_or_default();
            format!(
                "{}, {}, … {} ({} attempts)",
                secs(r.starts[0]),
                secs(r.starts[1]),
                secs(last),
                r.starts.len()
            )
        } else {
            r.starts
                .iter()
                .map(|d| secs(*d))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out += &format!(
            "| {} | {} | {} | {} |\n",
            r.call,
            starts,
            secs(r.failed_at),
            r.error
        );
    }
    out
}

async fn timed<T, E: std::fmt::Debug>(
    call: impl std::future::IntoFuture<Output = Result<T, CallError<E>>>,
) -> (CallError<E>, Duration) {
    let start = Instant::now();
    let err = call.await.err().expect("the call fails");
    (err, ms(start.elapsed()))
}

#[tokio::test(start_paused = true)]
async fn the_seed_timing_table_with_one_budget_clock() {
    let cluster = Cluster::memory();
    let (provider, engine) = cluster.provider("search-1", Mode::Hang).await;
    let client = SearchClient::new(&cluster.node("client").await);
    let mut rows = Vec::new();

    // Idempotent, every attempt times out: attempts at 0, 7, 14 s; the pause after the third
    // would reach 21 s, so the call ends when the third attempt does, at 20 s.
    let (err, at) = timed(client.search("rust".into())).await;
    assert_eq!(rpc_kind(&err), RpcErrorKind::Timeout);
    assert_eq!(
        starts(&err).into_iter().map(ms).collect::<Vec<_>>(),
        [Duration::ZERO, 7 * S, 14 * S]
    );
    assert_eq!(at, 20 * S);
    assert_eq!(engine.counters.started(), 3);
    rows.push(Row {
        call: "idempotent `search`, provider hangs",
        starts: starts(&err),
        failed_at: at,
        error: "`Timeout`, 3 attempts".into(),
    });

    // Not idempotent: it may have run, so it is never run again. One attempt, fails at 6 s.
    let (err, at) = timed(client.reindex(true)).await;
    assert_eq!(rpc_kind(&err), RpcErrorKind::Timeout);
    assert_eq!(starts(&err), [Duration::ZERO]);
    assert_eq!(at, 6 * S);
    assert_eq!(engine.counters.started(), 4);
    rows.push(Row {
        call: "not idempotent `reindex`, provider hangs",
        starts: starts(&err),
        failed_at: at,
        error: "`Timeout`, 1 attempt".into(),
    });

    // No connection at all (the node died, the registry still lists it): never reached the
    // provider, so retried for any function, every second, until the budget; never past it.
    provider.kill().await;
    let (err, at) = timed(client.reindex(true)).await;
    assert_eq!(rpc_kind(&err), RpcErrorKind::NoConnection);
    let expected: Vec<Duration> = (0..=20).map(|s| s * S).collect();
    assert_eq!(
        starts(&err).into_iter().map(ms).collect::<Vec<_>>(),
        expected
    );
    assert_eq!(at, 20 * S);
    rows.push(Row {
        call: "not idempotent `reindex`, no connection",
        starts: starts(&err),
        failed_at: at,
        error: "`NoConnection`, 21 attempts".into(),
    });

    // Every timed-out attempt was dropped on the provider, none was left running.
    assert_eq!(
        engine
            .counters
            .dropped
            .load(std::sync::atomic::Ordering::SeqCst),
        4
    );
    assert_eq!(engine.counters.running(), 0);

    let table = render(&rows);
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/calls.md"))
        .expect("docs/calls.md");
    assert!(
        doc.contains(&table),
        "docs/calls.md must carry the table this test measures:\n{table}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_per_call_retry_after_keeps_the_providers_budget() {
    let cluster = Cluster::memory();
    let (_provider, _engine) = cluster.provider("search-1", Mode::Hang).await;
    let client = SearchClient::new(&cluster.node("client").await);

    // The seed's shallow merge replaced the provider's retry list and took the budget from the
    // library default (210 s). Here only `after` changes: attempts at 0, 6.1, 12.2, 18.3 s, the
    // last one cut to the 2.7 s left, and the call ends at the provider's 21 s budget.
    let (err, at) = timed(
        client
            .search("rust".into())
            .retry_after(Duration::from_millis(100)),
    )
    .await;
    let ms_starts: Vec<u128> = starts(&err)
        .into_iter()
        .map(|d| ms(d).as_millis())
        .collect();
    assert_eq!(ms_starts, [0, 6100, 12200, 18300]);
    assert_eq!(at, 21 * S);
    let report = err.report();
    assert_eq!(report.budget, Some((21 * S, Source::ProviderService)));
}

#[tokio::test(start_paused = true)]
async fn per_call_overrides_win_and_retry_can_be_turned_off() {
    let cluster = Cluster::memory();
    let (_provider, engine) = cluster.provider("search-1", Mode::Hang).await;
    let client = SearchClient::new(&cluster.node("client").await);

    let (err, at) = timed(client.search("rust".into()).timeout(2 * S).no_retry()).await;
    assert_eq!(rpc_kind(&err), RpcErrorKind::Timeout);
    assert_eq!(at, 2 * S);
    assert_eq!(err.report().attempts.len(), 1);
    assert_eq!(err.report().budget, None);

    // A longer per-call timeout than the provider's is the caller's right.
    let (_, at) = timed(client.search("rust".into()).timeout(120 * S).no_retry()).await;
    assert_eq!(at, 120 * S);

    // A budget shorter than the timeout cuts the first attempt.
    let (err, at) = timed(client.search("rust".into()).budget(3 * S)).await;
    assert_eq!(at, 3 * S);
    assert_eq!(err.report().attempts.len(), 1);
    assert_eq!(engine.counters.started(), 3);
}

#[tokio::test(start_paused = true)]
async fn client_defaults_sit_between_the_provider_and_the_call() {
    let cluster = Cluster::memory();
    let (_provider, _engine) = cluster.provider("search-1", Mode::Hang).await;
    let client = SearchClient::new(&cluster.node("client").await)
        .with_options(cluster::CallOptions::new().timeout(S).retry_budget(5 * S));
    // timeout 1 s (client) and pause 1 s (provider): attempts at 0, 2 s; the one at 4 s would
    // end at the 5 s budget, and starts since it is before it.
    let (err, at) = timed(client.search("rust".into())).await;
    assert_eq!(
        starts(&err).into_iter().map(ms).collect::<Vec<_>>(),
        [Duration::ZERO, 2 * S, 4 * S]
    );
    assert_eq!(at, 5 * S);
    assert_eq!(err.report().budget, Some((5 * S, Source::Client)));
    // The call's own override still wins over the client's default.
    let (_, at) = timed(client.search("rust".into()).budget(S)).await;
    assert_eq!(at, S);
}

#[test]
fn the_options_on_the_attribute_are_in_the_description() {
    // The seed's struct showed the library defaults instead of what the source declared.
    let d = SearchClient::description();
    let declared = cluster::CallOptions::new()
        .timeout(6 * S)
        .retry_enabled(true)
        .retry_after(S)
        .retry_budget(21 * S)
        .retry_factor(1.0)
        .retry_jitter(false);
    assert_eq!(d.options, declared);
    assert_eq!(d.version, semver::Version::new(2, 1, 0));
    let search = &d.functions[0];
    assert_eq!((search.name.as_str(), search.idempotent), ("search", true));
    assert_eq!(
        search.signature,
        "search(String) -> Result<Vec<Hit>, SearchError>"
    );
    assert!(
        !d.functions[1].idempotent,
        "reindex is not declared idempotent"
    );
}

#[tokio::test(start_paused = true)]
async fn durations_too_large_for_the_clock_mean_no_limit_not_a_panic() {
    let cluster = Cluster::memory();
    let (_provider, engine) = cluster.provider("search-1", Mode::Answer).await;
    let client = SearchClient::new(&cluster.node("client").await);
    client
        .search("rust".into())
        .timeout(Duration::MAX)
        .await
        .unwrap();
    client
        .search("rust".into())
        .budget(Duration::MAX)
        .retry_after(Duration::MAX)
        .await
        .unwrap();
    client
        .reindex(true)
        .timeout(Duration::MAX)
        .no_retry()
        .await
        .unwrap();
    assert_eq!(engine.counters.started(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_function_timeout_longer_than_the_service_budget_gets_its_full_attempt() {
    let cluster = Cluster::memory();
    let (_provider, _engine) = cluster.provider("search-1", Mode::Hang).await;
    let client = SearchClient::new(&cluster.node("client").await);
    // The per-call timeout (120 s) is more specific than the provider's 21 s budget: one full
    // attempt, not a cut at 21 s. The seed's README example would otherwise fail early.
    let (err, at) = timed(client.search("rust".into()).timeout(120 * S)).await;
    assert_eq!(at, 120 * S);
    assert_eq!(err.report().attempts.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_zero_timeout_or_budget_of_the_callers_is_refused_at_once_and_nothing_is_sent() {
    let cluster = Cluster::memory();
    let (_provider, engine) = cluster.provider("search-1", Mode::Answer).await;
    let node = cluster.node("client").await;
    let client = SearchClient::new(&node);
    let start = Instant::now();
    let e = client
        .search("rust".into())
        .timeout(Duration::ZERO)
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO, "no attempt, no wait");
    assert_eq!(rpc_kind(&e), RpcErrorKind::InvalidOptions);
    assert!(e.report().attempts.is_empty());
    assert!(!e.may_have_run() && !e.is_transient());
    let message = e.to_string();
    assert!(
        message.starts_with(
            "The call search.search/1 failed: invalid call options\n\nThe reason was:\n  the call's options allow no attempt, so it was refused at once; nothing was sent\n  timeout is 0s, set by this call; give a positive duration\n"
        ),
        "{message}"
    );
    // With retries off too: one zero-length attempt is no call either.
    let e = client
        .reindex(true)
        .no_retry()
        .options(cluster::CallOptions::new().timeout(Duration::ZERO))
        .await
        .unwrap_err();
    assert_eq!(rpc_kind(&e), RpcErrorKind::InvalidOptions);

    // The client's defaults are named when the zero is theirs, and a call that gives its own
    // budget is not held to it.
    let zero = SearchClient::new(&node)
        .with_options(cluster::CallOptions::new().retry_budget(Duration::ZERO));
    let e = zero.search("rust".into()).await.unwrap_err();
    assert_eq!(rpc_kind(&e), RpcErrorKind::InvalidOptions);
    assert!(
        e.to_string()
            .contains("budget is 0s, set by the client's defaults; give a positive duration"),
        "{e}"
    );
    zero.search("rust".into()).budget(5 * S).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(engine.counters.started(), 1, "only the valid call was sent");
}

#[tokio::test(start_paused = true)]
async fn a_zero_timeout_or_budget_in_a_providers_entry_is_taken_as_unset() {
    use cluster::Registry;
    let cluster = Cluster::memory();
    let (_provider, engine) = cluster.provider("search-1", Mode::Hang).await;
    // The entry as another build (or a hand-made description) might publish it.
    let entry = cluster.registry.lookup("search")[0].clone();
    let mut zero = (*entry.description).clone();
    zero.options.retry_budget = Some(Duration::ZERO);
    for function in &mut zero.functions {
        function.options.timeout = Some(Duration::ZERO);
    }
    let zero = cluster::registry::ServiceEntry::new(entry.node.clone(), std::sync::Arc::new(zero));
    cluster.registry.register(zero).await.unwrap();
    let client = SearchClient::new(&cluster.node("client").await);
    // The service's 6 s timeout stands in for the function's zero, the library's 30 s budget
    // for the service's zero: one attempt of 6 s, not a budget of zero-length attempts.
    let (err, at) = timed(client.reindex(true)).await;
    assert_eq!(rpc_kind(&err), RpcErrorKind::Timeout);
    assert_eq!(err.report().attempts.len(), 1);
    assert_eq!(at, 6 * S);
    assert_eq!(err.report().budget, Some((30 * S, Source::Library)));
    assert_eq!(engine.counters.started(), 1);
}
