//! A client is one `Arc` (`client/mod.rs`, `ClientCore`), a pooled connection is one `Arc`
//! (`transport/tcp/connect.rs`, `Parts`), a call reads its start once (`client/call.rs`,
//! `Sent::started`) and a connection is marked active only when a request gives its place
//! back (`transport/tcp/limit.rs`). Attacked from outside, with real nodes on loopback:
//!
//! - clones of a client given other options or another requirement, and the original changed
//!   after its clones, each calling with its own, side by side;
//! - many clients of one service on one node, calling at once;
//! - a pooled connection closed for idling while calls keep coming (none may fail for it), and
//!   long calls on one (it is never closed under them);
//! - the budget clock: counted from when the call is awaited, client layers included, not from
//!   when it was made; retries stop at it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster::context::{Context, Metadata};
use cluster::layer::{CallInfo, ClientLayer, Outcome};
use cluster::registry::{Registry, ServiceEntry};
use cluster::{CallError, CallOptions, CallReport, Node, Reason, Source};
use tokio::task::{JoinHandle, JoinSet};

use crate::support::{Cluster, Mode, SearchClient, identity, until};

const S: Duration = Duration::from_secs(1);

/// The budget a successful `search` ran under, and its layer.
async fn budget(client: &SearchClient) -> (Duration, Source) {
    let (hits, report) = client
        .search("q".into())
        .reported()
        .await
        .expect("the search answers");
    assert_eq!(hits.len(), 1);
    report.budget.expect("retries are on")
}

/// The reason a `search` fails for, which must be its client's requirement.
/// One call through `client`: the budget it ran with, or `None` if it was refused for its
/// version requirement, as `expected` (`None`) says it must be.
async fn budget_or_refusal(client: &SearchClient, expected: Option<Duration>) -> Option<Duration> {
    match expected {
        Some(_) => Some(budget(client).await.0),
        None => {
            assert_eq!(refused(client).await, Reason::NoVersion);
            None
        }
    }
}

