//! Admission's reserve, counted per caller over all its connections (`server/admission.rs`,
//! `shares.rs`, docs/reliability.md step 8), from outside: real nodes on loopback, a caller
//! with several connections, calls that end every way, a peer that names itself anew on every
//! connection, wire 1 callers, a drain.
//!
//! With `max_concurrent_calls(16)` the reserve is 2 places (past 14 running) and a caller's
//! share of it is 1: a caller with 1 or more calls running is refused there.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cluster::{CallOptions, MemoryRegistry, Node, NodeBuilder, Reason};
use tokio::task::JoinHandle;

type CallError = cluster::CallError<std::convert::Infallible>;

use crate::support::{Engine, Mode, SearchClient, SearchServer, identity, until};

const LIMIT: usize = 16;
/// Past this many running, a caller with a call running is refused.
const RESERVE_FROM: usize = LIMIT - LIMIT / 8;

#[cluster::service(
    name = "gate",
    version = "1.0.0",
    timeout = "30s",
    retry(after = "5ms", budget = "30s", factor = 1.0, jitter = false)
)]
pub trait Gate {
    /// Runs until the gate opens (or its caller gives it up).
    #[call(idempotent)]
    async fn hold(&self) -> u64;
    /// The same, at most once: its handler runs on past its attempt.
    #[call(at_most_once)]
    async fn once(&self) -> u64;
}

/// Handlers that wait for the test to let them go.
#[derive(Debug)]
pub struct Held {
    started: AtomicUsize,
    running: Arc<AtomicUsize>,
    ended: AtomicUsize,
    open: tokio::sync::watch::Sender<u64>,
}

impl Default for Held {
    fn default() -> Self {
        Self {
            started: AtomicUsize::new(0),
            running: Arc::default(),
            ended: AtomicUsize::new(0),
            open: tokio::sync::watch::channel(0).0,
        }
    }
}

struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Held {
    fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }
    fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }
    fn ended(&self) -> usize {
        self.ended.load(Ordering::SeqCst)
    }
    /// Lets every handler running now return.
    fn release(&self) {
        self.open.send_modify(|n| *n += 1);
    }
    async fn gated(&self) -> u64 {
        let mut open = self.open.subscribe();
        self.running.fetch_add(1, Ordering::SeqCst);
        let _running = Running(self.running.clone());
        self.started.fetch_add(1, Ordering::SeqCst);
        let _ = open.changed().await;
        self.ended.fetch_add(1, Ordering::SeqCst);
        7
    }
}

impl Gate for Arc<Held> {
    async fn hold(&self) -> u64 {
        self.gated().await
    }
    async fn once(&self) -> u64 {
        self.gated().await
    }
}

/// A provider of `gate` (and `search`) bounded at [`LIMIT`] calls, and how to make its callers.
struct Setup {
    registry: MemoryRegistry,
    secure: bool,
    provider: Node,
    gate: Arc<Held>,
    engine: Arc<Engine>,
    callers: Vec<Node>,
}

impl Setup {
    async fn new(secure: bool) -> Self {
        Self::with(secure, |b| b).await
    }

    async fn with(secure: bool, more: impl FnOnce(NodeBuilder) -> NodeBuilder) -> Self {
        let registry = MemoryRegistry::new();
        let builder = Self::builder_of(&registry, secure, "gate-1").max_concurrent_calls(LIMIT);
        let provider = more(builder).start().await.expect("the provider starts");
        let gate = Arc::new(Held::default());
        let engine = Arc::new(Engine::new("gate-1", Mode::Answer));
        let _g = provider.serve(GateServer::new(gate.clone())).await.unwrap();
        let _s = provider
            .serve(SearchServer::new(engine.clone()))
            .await
            .unwrap();
        Self {
            registry,
            secure,
            provider,
            gate,
            engine,
            callers: Vec::new(),
        }
    }

    fn builder_of(registry: &MemoryRegistry, secure: bool, name: &str) -> NodeBuilder {
        let builder = Node::builder().name(name).registry(registry.clone());
        if secure {
            builder.identity(identity(name))
        } else {
            builder.insecure()
        }
    }

    /// A new node named `name`: its own connection to the provider, whatever other nodes of
    /// that name hold.
    async fn caller(&mut self, name: &str) -> (Node, GateClient) {
        self.caller_with(name, |b| b).await
    }

