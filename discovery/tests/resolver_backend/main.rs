//! The resolver backend (`discovery/src/backend/resolver/`) on real sockets: providers learned
//! from `Static` endpoints by asking them, typed calls spread over them with the options of
//! their descriptions, a crashed provider dropped, a restarted one learned again, a resolver
//! failure that keeps the last copy, and over mutual TLS a node name that is the certificate's;
//! the bounds: an oversized answer refused, at most `max_endpoints` kept, a round's deadline.
#![allow(unreachable_pub)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use cluster::registry::ServiceEntry;
use cluster::{CallOptions, FunctionDescription, Node, Registry, RpcErrorKind, ServiceDescription};
use cluster_discovery::backend::{ResolverRegistry, ResolverRegistryConfig};
use cluster_discovery::resolve::{Endpoint, Resolve, ResolveError, ResolveFuture, Static};

/// A service whose description carries a timeout of its own.
#[cluster::service(
    name = "greet",
    version = "1.2.0",
    timeout = "300ms",
    retry(after = "50ms", budget = "5s")
)]
pub trait Greet {
    /// The provider's node name; safe to run twice.
    #[call(idempotent)]
    async fn hello(&self) -> String;
    /// Never answers, past the declared timeout; not idempotent, so never run twice.
    async fn slow(&self) -> u32;
}

struct Greeter(String);

impl Greet for Greeter {
    async fn hello(&self) -> String {
        self.0.clone()
    }
    async fn slow(&self) -> u32 {
        std::future::pending().await
    }
}

/// The longest any wait below may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(10);

/// A provider: an insecure node on `addr` whose registry only records its own entries (a
/// provider of this backend is found by being asked).
async fn provider(name: &str, addr: SocketAddr) -> (Node, cluster::Registration) {
    let (node, registration, _) = provider_and_registry(name, addr).await;
    (node, registration)
}

/// [`provider`], and its registry, to register more with.
async fn provider_and_registry(
    name: &str,
    addr: SocketAddr,
) -> (Node, cluster::Registration, ResolverRegistry) {
    let registry = ResolverRegistry::new(Static::new(), ResolverRegistryConfig::default());
    let node = Node::builder()
        .insecure()
        .name(name)
        .listen(addr)
        .registry(registry.clone())
        .start()
        .await
        .expect("the provider starts");
    let registration = node
        .serve(GreetServer::new(Greeter(name.to_owned())))
        .await
        .expect("served");
    (node, registration, registry)
}

fn config() -> ResolverRegistryConfig {
    ResolverRegistryConfig::services(["greet"])
        .refresh(Duration::from_millis(50))
        .drop_after(2)
}

fn endpoints(addrs: &[SocketAddr]) -> Vec<Endpoint> {
    addrs
        .iter()
        .map(|a| Endpoint::new(a.ip().to_string(), a.port()))
        .collect()
}

/// A client node on a resolver backend over `resolver`.
async fn client(resolver: impl Resolve) -> (Node, ResolverRegistry) {
    let registry = ResolverRegistry::new(resolver, config());
    let node = Node::builder()
        .insecure()
        .name("web-1")
        .registry(registry.clone())
        .start()
        .await
        .expect("the client starts");
    (node, registry)
}

/// Waits (on registry changes, not sleeps) until `done` holds of the registry.
async fn until(registry: &ResolverRegistry, done: impl Fn(&ResolverRegistry) -> bool) {
    let mut changes = registry.changes();
    tokio::time::timeout(PATIENCE, async {
        while !done(registry) {
            let _ = changes.changed().await;
        }
    })
    .await
    .expect("the registry got there in time");
}

