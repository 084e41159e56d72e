//! The resolver backend (`discovery/src/backend/resolver/`) on real sockets: providers learned
//! from `Static` endpoints by asking them, typed calls spread over them with the options of
//! their descriptions, a crashed provider dropped, a restarted one learned again, a resolver
//! failure that keeps the last copy, and over mutual TLS a node name that is the certificate's.
#![allow(unreachable_pub)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cluster::{Node, Registry, RpcErrorKind};
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
    let registry = ResolverRegistry::new(Static::new(), ResolverRegistryConfig::default());
    let node = Node::builder()
        .insecure()
        .name(name)
        .listen(addr)
        .registry(registry)
        .start()
        .await
        .expect("the provider starts");
    let registration = node
        .serve(GreetServer::new(Greeter(name.to_owned())))
        .await
        .expect("served");
    (node, registration)
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