    async fn caller_with(
        &mut self,
        name: &str,
        more: impl FnOnce(NodeBuilder) -> NodeBuilder,
    ) -> (Node, GateClient) {
        let node = more(Self::builder_of(&self.registry, self.secure, name))
            .start()
            .await
            .expect("a caller starts");
        self.callers.push(node.clone());
        let client = GateClient::new(&node);
        (node, client)
    }

    async fn teardown(self) {
        self.gate.release();
        for node in &self.callers {
            node.kill().await;
        }
        self.provider.kill().await;
    }
}

type Call = JoinHandle<Result<u64, CallError>>;

/// Sends one `hold` and waits until its handler runs (admitted) or it is answered (refused).
async fn try_hold(client: &GateClient, gate: &Held) -> Result<Call, CallError> {
    let client = client.clone();
    started_or_answered(
        gate,
        tokio::spawn(async move { client.hold().no_retry().await }),
    )
    .await
}

/// A `hold` that waits its turn (refusals retried), which must be admitted within 10 s: a
/// place given back late is waited for, a place never given back fails the test.
async fn hold(client: &GateClient, gate: &Held) -> Call {
    let client = client.clone();
    let call = tokio::spawn(async move {
        client
            .hold()
            .retry_after(Duration::from_millis(5))
            .options(CallOptions::new().overloaded_retries(2000))
            .await
    });
    match started_or_answered(gate, call).await {
        Ok(call) => call,
        Err(e) => panic!("a call that waits its turn was never admitted: {e}"),
    }
}