fn providers_of(registry: &ResolverRegistry) -> Vec<(String, u64)> {
    let mut found: Vec<_> = registry
        .lookup("greet")
        .iter()
        .map(|e| (e.node.name.clone(), e.node.generation))
        .collect();
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_calls_spread_over_providers_learned_from_static_endpoints() {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let (a, _ra) = provider("greet-a", any).await;
    let (b, _rb) = provider("greet-b", any).await;
    let resolver = Static::new().service("greet", endpoints(&[a.addr(), b.addr()]));
    let (web, registry) = client(resolver).await;
    until(&registry, |r| r.lookup("greet").len() == 2).await;

    // The entries are the providers' own descriptions, at the addresses the resolver gave.
    let entries = registry.lookup("greet");
    for entry in entries.iter() {
        assert_eq!(entry.description.version.to_string(), "1.2.0");
        assert!([a.addr(), b.addr()].contains(&entry.node.addr));
    }

    let greet = GreetClient::new(&web);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        seen.insert(greet.hello().await.expect("a call"));
    }
    assert_eq!(seen.len(), 2, "calls went to both providers: {seen:?}");

    // The description's timeout (300 ms) applies: no option was set on this side.
    let started = std::time::Instant::now();
    match greet.slow().await {
        Err(cluster::CallError::Rpc(e)) => assert_eq!(e.kind(), RpcErrorKind::Timeout),
        other => panic!("{other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    web.shutdown().await;
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_provider_is_dropped_and_learned_again_when_it_restarts() {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let (a, _ra) = provider("greet-a", any).await;
    let (b, _rb) = provider("greet-b", any).await;
    let a_addr = a.addr();
    let resolver = Static::new().service("greet", endpoints(&[a_addr, b.addr()]));
    let (web, registry) = client(resolver).await;
    until(&registry, |r| r.lookup("greet").len() == 2).await;
    let first_generation = a.info().generation;

    a.kill().await;
    let greet = GreetClient::new(&web);
    // Before and after the grace, every idempotent call is answered, by `greet-b`.
    for _ in 0..20 {
        assert_eq!(greet.hello().await.expect("a call"), "greet-b");
    }
    until(&registry, |r| {
        providers_of(r).iter().all(|(name, _)| name == "greet-b")
    })
    .await;
    for _ in 0..10 {
        assert_eq!(greet.hello().await.expect("a call"), "greet-b");
    }

    // The same name on the same address, a new generation: learned again, its entry new.
    drop(a);
    let (a, _ra) = provider("greet-a", a_addr).await;
    assert_ne!(a.info().generation, first_generation);
    let generation = a.info().generation;
    until(&registry, |r| {
        providers_of(r).contains(&("greet-a".to_owned(), generation))
    })
    .await;
    // Once its address's cooldown of the crash is over, calls reach it again.
    tokio::time::timeout(PATIENCE, async {
        while greet.hello().await.expect("a call") != "greet-a" {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("a call reached the restarted provider");

    web.shutdown().await;
    a.shutdown().await;
    b.shutdown().await;
}

/// Answers once, then fails, as a DNS server that stopped answering.
struct Flaky {
    inner: Static,
    failing: Arc<AtomicBool>,
}

impl Resolve for Flaky {
    fn resolve<'a>(&'a self, service: &'a str) -> ResolveFuture<'a> {
        if self.failing.load(Ordering::SeqCst) {
            let e = ResolveError::Unavailable {
                service: service.to_owned(),
                source: "the DNS server does not answer".into(),
            };
            return Box::pin(std::future::ready(Err(e)));
        }
        self.inner.resolve(service)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolver_failure_keeps_the_last_copy_and_a_draining_provider_is_dropped() {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let (a, _ra) = provider("greet-a", any).await;
    let (b, _rb) = provider("greet-b", any).await;
    let failing = Arc::new(AtomicBool::new(false));
    let resolver = Flaky {
        inner: Static::new().service("greet", endpoints(&[a.addr(), b.addr()])),
        failing: failing.clone(),
    };
    let (web, registry) = client(resolver).await;
    until(&registry, |r| r.lookup("greet").len() == 2).await;

    failing.store(true, Ordering::SeqCst);
    for _ in 0..5 {
        registry.refresh().await;
    }
    assert_eq!(registry.lookup("greet").len(), 2, "the copy was kept");

    // A draining provider answers that it serves nothing: dropped with no failed probe, while
    // every call goes on being answered.
    let draining = tokio::spawn({
        let a = a.clone();
        async move { a.shutdown().await }
    });
    until(&registry, |r| {
        providers_of(r).iter().all(|(name, _)| name == "greet-b")
    })
    .await;
    let greet = GreetClient::new(&web);
    for _ in 0..10 {
        assert_eq!(greet.hello().await.expect("a call"), "greet-b");
    }
    draining.await.expect("shut down");
    web.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_mutual_tls_the_node_name_is_the_certificates() {
    let ca = cluster::Authority::new("resolver-test").expect("a CA");
    let registry = ResolverRegistry::new(Static::new(), ResolverRegistryConfig::default());
    let search = Node::builder()
        .identity(ca.issue("greet-1").expect("issued"))
        .registry(registry)
        .start()
        .await
        .expect("started");
    let _served = search
        .serve(GreetServer::new(Greeter("greet-1".into())))
        .await
        .expect("served");

    let resolver = Static::new().service("greet", endpoints(&[search.addr()]));
    let registry = ResolverRegistry::new(resolver, config());
    let web = Node::builder()
        .identity(ca.issue("web-1").expect("issued"))
        .registry(registry.clone())
        .start()
        .await
        .expect("started");
    until(&registry, |r| r.lookup("greet").len() == 1).await;
    assert_eq!(registry.lookup("greet")[0].node.name, "greet-1");
    let described = web
        .describe_peer(search.addr(), Duration::from_secs(2))
        .await
        .expect("described");
    assert_eq!(described.node.name, "greet-1");
    assert_eq!(described.services[0].name, "greet");
    assert_eq!(
        GreetClient::new(&web).hello().await.expect("a call"),
        "greet-1"
    );

    // A node of another CA is not described: its connection fails the TLS handshake.
    let stranger = cluster::Authority::new("resolver-test").expect("a CA");
    let outsider = Node::builder()
        .identity(stranger.issue("greet-1").expect("issued"))
        .start()
        .await
        .expect("started");
    let refused = web
        .describe_peer(outsider.addr(), Duration::from_secs(2))
        .await;
    assert!(
        matches!(refused, Err(cluster::DescribeError::Unreachable { .. })),
        "{refused:?}"
    );

    outsider.shutdown().await;
    web.shutdown().await;
    search.shutdown().await;
}

/// A provider of `greet` that also registers `extra`, a description of its own making.
async fn provider_with(name: &str, extra: ServiceDescription) -> (Node, cluster::Registration) {
    let (node, registration, registry) =
        provider_and_registry(name, SocketAddr::from(([127, 0, 0, 1], 0))).await;
    registry
        .register(ServiceEntry::new(node.info().clone(), Arc::new(extra)))
        .await
        .expect("registered");
    (node, registration)
}

/// A description of `functions` functions, each with a signature of `signature_bytes`.
fn description(name: &str, functions: usize, signature_bytes: usize) -> ServiceDescription {
    let functions = (0..functions)
        .map(|i| {
            let signature = format!("f{i}({}) -> ()", "u".repeat(signature_bytes));
            FunctionDescription::new(&format!("f{i}"), &signature, true, CallOptions::default())
        })
        .collect();
    ServiceDescription::new(
        name,
        cluster::service::version(1, 0, 0, "", ""),
        None,
        CallOptions::default(),
        functions,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_a_bound_is_refused_and_an_unchanged_one_keeps_its_entries() {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let (a, _ra) = provider("greet-a", any).await;
    // Over max_functions_per_service (256), though a few KiB encoded.
    let (many, _rm) = provider_with("greet-many", description("many", 300, 1)).await;
    // Within the function count, over max_description_bytes (16 KiB of JSON).
    let (fat, _rf) = provider_with("greet-fat", description("fat", 10, 2048)).await;
    let resolver = Static::new().service("greet", endpoints(&[a.addr(), many.addr(), fat.addr()]));
    let (web, registry) = client(resolver).await;
    until(&registry, |r| r.lookup("greet").len() == 1).await;
    for _ in 0..3 {
        registry.refresh().await;
    }

    // Refused whole: neither the oversized service nor the node's other one is taken.
    assert_eq!(
        providers_of(&registry),
        [("greet-a".to_owned(), a.info().generation)]
    );
    assert!(registry.lookup("many").is_empty());
    assert!(registry.lookup("fat").is_empty());
    let nodes: Vec<String> = registry
        .local_copy()
        .nodes()
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert!(
        !nodes.iter().any(|n| n == "greet-many" || n == "greet-fat"),
        "{nodes:?}"
    );

    // An unchanged answer is not converted again: the same entry, not an equal one.
    let before = registry.lookup("greet")[0].clone();
    let mut changes = registry.changes();
    changes.borrow_and_update();
    registry.refresh().await;
    registry.refresh().await;
    assert!(Arc::ptr_eq(&before, &registry.lookup("greet")[0]));
    assert!(
        !changes.has_changed().expect("the registry is alive"),
        "no change was told"
    );

    // Within raised bounds, the same answers are taken.
    let mut raised = config();
    raised.max_functions_per_service = 300;
    raised.max_description_bytes = 64 * 1024;
    let resolver = Static::new().service("greet", endpoints(&[many.addr(), fat.addr()]));
    let roomy = ResolverRegistry::new(resolver, raised);
    let web2 = Node::builder()
        .insecure()
        .name("web-2")
        .registry(roomy.clone())
        .start()
        .await
        .expect("the client starts");
    until(&roomy, |r| {
        r.lookup("many").len() == 1 && r.lookup("fat").len() == 1
    })
    .await;

    web2.shutdown().await;
    web.shutdown().await;
    for node in [a, many, fat] {
        node.shutdown().await;
    }
}

/// Names the next two of `addrs` at each resolution, as a resolver whose answer moves.
struct Moving {
    addrs: Vec<SocketAddr>,
    next: AtomicUsize,
    last: Arc<Mutex<Vec<SocketAddr>>>,
}

impl Resolve for Moving {
    fn resolve<'a>(&'a self, _service: &'a str) -> ResolveFuture<'a> {
        let at = self.next.fetch_add(2, Ordering::SeqCst);
        let named: Vec<SocketAddr> = (at..at + 2)
            .map(|i| self.addrs[i % self.addrs.len()])
            .collect();
        *self.last.lock().expect("not poisoned") = named.clone();
        Box::pin(std::future::ready(Ok(endpoints(&named))))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoints_kept_never_exceed_max_endpoints_as_answers_move() {
    let mut providers = Vec::new();
    for i in 0..6 {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        providers.push(provider(&format!("greet-{i}"), any).await);
    }
    let last = Arc::new(Mutex::new(Vec::new()));
    let resolver = Moving {
        addrs: providers.iter().map(|(p, _)| p.addr()).collect(),
        next: AtomicUsize::new(0),
        last: last.clone(),
    };
    // Only the rounds below (and the first, at once) run; an endpoint not named would be kept
    // for 5 rounds if it were not for the cap.
    let config = ResolverRegistryConfig::services(["greet"])
        .refresh(Duration::from_secs(3600))
        .drop_after(5)
        .max_endpoints(2);
    let registry = ResolverRegistry::new(resolver, config);
    let web = Node::builder()
        .insecure()
        .name("web-1")
        .registry(registry.clone())
        .start()
        .await
        .expect("the client starts");
    // The first round is over (it names one pair, then nothing else resolves until the next
    // round): reading `last` after a round below is not raced by it.
    until(&registry, |r| r.lookup("greet").len() == 2).await;
    for _ in 0..6 {
        registry.refresh().await;
        let named: Vec<SocketAddr> = last.lock().expect("not poisoned").clone();
        let mut kept: Vec<SocketAddr> = registry
            .lookup("greet")
            .iter()
            .map(|e| e.node.addr)
            .collect();
        kept.sort();
        let mut expected = named.clone();
        expected.sort();
        assert_eq!(kept, expected, "the two named last, and only them");
        let others = registry
            .local_copy()
            .nodes()
            .into_iter()
            .filter(|n| n.name != "web-1")
            .count();
        assert!(others <= 2, "{others} nodes kept");
    }

    web.shutdown().await;
    for (node, _) in providers {
        node.shutdown().await;
    }
}

/// A listener that accepts connections and never answers: a probe of it waits its whole
/// timeout.
async fn black_hole() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bound");
    let addr = listener.local_addr().expect("an address");
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_of_unreachable_endpoints_ends_at_its_deadline_and_the_next_asks_the_rest() {
    let mut addrs = Vec::new();
    let mut holes = Vec::new();
    for _ in 0..40 {
        let (addr, task) = black_hole().await;
        addrs.push(addr);
        holes.push(task);
    }
    let (a, _ra) = provider("greet-a", SocketAddr::from(([127, 0, 0, 1], 0))).await;
    addrs.push(a.addr());
    // Without a deadline a round asks 41 endpoints 8 at once, 1 s each: 6 s.
    let config = ResolverRegistryConfig::services(["greet"])
        .refresh(Duration::from_secs(3600))
        .probe_timeout(Duration::from_secs(1))
        .max_concurrent_probes(8)
        .round_timeout(Duration::from_millis(300));
    let registry = ResolverRegistry::new(Static::new().service("greet", endpoints(&addrs)), config);
    let web = Node::builder()
        .insecure()
        .name("web-1")
        .registry(registry.clone())
        .start()
        .await
        .expect("the client starts");

    // Each round asks the endpoints the last one did not reach: the provider is reached within
    // six rounds (41 / 8), wherever it is in the order.
    let mut rounds = 0;
    while registry.lookup("greet").is_empty() {
        rounds += 1;
        assert!(rounds <= 8, "the provider was never asked");
        let started = std::time::Instant::now();
        registry.refresh().await;
        // Its own 300 ms, and the first round's, which may still run.
        assert!(
            started.elapsed() < Duration::from_millis(1500),
            "a round took {:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        providers_of(&registry),
        [("greet-a".to_owned(), a.info().generation)]
    );

    web.shutdown().await;
    a.shutdown().await;
    for hole in holes {
        hole.abort();
    }
}