async fn refused(client: &SearchClient) -> Reason {
    match client.search("q".into()).await {
        Err(CallError::Service(e)) => e.reason(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_given_other_options_or_requirement_leaves_the_original_alone() {
    let cluster = Cluster::tcp();
    let (provider, _engine) = cluster.provider("search-1", Mode::Answer).await;
    let caller = cluster.node("web-1").await;
    let original = SearchClient::new(&caller);
    // The original's route is kept first: its clones start out sharing it.
    assert_eq!(budget(&original).await, (21 * S, Source::ProviderService));

    let tighter = original
        .clone()
        .with_options(CallOptions::new().retry_budget(7 * S));
    let stricter = original.clone().require("^3".parse().unwrap());
    assert_eq!(budget(&tighter).await, (7 * S, Source::Client));
    assert_eq!(refused(&stricter).await, Reason::NoVersion);
    assert_eq!(
        budget(&original).await,
        (21 * S, Source::ProviderService),
        "the original took its clone's options"
    );

    // The other way round: the original changed, its clones not.
    let before = original.clone();
    let original = original
        .with_options(CallOptions::new().retry_budget(3 * S))
        .require("^2.1".parse().unwrap());
    assert_eq!(budget(&original).await, (3 * S, Source::Client));
    assert_eq!(budget(&before).await, (21 * S, Source::ProviderService));
    assert_eq!(budget(&tighter).await, (7 * S, Source::Client));
    assert_eq!(refused(&stricter).await, Reason::NoVersion);
    let strict_original = original.clone().require("^9".parse().unwrap());
    assert_eq!(refused(&strict_original).await, Reason::NoVersion);
    assert_eq!(budget(&original).await, (3 * S, Source::Client));

    // A call made before its client is changed keeps what it was made with, and the change
    // still applies to the client's later calls.
    let made = before.search("early".into());
    let before = before.with_options(CallOptions::new().retry_budget(5 * S));
    let (_, report) = made.reported().await.unwrap();
    assert_eq!(report.budget, Some((21 * S, Source::ProviderService)));
    assert_eq!(budget(&before).await, (5 * S, Source::Client));

    // Side by side, many calls at once: each with its own client's.
    let clients = [
        (original.clone(), Some(3 * S)),
        (before.clone(), Some(5 * S)),
        (tighter.clone(), Some(7 * S)),
        (stricter.clone(), None),
    ];
    let mut calls = JoinSet::new();
    for round in 0..50 {
        for (client, expected) in clients.iter().cloned() {
            calls.spawn(async move {
                let got = budget_or_refusal(&client, expected).await;
                assert_eq!(got, expected, "round {round}");
            });
        }
    }
    while let Some(done) = calls.join_next().await {
        done.expect("a call took another client's options");
    }

    caller.shutdown().await;
    provider.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_of_one_service_on_one_node_call_with_their_own() {
    const CLIENTS: usize = 40;
    const CALLS: usize = 8;
    let cluster = Cluster::tcp();
    let (provider, engine) = cluster.provider("search-1", Mode::Answer).await;
    let caller = cluster.node("web-1").await;
    let base = SearchClient::new(&caller);
    // New ones, clones of the first, clones of the one before: each given a budget of its own;
    // every fifth one requires a version no provider has.
    let mut clients: Vec<(SearchClient, Option<Duration>)> = Vec::new();
    let mut previous = base.clone();
    for i in 0..CLIENTS {
        let from = match i % 3 {
            0 => SearchClient::new(&caller),
            1 => base.clone(),
            _ => previous.clone(),
        };
        let own = Duration::from_millis(1000 + i as u64);
        let client = from.with_options(CallOptions::new().retry_budget(own));
        previous = client.clone();
        if i % 5 == 4 {
            clients.push((client.require("^3".parse().unwrap()), None));
        } else {
            clients.push((client, Some(own)));
        }
    }
    clients.push((base.clone(), Some(21 * S)));
    let answered = clients.iter().filter(|(_, b)| b.is_some()).count() * CALLS;

    let mut calls = JoinSet::new();
    for call in 0..CALLS {
        for (i, (client, expected)) in clients.iter().cloned().enumerate() {
            calls.spawn(async move {
                let got = budget_or_refusal(&client, expected).await;
                assert_eq!(got, expected, "client {i}, call {call}");
            });
        }
    }
    while let Some(done) = calls.join_next().await {
        done.expect("a call ran with another client's options");
    }
    assert_eq!(engine.counters.started(), answered, "one attempt each");

    caller.shutdown().await;
    provider.shutdown().await;
}

/// Forwards every connection it accepts to `target`, counting them: opened, and closed both
/// ways. Stops, with every connection, when dropped.
struct Proxy {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let (accepted, closed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let task = tokio::spawn({
            let (accepted, closed) = (accepted.clone(), closed.clone());
            async move {
                // Dropped with this task: ends every link.
                let mut links = JoinSet::new();
                while let Ok((mut caller, _)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let closed = closed.clone();
                    links.spawn(async move {
                        let _ = caller.set_nodelay(true);
                        let mut provider = tokio::net::TcpStream::connect(target).await.unwrap();
                        let _ = provider.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut caller, &mut provider).await;
                        closed.fetch_add(1, Ordering::SeqCst);
                    });
                }
            }
        });
        Self {
            addr,
            accepted,
            closed,
            task,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn closed(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The caller's idle timeout: it closes a pooled connection idle for three quarters of it.
const IDLE: Duration = Duration::from_millis(80);
const CLOSES_AFTER: Duration = Duration::from_millis(60);

/// A provider of `search` reached through a counting proxy, and a caller with a short idle
/// timeout.
async fn behind_a_proxy(
    cluster: &Cluster,
    mode: Mode,
) -> (Node, Arc<crate::support::Engine>, Proxy, Node) {
    let (provider, engine) = cluster.provider("search-1", mode).await;
    let proxy = Proxy::start(provider.addr()).await;
    // The provider's entry under its own name (which its certificate still matches) at the
    // proxy's address, of a later generation, replaces the node's own.
    let mut entry = ServiceEntry::clone(&cluster.registry.lookup("search")[0]);
    entry.node.addr = proxy.addr;
    entry.node.generation += 1;
    cluster.registry.register(entry).await.unwrap();
    let caller = Node::builder()
        .name("web-1")
        .registry(cluster.registry.clone())
        .identity(identity("web-1"))
        .idle_timeout(IDLE)
        .start()
        .await
        .expect("the caller starts");
    let at_proxy = || {
        let seen = caller.registry().lookup("search");
        seen.len() == 1 && seen[0].node.addr == proxy.addr
    };
    until("the caller sees search-1 at the proxy", at_proxy).await;
    (provider, engine, proxy, caller)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_busy_with_long_calls_is_never_closed_for_idling() {
    let cluster = Cluster::tcp();
    let (provider, engine, proxy, caller) = behind_a_proxy(&cluster, Mode::Slow(10 * IDLE)).await;
    let client = SearchClient::new(&caller);

    // `reindex` is never sent twice: a connection closed under it would fail the call.
    let one = client.reindex(false).await;
    assert_eq!(one.ok(), Some(42), "a long call failed");
    assert_eq!(engine.counters.started(), 1);
    assert_eq!(
        (proxy.accepted(), proxy.closed()),
        (1, 0),
        "closed under the call"
    );

    // Two long calls that overlap: after the first ends (the connection's last activity), the
    // second runs on alone for more than the idle timeout.
    let first = tokio::spawn({
        let client = client.clone();
        async move { client.reindex(false).await }
    });
    until("the first long call runs", || {
        engine.counters.started() == 2
    })
    .await;
    // A stretch of the first call's run, so that the second outlasts it by more than the idle
    // timeout: the duration is the subject, not a wait for an event.
    tokio::time::sleep(5 * IDLE).await;
    let second = tokio::spawn({
        let client = client.clone();
        async move { client.reindex(true).await }
    });
    let first = first.await.unwrap();
    assert_eq!(first.ok(), Some(42), "the first call failed");
    let second = second.await.unwrap();
    assert_eq!(second.ok(), Some(42), "the second call failed");
    assert_eq!(engine.counters.started(), 3, "a call was sent twice");
    assert_eq!(
        (proxy.accepted(), proxy.closed()),
        (1, 0),
        "the connection was closed under a call"
    );

    // Idle now: it closes, and the next call opens another.
    until("the idle connection closes", || proxy.closed() == 1).await;
    engine.set_mode(Mode::Answer);
    let next = client.reindex(false).await;
    assert_eq!(next.ok(), Some(42));
    assert_eq!(proxy.accepted(), 2);

    caller.shutdown().await;
    provider.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_keep_arriving_around_the_idle_close_never_fail_for_it() {
    const CALLERS: usize = 3;
    const CALLS: usize = 40;
    let cluster = Cluster::tcp();
    let (provider, engine, proxy, caller) = behind_a_proxy(&cluster, Mode::Answer).await;
    let client = SearchClient::new(&caller);

    // Rounds of a call from each caller, a millisecond apart, after a pause of about as long
    // as the connection may idle (two thirds to four thirds of it; every fourth round twice
    // it, so that it surely closes): some calls arrive just before the close, some just
    // after, some while it happens. `reindex` is never sent twice: a call that lost its
    // request to the close would fail.
    let mut rng = fastrand::Rng::with_seed(7);
    let mut failed = Vec::new();
    for round in 0..CALLS {
        let ms = CLOSES_AFTER.as_millis() as u64;
        let pause = if round % 4 == 3 {
            2 * ms
        } else {
            rng.u64(ms * 2 / 3..=ms * 4 / 3)
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let mut callers = JoinSet::new();
        for n in 0..CALLERS as u64 {
            let client = client.clone();
            callers.spawn(async move {
                tokio::time::sleep(Duration::from_millis(n)).await;
                client.reindex(false).no_retry().await
            });
        }
        while let Some(done) = callers.join_next().await {
            match done.unwrap() {
                Ok(42) => {}
                other => failed.push(format!("round {round}: {other:?}")),
            }
        }
    }
    assert!(failed.is_empty(), "calls failed: {failed:?}");
    assert_eq!(engine.counters.started(), CALLERS * CALLS, "each ran once");
    // The race was run: the pooled connection was closed for idling and opened again.
    assert!(
        proxy.accepted() > 1,
        "never closed for idling ({} connection)",
        proxy.accepted()
    );

    caller.shutdown().await;
    provider.shutdown().await;
}

#[cluster::service(
    name = "clock",
    version = "1.0.0",
    timeout = "5s",
    retry(after = "10ms", budget = "10s", factor = 1.0, jitter = false)
)]
pub trait Clock {
    /// The call's budget and the attempt's time left as the handler reads them, in ms.
    #[call(idempotent)]
    async fn left(&self) -> (Option<u64>, u64);
    /// Never answers.
    #[call(idempotent)]
    async fn hang(&self) -> u64;
}

struct Hands {
    hung: AtomicUsize,
}

impl Clock for Arc<Hands> {
    async fn left(&self) -> (Option<u64>, u64) {
        let ctx = Context::current().expect("a handler has its context");
        let ms = |d: Duration| d.as_millis() as u64;
        (ctx.budget_remaining().map(ms), ms(ctx.remaining()))
    }

    async fn hang(&self) -> u64 {
        self.hung.fetch_add(1, Ordering::SeqCst);
        std::future::pending().await
    }
}

/// A client layer that takes `LAYER` of the caller's thread before every call, and keeps the
/// elapsed time it is told of.
struct Slow(Arc<Mutex<Vec<Duration>>>);

const LAYER: Duration = Duration::from_millis(300);

impl ClientLayer for Slow {
    fn on_call(&self, _call: &CallInfo<'_>, _metadata: &mut Metadata) -> Result<(), String> {
        std::thread::sleep(LAYER);
        Ok(())
    }

    fn on_outcome(&self, _call: &CallInfo<'_>, _outcome: Outcome<'_>, elapsed: Duration) {
        self.0.lock().unwrap().push(elapsed);
    }
}

/// A provider of `clock` and a caller whose client layer is [`Slow`].
async fn clocks(cluster: &Cluster) -> (Node, Arc<Hands>, Node, Arc<Mutex<Vec<Duration>>>) {
    let provider = cluster.node("clock-1").await;
    let hands = Arc::new(Hands {
        hung: AtomicUsize::new(0),
    });
    let _registration = provider
        .serve(ClockServer::new(hands.clone()))
        .await
        .unwrap();
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let caller = Node::builder()
        .name("web-1")
        .registry(cluster.registry.clone())
        .identity(identity("web-1"))
        .client_layer(Slow(outcomes.clone()))
        .start()
        .await
        .expect("the caller starts");
    (provider, hands, caller, outcomes)
}

fn first_started(report: &CallReport) -> Duration {
    report.attempts.first().expect("an attempt").started
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_counts_from_the_await_client_layers_included() {
    let cluster = Cluster::tcp();
    let (provider, _hands, caller, outcomes) = clocks(&cluster).await;
    let client = ClockClient::new(&caller);
    // The connection opened first, so that the call below measures the clock alone.
    client.left().await.unwrap();

    let awaited = Instant::now();
    let ((budget, attempt), report) = client.left().budget(S).reported().await.unwrap();
    let took = awaited.elapsed();
    let budget = budget.expect("the budget travels with the request");
    // The layer's 300 ms are the call's: 700 ms at most are left when the request is written.
    assert!(
        budget <= 700,
        "the provider was told {budget} ms of a 1 s budget after the layer took 300 ms"
    );
    assert!(attempt <= 700, "the attempt's time left: {attempt} ms");
    assert!(budget > 0 && attempt > 0);
    assert!(report.elapsed >= LAYER && report.elapsed <= took);
    let seen = *outcomes.lock().unwrap().last().unwrap();
    assert!(
        seen >= LAYER && seen <= took,
        "the layer was told {seen:?}; the call took {took:?}"
    );

    caller.shutdown().await;
    provider.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_made_early_counts_its_budget_from_its_await_not_from_when_it_was_made() {
    let cluster = Cluster::tcp();
    let provider = cluster.node("clock-1").await;
    let hands = Arc::new(Hands {
        hung: AtomicUsize::new(0),
    });
    let _registration = provider.serve(ClockServer::new(hands)).await.unwrap();
    let caller = cluster.node("web-1").await;
    let client = ClockClient::new(&caller);
    client.left().await.unwrap();

    let made = client.left().budget(S);
    // Time between making the call and awaiting it is what this test is about: no event to
    // wait for instead.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let ((budget, _), report) = made.reported().await.unwrap();
    let budget = budget.expect("the budget travels with the request");
    assert!(
        budget > 700,
        "the budget was counted from before the await: {budget} ms of 1 s left"
    );
    assert!(first_started(&report) < Duration::from_millis(100));

    caller.shutdown().await;
    provider.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_stop_at_the_budget_counted_from_the_await() {
    const BUDGET: Duration = Duration::from_millis(700);
    let cluster = Cluster::tcp();
    let (provider, hands, caller, outcomes) = clocks(&cluster).await;
    let client = ClockClient::new(&caller);
    client.left().await.unwrap();

    let awaited = Instant::now();
    let err = client
        .hang()
        .timeout(Duration::from_millis(100))
        .retry_after(Duration::from_millis(10))
        .budget(BUDGET)
        .await
        .expect_err("nothing answers");
    let took = awaited.elapsed();
    let report = err.report();
    // The budget's end is 700 ms after the await; the layer took 300 of them. Counted from
    // after the layer, the call would end near 1 s.
    assert!(
        took < BUDGET + Duration::from_millis(150),
        "the call ended {took:?} after its await, past its {BUDGET:?} budget"
    );
    assert!(report.attempts.len() >= 2, "retried: {:?}", report.attempts);
    // The last attempt may find its time gone before the provider starts it.
    let hung = hands.hung.load(Ordering::SeqCst);
    assert!(hung <= report.attempts.len() && hung + 2 >= report.attempts.len());
    for attempt in &report.attempts {
        assert!(
            attempt.started + attempt.elapsed <= BUDGET + Duration::from_millis(50),
            "an attempt ran past the budget: {attempt:?}"
        );
    }
    assert!(report.elapsed <= took && report.elapsed >= BUDGET - Duration::from_millis(20));
    let seen = *outcomes.lock().unwrap().last().unwrap();
    assert!(seen >= BUDGET - Duration::from_millis(20) && seen <= took);

    caller.shutdown().await;
    provider.shutdown().await;
}

/// The per-attempt timeout is the attempt's own: a client layer that takes 300 ms before the
/// call's first attempt leaves that attempt its whole 200 ms (it counts from when the attempt is
/// sent, `Sent::attempts_from`, while the budget counts from the await), and the report says
/// when it started. Were it counted from the await, the attempt would be sent with its time
/// gone, fail as a timeout at once, and a retry would answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_layer_leaves_the_first_attempt_its_whole_timeout() {
    const TIMEOUT: Duration = Duration::from_millis(200);
    let cluster = Cluster::tcp();
    let (provider, _hands, caller, _outcomes) = clocks(&cluster).await;
    let client = ClockClient::new(&caller);
    client.left().await.unwrap();

    // One attempt answers, and it started after the layer.
    let (_, report) = client
        .left()
        .timeout(TIMEOUT)
        .budget(2 * S)
        .reported()
        .await
        .expect("the provider answers at once");
    assert_eq!(
        report.attempts.len(),
        1,
        "the first attempt was sent with its time gone: {:?}",
        report.attempts
    );
    assert!(
        first_started(&report) >= LAYER,
        "the report says the attempt started {:?} into the call; the layer took {LAYER:?}",
        first_started(&report)
    );

    caller.shutdown().await;
    provider.shutdown().await;
}