async fn started_or_answered(gate: &Held, call: Call) -> Result<Call, CallError> {
    let before = gate.started();
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        if gate.started() > before {
            return Ok(call);
        }
        if call.is_finished() {
            return match call.await.unwrap() {
                Ok(v) => panic!("answered {v} without running"),
                Err(e) => Err(e),
            };
        }
        assert!(
            Instant::now() < give_up,
            "neither admitted nor refused in 10 s"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// With one call of the caller `hog` running (in `calls`, or detached): a new caller fills the
/// node up to its reserve, and a new connection of `hog` is refused there, its one call counted
/// as its own. The calls running, and the new connection's client.
async fn hog_refused_in_the_reserve(
    setup: &mut Setup,
    mut calls: Vec<Call>,
) -> (Vec<Call>, GateClient) {
    let gate = setup.gate.clone();
    let (_f, filler) = setup.caller("filler").await;
    for _ in 0..RESERVE_FROM - 1 {
        calls.push(admitted(try_hold(&filler, &gate).await, "a filler call"));
    }
    assert_eq!(gate.running(), RESERVE_FROM);
    let (_h, hog) = setup.caller("hog").await;
    let detail = overloaded(try_hold(&hog, &gate).await);
    assert!(
        detail.contains("14 calls, 1 of them this caller's"),
        "{detail}"
    );
    (calls, hog)
}

/// Requests `node` answered from its record of at-most-once calls, by its metrics.
fn recalled(node: &Node) -> u64 {
    let metrics = node.render_metrics().expect("the node keeps metrics");
    metrics
        .lines()
        .filter(|line| {
            line.starts_with("cluster_requests_total{") && line.contains("outcome=\"recalled\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The refusal's detail; panics unless the call was refused as overloaded.
fn overloaded(refused: Result<Call, CallError>) -> String {
    match refused {
        Ok(call) => {
            call.abort();
            panic!("admitted, where it should have been refused as overloaded")
        }
        Err(CallError::Service(e)) if e.reason() == Reason::Overloaded => e.detail().to_owned(),
        Err(e) => panic!("refused otherwise than as overloaded: {e:?}"),
    }
}

fn admitted(result: Result<Call, CallError>, what: &str) -> Call {
    result.unwrap_or_else(|e| panic!("{what} was refused: {e}"))
}

/// Gives calls up (each sends a cancel) and waits until their handlers stopped.
async fn give_up(gate: &Held, calls: Vec<Call>) {
    let target = gate.running() - calls.len();
    for call in calls {
        call.abort();
        let _ = call.await;
    }
    until("the given-up handlers stop", || gate.running() == target).await;
}

/// The provider's whole bound, measured: `filler` holds the first 14 places (each waiting its
/// turn, so places given back a moment late are found), then `checked` must get exactly its one
/// place in the reserve, another caller the last, and nothing more goes in.
async fn the_whole_bound_is_usable(setup: &mut Setup, checked: &GateClient, filler: &str) {
    let gate = setup.gate.clone();
    assert_eq!(gate.running(), 0);
    let (_f, filler) = setup.caller(filler).await;
    let mut calls = Vec::new();
    for _ in 0..RESERVE_FROM {
        calls.push(hold(&filler, &gate).await);
    }
    // The checked caller has nothing running: one place in the reserve is its, however many
    // calls it made before and however they ended. It waits its turn, for places given back late.
    calls.push(hold(checked, &gate).await);
    let detail = overloaded(try_hold(checked, &gate).await);
    assert!(
        detail.contains(&format!(
            "{} calls, 1 of them this caller's",
            RESERVE_FROM + 1
        )),
        "{detail}"
    );
    let (_o, other) = setup.caller("last-one").await;
    calls.push(admitted(try_hold(&other, &gate).await, "the last place"));
    let (_n, next) = setup.caller("one-too-many").await;
    let detail = overloaded(try_hold(&next, &gate).await);
    assert!(detail.contains(&format!("limit, {LIMIT}")), "{detail}");
    assert_eq!(gate.running(), LIMIT);
    give_up(&gate, calls).await;
}

#[tokio::test]
async fn one_caller_over_several_connections_is_held_to_its_share_and_others_get_in() {
    let mut setup = Setup::new(true).await;
    let gate = setup.gate.clone();
    // Two nodes with one certificate name: two connections of one caller.
    let (_h1, hog_1) = setup.caller("hog").await;
    let (_h2, hog_2) = setup.caller("hog").await;
    let mut hog_calls = Vec::new();
    for n in 0..RESERVE_FROM {
        let via = if n % 2 == 0 { &hog_1 } else { &hog_2 };
        hog_calls.push(admitted(try_hold(via, &gate).await, "a call below 7/8"));
    }
    assert_eq!(gate.running(), RESERVE_FROM);
    // In the reserve, on either connection, and on one opened only now: refused, counted as
    // one caller's 14.
    let (_h3, hog_3) = setup.caller("hog").await;
    for via in [&hog_1, &hog_2, &hog_3] {
        let detail = overloaded(try_hold(via, &gate).await);
        assert!(
            detail.contains(&format!(
                "{RESERVE_FROM} calls, {RESERVE_FROM} of them this caller's"
            )),
            "{detail}"
        );
    }
    // Another caller gets one place of the reserve, not two; a third the last one.
    let (_w1, web_1) = setup.caller("web-1").await;
    let web_call = admitted(try_hold(&web_1, &gate).await, "another caller's first");
    let detail = overloaded(try_hold(&web_1, &gate).await);
    assert!(
        detail.contains("15 calls, 1 of them this caller's"),
        "{detail}"
    );
    let (_w2, web_2) = setup.caller("web-2").await;
    let last = admitted(try_hold(&web_2, &gate).await, "a third caller's first");
    let (_w3, web_3) = setup.caller("web-3").await;
    let detail = overloaded(try_hold(&web_3, &gate).await);
    assert!(detail.contains("limit, 16"), "{detail}");
    assert_eq!(gate.running(), LIMIT);
    assert_eq!(gate.started(), LIMIT, "no refused call ran");

    // One of the hog's calls ends: the place is a reserve place again, for web-3, not the hog.
    give_up(&gate, vec![hog_calls.pop().unwrap()]).await;
    let detail = overloaded(try_hold(&hog_3, &gate).await);
    assert!(detail.contains("13 of them this caller's"), "{detail}");
    let web_3_call = admitted(try_hold(&web_3, &gate).await, "web-3 in the freed place");

    // Everything ends; the hog's three connections together can again hold exactly 14.
    hog_calls.extend([web_call, last, web_3_call]);
    give_up(&gate, hog_calls).await;
    let mut calls = Vec::new();
    for n in 0..RESERVE_FROM {
        let via = [&hog_1, &hog_2, &hog_3][n % 3];
        calls.push(hold(via, &gate).await);
    }
    overloaded(try_hold(&hog_2, &gate).await);
    give_up(&gate, calls).await;
    setup.teardown().await;
}

#[tokio::test]
async fn a_burst_of_one_callers_calls_on_several_connections_never_takes_the_reserve() {
    let mut setup = Setup::new(true).await;
    let gate = setup.gate.clone();
    let mut hogs = Vec::new();
    for _ in 0..4 {
        hogs.push(setup.caller("hog").await.1);
    }
    // 64 calls at once over four connections: at most 14 are admitted, the rest refused.
    let burst: Vec<Call> = (0..64)
        .map(|n| {
            let hog = hogs[n % 4].clone();
            tokio::spawn(async move { hog.hold().no_retry().await })
        })
        .collect();
    until("every call of the burst runs or is refused", || {
        gate.started() + burst.iter().filter(|c| c.is_finished()).count() == 64
    })
    .await;
    let ran = gate.started();
    assert!(
        (1..=RESERVE_FROM).contains(&ran),
        "{ran} of one caller's calls admitted"
    );
    let mut running = Vec::new();
    for call in burst {
        if call.is_finished() {
            overloaded(Err(call.await.unwrap().unwrap_err()));
        } else {
            running.push(call);
        }
    }
    // Another caller still gets in.
    let (_w, web) = setup.caller("web-1").await;
    running.push(admitted(try_hold(&web, &gate).await, "another caller"));
    give_up(&gate, running).await;
    the_whole_bound_is_usable(&mut setup, &hogs[0], "filler").await;
    setup.teardown().await;
}

#[tokio::test]
async fn every_way_a_call_ends_gives_its_place_back_to_the_caller_and_the_node() {
    // Metrics on the provider: a retry answered from its record is the event the at-most-once
    // cases below wait for.
    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let mut setup = Setup::with(true, |b| b.metrics(loopback)).await;
    let gate = setup.gate.clone();
    let engine = setup.engine.clone();
    let (_h1, hog) = setup.caller("hog").await;
    let search = SearchClient::new(&_h1);

    for _round in 0..2 {
        // More at once than the bound: answered, or refused in the reserve or at the limit.
        engine.set_mode(Mode::Slow(Duration::from_millis(20)));
        let burst: Vec<_> = (0..40)
            .map(|_| {
                let search = search.clone();
                tokio::spawn(async move { search.search("x".into()).no_retry().await })
            })
            .collect();
        let mut refused = 0;
        for call in burst {
            match call.await.unwrap() {
                Ok(_) => {}
                Err(cluster::CallError::Service(e)) if e.reason() == Reason::Overloaded => {
                    refused += 1
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(
            refused > 0,
            "40 calls at once on a bound of 16, none refused"
        );
        // The provider's own errors.
        engine.set_mode(Mode::Fail);
        for _ in 0..5 {
            let e = search.search("x".into()).no_retry().await.unwrap_err();
            assert!(matches!(e, cluster::CallError::App { .. }), "{e}");
        }
        // Panics.
        for _ in 0..5 {
            let e = search.crash("boom".into()).no_retry().await.unwrap_err();
            assert!(!matches!(e, cluster::CallError::App { .. }), "{e}");
        }
        // Timeouts: the deadline travels, the provider stops the handler.
        engine.set_mode(Mode::Slow(Duration::from_secs(5)));
        for _ in 0..5 {
            let e = search
                .search("x".into())
                .timeout(Duration::from_millis(30))
                .no_retry()
                .await
                .unwrap_err();
            assert!(
                matches!(&e, cluster::CallError::Rpc(r) if r.kind() == cluster::RpcErrorKind::Timeout),
                "{e}"
            );
        }
        // Given up by the caller (a cancel).
        let mut held = Vec::new();
        for _ in 0..5 {
            held.push(admitted(try_hold(&hog, &gate).await, "a held call"));
        }
        give_up(&gate, held).await;
        // Answered.
        for _ in 0..3 {
            let call = admitted(try_hold(&hog, &gate).await, "a held call");
            gate.release();
            assert_eq!(call.await.unwrap().unwrap(), 7);
        }
        // At most once, attempts of 100 ms in a budget of 20 s: the first attempt is given up
        // while its handler runs on, detached, and the caller then goes away.
        let (started, ended) = (gate.started(), gate.ended());
        let mut calls = Vec::new();
        for _ in 0..3 {
            let hog = hog.clone();
            let call = tokio::spawn(async move {
                hog.once()
                    .timeout(Duration::from_millis(100))
                    .budget(Duration::from_secs(20))
                    .await
            });
            calls.push(admitted(
                started_or_answered(&gate, call).await,
                "an at-most-once call",
            ));
        }
        // Each first attempt given up (its 100 ms), its retry waits on the record.
        let before = recalled(&setup.provider);
        until("every call's retry reached the record", || {
            recalled(&setup.provider) >= before + 3
        })
        .await;
        for call in &calls {
            call.abort();
        }
        for call in calls {
            let _ = call.await;
        }
        assert_eq!(gate.running(), 3, "the detached handlers run on");
        assert_eq!(gate.started(), started + 3, "retries are not run again");
        gate.release();
        until("the detached handlers end", || gate.ended() == ended + 3).await;
        // ... and one whose caller waits: its retries are answered from the record.
        let call = tokio::spawn({
            let hog = hog.clone();
            async move {
                hog.once()
                    .timeout(Duration::from_millis(100))
                    .budget(Duration::from_secs(20))
                    .retry_after(Duration::from_millis(20))
                    .await
            }
        });
        let call = admitted(
            started_or_answered(&gate, call).await,
            "an at-most-once call",
        );
        let before = recalled(&setup.provider);
        until("the call's retry reached the record", || {
            recalled(&setup.provider) > before
        })
        .await;
        gate.release();
        assert_eq!(call.await.unwrap().unwrap(), 7);
        // The connection dropped mid-call: a node of the hog's name killed with calls
        // running, some of them at-most-once, detached when the connection went.
        let (doomed, doomed_gate) = setup.caller("hog").await;
        let mut lost = Vec::new();
        for n in 0..4 {
            let c = doomed_gate.clone();
            let call = tokio::spawn(async move {
                if n % 2 == 0 {
                    c.hold().no_retry().await
                } else {
                    c.once().budget(Duration::from_secs(20)).await
                }
            });
            lost.push(admitted(
                started_or_answered(&gate, call).await,
                "a doomed call",
            ));
        }
        doomed.kill().await;
        // The at-most-once calls would wait for their record to the end of their budget.
        for call in lost {
            call.abort();
            let _ = call.await;
        }
        until("the plain handlers of the lost connection stop", || {
            gate.running() == 2
        })
        .await;
        gate.release();
        until("the detached ones end", || gate.running() == 0).await;
        until("the slow searches stop", || engine.counters.running() == 0).await;
    }

    // No place is lost: the hog (its counter shared with the killed node's connection) gets
    // exactly its one place in the reserve, and the node its whole bound.
    the_whole_bound_is_usable(&mut setup, &hog, "filler").await;
    setup.teardown().await;
}

#[tokio::test]
async fn a_caller_whose_connections_all_closed_still_counts_its_detached_handler() {
    let mut setup = Setup::new(true).await;
    let gate = setup.gate.clone();
    let (first, hog) = setup.caller("hog").await;
    // An at-most-once call whose attempt is given up: its handler runs on, holding a place.
    let call = tokio::spawn(async move {
        hog.once()
            .timeout(Duration::from_millis(100))
            .budget(Duration::from_secs(20))
            .await
    });
    let call = admitted(
        started_or_answered(&gate, call).await,
        "the at-most-once call",
    );
    // The hog's only connection goes, and the hog with it; its handler runs on.
    first.kill().await;
    call.abort();
    let _ = call.await;
    assert_eq!(gate.running(), 1);
    // The hog comes back on a new connection: its detached handler still counts as its own.
    let (calls, hog) = hog_refused_in_the_reserve(&mut setup, Vec::new()).await;
    // Once it ends, the hog's place in the reserve is its again.
    give_up(&gate, calls).await;
    gate.release();
    until("the detached handler ends", || gate.running() == 0).await;
    the_whole_bound_is_usable(&mut setup, &hog, "filler-2").await;
    setup.teardown().await;
}

#[tokio::test]
async fn a_peer_naming_itself_anew_on_every_connection_does_not_reset_a_live_callers_count() {
    let mut setup = Setup::new(false).await;
    let gate = setup.gate.clone();
    let (_h, hog) = setup.caller("hog").await;
    let hog_call = admitted(try_hold(&hog, &gate).await, "the hog's call");
    // Past the 2,048 names that prune the map of callers with no connection left; a few kept
    // open at a time.
    let addr = setup.provider.addr();
    let mut open = std::collections::VecDeque::new();
    for n in 0..2600 {
        open.push_back(crate::raw_peer::named_connection(addr, &format!("mallory-{n}")).await);
        if open.len() > 8 {
            drop(open.pop_front());
        }
    }
    drop(open);
    // The hog's count survived the pruning: a new connection of its shares its one call.
    let (mut calls, _hog_again) = hog_refused_in_the_reserve(&mut setup, vec![hog_call]).await;
    // A name the peer used and dropped is a fresh caller.
    let (_m, mallory) = setup.caller("mallory-7").await;
    calls.push(admitted(try_hold(&mallory, &gate).await, "a pruned name"));
    give_up(&gate, calls).await;
    the_whole_bound_is_usable(&mut setup, &hog, "filler-2").await;
    setup.teardown().await;
}

#[tokio::test]
async fn wire_1_callers_of_any_name_are_one_caller_and_others_still_get_in() {
    let mut setup = Setup::new(false).await;
    let gate = setup.gate.clone();
    let (_f, filler) = setup.caller("filler").await;
    let mut calls = Vec::new();
    for _ in 0..RESERVE_FROM - 1 {
        calls.push(admitted(try_hold(&filler, &gate).await, "a filler call"));
    }
    let (_o1, old_1) = setup.caller_with("old-1", |b| b.wire_versions(1..=1)).await;
    let (_o2, old_2) = setup.caller_with("old-2", |b| b.wire_versions(1..=1)).await;
    calls.push(admitted(
        try_hold(&old_1, &gate).await,
        "a wire 1 call below 7/8",
    ));
    // In the reserve: old-2 is another node, but on wire 1 it is the same unnamed caller.
    let detail = overloaded(try_hold(&old_2, &gate).await);
    assert!(
        detail.contains("14 calls, 1 of them this caller's"),
        "{detail}"
    );
    let (_w, web) = setup.caller("web-1").await;
    calls.push(admitted(
        try_hold(&web, &gate).await,
        "a wire 2 caller in the reserve",
    ));
    give_up(&gate, calls).await;
    the_whole_bound_is_usable(&mut setup, &old_2, "filler-2").await;
    setup.teardown().await;
}

#[tokio::test]
async fn a_draining_node_refuses_every_caller_and_waits_for_a_callers_calls_on_all_its_connections()
{
    let mut setup = Setup::with(true, |b| b.drain_timeout(Duration::from_secs(20))).await;
    let gate = setup.gate.clone();
    let (_h1, hog_1) = setup.caller("hog").await;
    let (_h2, hog_2) = setup.caller("hog").await;
    let mut calls = Vec::new();
    for via in [&hog_1, &hog_2, &hog_1] {
        calls.push(admitted(try_hold(via, &gate).await, "a hog call"));
    }
    let shutdown = tokio::spawn({
        let provider = setup.provider.clone();
        async move { provider.shutdown().await }
    });
    // Clients stop choosing it once it withdrew; one that has not heard yet still routes to it
    // (a stale entry).
    until("the provider withdrew", || {
        cluster::Registry::services(&setup.registry).is_empty()
    })
    .await;
    let stale = cluster::registry::ServiceEntry::new(
        setup.provider.info().clone(),
        Arc::new(GateClient::description().clone()),
    );
    cluster::Registry::register(&setup.registry, stale)
        .await
        .unwrap();
    // Refused as draining, a caller with calls running or one with none.
    let (_w, web) = setup.caller("web-1").await;
    let give_up_at = Instant::now() + Duration::from_secs(10);
    for via in [&hog_2, &web] {
        loop {
            match try_hold(via, &gate).await {
                Err(CallError::Service(e)) if e.reason() == Reason::Draining => break,
                // Before the drain began.
                Ok(call) => {
                    give_up(&gate, vec![call]).await;
                }
                Err(e) => panic!("{e:?}"),
            }
            assert!(Instant::now() < give_up_at, "never refused as draining");
        }
    }
    assert_eq!(gate.running(), 3);
    assert!(!shutdown.is_finished(), "the drain waits for running calls");
    gate.release();
    for call in calls {
        assert_eq!(
            call.await.unwrap().unwrap(),
            7,
            "a running call was cut off"
        );
    }
    tokio::time::timeout(Duration::from_secs(10), shutdown)
        .await
        .expect("the drain ends once its calls ended")
        .unwrap();
    setup.teardown().await;
}
