//! What the gossip registry costs and how fast it converges, on real UDP on loopback, all nodes
//! in this process. Method and figures: `docs/benchmarks.md`.
//!
//! ```sh
//! cargo bench -p cluster --bench registry               # 3, 10 and 30 nodes
//! cargo bench -p cluster --bench registry -- --smoke    # 3 nodes, a few rounds, as CI runs it
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::registry::{GossipConfig, GossipRegistry, NodeInfo, ServiceEntry};
use cluster::service::version;
use cluster::{
    CallOptions, FunctionDescription, MemoryRegistry, Node, Registry, ServiceDescription,
};

fn description(name: &str) -> ServiceDescription {
    let f = FunctionDescription::new("get", "get(u64) -> Vec<u8>", true, CallOptions::new());
    ServiceDescription::new(
        name,
        version(1, 0, 0, "", ""),
        None,
        CallOptions::new(),
        vec![f],
    )
}

/// Waits until every node in `nodes` satisfies `seen`; the time it took for the last one.
async fn everywhere(
    nodes: &[Node],
    limit: Duration,
    seen: impl Fn(&Node) -> bool,
) -> Option<Duration> {
    let start = Instant::now();
    for node in nodes {
        let mut changes = node.registry().changes();
        while !seen(node) {
            let left = limit.checked_sub(start.elapsed())?;
            if tokio::time::timeout(left, changes.changed()).await.is_err() {
                return None;
            }
        }
    }
    Some(start.elapsed())
}

/// A node and its gossip registry (the node holds it only as `dyn Registry`).
struct Member {
    node: Node,
    registry: GossipRegistry,
}

/// The benchmark's cluster: a CA and a gossip key, made once and thrown away.
fn secrets() -> &'static (cluster::Authority, cluster::GossipKey) {
    static SECRETS: std::sync::OnceLock<(cluster::Authority, cluster::GossipKey)> =
        std::sync::OnceLock::new();
    SECRETS.get_or_init(|| {
        (
            cluster::Authority::new("bench").unwrap(),
            cluster::GossipKey::generate(),
        )
    })
}

async fn member(name: String, seeds: Vec<String>) -> Member {
    member_with(name, seeds, GossipConfig::new()).await
}

async fn member_with(name: String, seeds: Vec<String>, config: GossipConfig) -> Member {
    let (ca, key) = secrets();
    let registry = GossipRegistry::new(
        config
            .keyring(cluster::Keyring::new(key.clone()))
            .seeds(seeds),
    );
    let node = Node::builder()
        .identity(ca.issue(&name).unwrap())
        .registry(registry.clone())
        .start()
        .await
        .unwrap();
    Member { node, registry }
}

fn seeds(members: &[Member]) -> Vec<String> {
    members
        .iter()
        .take(3)
        .filter_map(|m| m.registry.gossip_addr())
        .map(|a| a.to_string())
        .collect()
}

fn nodes(members: &[Member]) -> Vec<Node> {
    members.iter().map(|m| m.node.clone()).collect()
}

async fn cluster_of(n: usize) -> Vec<Member> {
    let mut members = Vec::new();
    for i in 0..n {
        let joined = member(format!("n{i}"), seeds(&members)).await;
        members.push(joined);
    }
    let all = everywhere(&nodes(&members), Duration::from_secs(60), |node| {
        node.registry().nodes().len() == n
    })
    .await;
    all.expect("the cluster converges");
    members
}

struct Stats(Vec<Duration>);

impl Stats {
    fn median(&self) -> Duration {
        let mut v = self.0.clone();
        v.sort();
        v[v.len() / 2]
    }
    fn max(&self) -> Duration {
        self.0.iter().copied().max().unwrap_or_default()
    }
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// Registration reaching every node, then a crash leaving every node's lookups, `rounds` times;
/// each round the crashed node is replaced by a new one so the size stays `n`.
async fn convergence(n: usize, rounds: usize) -> (Stats, Stats) {
    let mut members = cluster_of(n).await;
    let (mut reach, mut drop) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let name = format!("svc{round}");
        let provider = members.last().unwrap();
        let entry = ServiceEntry::new(provider.node.info().clone(), Arc::new(description(&name)));
        let start = Instant::now();
        provider.node.registry().register(entry).await.unwrap();
        let others = nodes(&members[..members.len() - 1]);
        everywhere(&others, Duration::from_secs(10), |node| {
            !node.registry().lookup(&name).is_empty()
        })
        .await
        .expect("the registration spreads");
        reach.push(start.elapsed());

        let victim = members.pop().unwrap();
        let start = Instant::now();
        victim.node.kill().await;
        everywhere(&others, Duration::from_secs(30), |node| {
            node.registry().lookup(&name).is_empty()
        })
        .await
        .expect("the crash is detected");
        drop.push(start.elapsed());

        let replacement = member(format!("n{}", n + round), seeds(&members)).await;
        members.push(replacement);
        everywhere(&nodes(&members), Duration::from_secs(60), |node| {
            node.registry().nodes().len() == n
        })
        .await
        .expect("the replacement joins");
    }
    for m in &members {
        m.node.kill().await;
    }
    (Stats(reach), Stats(drop))
}

/// A description of about `bytes` bytes of JSON: functions whose signatures do not repeat, so
/// that it compresses about as a real one would.
fn large_description(name: &str, bytes: usize) -> ServiceDescription {
    let functions = (0..bytes / 175)
        .map(|i| {
            let signature = format!(
                "f{i}(u64, String, Vec<u8>, Option<{:016x}>) -> Result<Vec<u8>, Error{i}>",
                fastrand::u64(..)
            );
            FunctionDescription::new(&format!("f{i}"), &signature, i % 2 == 0, CallOptions::new())
        })
        .collect();
    ServiceDescription::new(
        name,
        version(1, 0, 0, "", ""),
        None,
        CallOptions::new(),
        functions,
    )
}

/// One node of `n` registers `services` descriptions of `bytes` each, one after the other (all
/// nodes allow 4 MiB of state per node): how long until every other node holds them all, and
/// how many times meanwhile another node dropped out of one's lookups (a flap).
async fn large_state(n: usize, services: usize, bytes: usize) -> (Duration, Duration, usize) {
    let config = || GossipConfig::new().max_bytes_per_node(4 << 20);
    let mut members: Vec<Member> = Vec::new();
    for i in 0..n {
        let joined = member_with(format!("n{i}"), seeds(&members), config()).await;
        members.push(joined);
    }
    everywhere(&nodes(&members), Duration::from_secs(60), |node| {
        node.registry().nodes().len() == n
    })
    .await
    .expect("the cluster converges");
    let mut downs: Vec<_> = members[..n - 1]
        .iter()
        .map(|m| m.node.registry().events())
        .collect();
    let provider = &members[n - 1];
    let descriptions: Vec<_> = (0..services)
        .map(|s| Arc::new(large_description(&format!("big{s}"), bytes)))
        .collect();
    let start = Instant::now();
    for d in descriptions {
        let entry = ServiceEntry::new(provider.node.info().clone(), d);
        provider.node.registry().register(entry).await.unwrap();
    }
    let registered = start.elapsed();
    let others = nodes(&members[..n - 1]);
    let name = provider.node.name().to_owned();
    let held = everywhere(&others, Duration::from_secs(120), |node| {
        node.registry()
            .services()
            .iter()
            .filter(|e| e.node.name == name)
            .count()
            == services
    })
    .await
    .expect("the large state spreads");
    let flaps = downs
        .iter_mut()
        .map(|events| {
            std::iter::from_fn(|| events.try_recv().ok())
                .filter(|e| matches!(e, cluster::registry::RegistryEvent::NodeDown(_)))
                .count()
        })
        .sum();
    for m in &members {
        m.node.kill().await;
    }
    (registered, held, flaps)
}

/// ns per lookup of one service among `services`, each with three providers.
async fn lookup_cost(services: usize, lookups: usize) -> (f64, f64) {
    let registry = MemoryRegistry::new();
    for s in 0..services {
        for p in 0..3u16 {
            let node = NodeInfo::new(format!("p{p}"), ([127, 0, 0, 1], 1000 + p).into(), 1);
            let entry = ServiceEntry::new(node, Arc::new(description(&format!("service-{s}"))));
            registry.register(entry).await.unwrap();
        }
    }
    let names: Vec<String> = (0..services).map(|s| format!("service-{s}")).collect();
    let requirement: semver::VersionReq = "^1.0.0".parse().unwrap();
    let start = Instant::now();
    let mut found = 0;
    for i in 0..lookups {
        found += registry.lookup(&names[i % services]).len();
    }
    let plain = start.elapsed().as_nanos() as f64 / lookups as f64;
    let start = Instant::now();
    for i in 0..lookups {
        let entries = registry.lookup(&names[i % services]);
        found += entries
            .iter()
            .filter(|e| requirement.matches(&e.description.version))
            .filter(|e| {
                e.description
                    .function("get", "get(u64) -> Vec<u8>")
                    .is_some()
            })
            .count();
    }
    let filtered = start.elapsed().as_nanos() as f64 / lookups as f64;
    assert!(found > 0);
    (plain, filtered)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let (mut sizes, rounds, lookups) = if smoke {
        (vec![3], 2, 100_000)
    } else {
        (vec![3, 10, 30], 7, 2_000_000)
    };
    // `--nodes N` measures one size only.
    if let Some(n) = args
        .iter()
        .position(|a| a == "--nodes")
        .and_then(|i| args.get(i + 1)?.parse().ok())
    {
        sizes = vec![n];
    }
    println!(
        "| nodes | registration reaches every node (median / max) | crash out of every lookup (median / max) |"
    );
    println!("|---|---|---|");
    for n in sizes {
        let (reach, drop) = convergence(n, rounds).await;
        println!(
            "| {n} | {} / {} | {} / {} |",
            ms(reach.median()),
            ms(reach.max()),
            ms(drop.median()),
            ms(drop.max())
        );
    }
    if !smoke {
        let (services, bytes) = (150, 15_000);
        let (registered, held, flaps) = large_state(5, services, bytes).await;
        println!(
            "\none node of 5 registers {services} descriptions of {bytes} B ({:.1} MB): registered in {}, held by every other node after {}, {flaps} flaps of other nodes meanwhile",
            (services * bytes) as f64 / 1e6,
            ms(registered),
            ms(held)
        );
    }
    let (plain, filtered) = lookup_cost(1000, lookups).await;
    println!(
        "\nlookup among 1,000 services (3 providers each): {plain:.0} ns (Registry::lookup), {filtered:.0} ns (with version and function filtering)"
    );
}
