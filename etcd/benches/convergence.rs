//! How fast the etcd backend converges, beside the gossip backend in the same run: clusters of
//! 3 and 30 nodes in this process, each node with a registry of its own (as a process of its
//! own would have), on one real etcd (Debian's `etcd-server`) or on gossip over UDP, all on
//! loopback. Each round registers a service on the newest node and measures until every other
//! node's lookup returns it; then kills that node (no leave: keep-alives or gossip stop) and
//! measures until every other node's lookup is empty; then replaces it. Method and figures:
//! `docs/benchmarks.md`, "The registry on etcd".
//!
//! ```sh
//! cargo bench -p cluster-etcd --features real-etcd --bench convergence               # 3 and 30 nodes, 7 rounds
//! cargo bench -p cluster-etcd --features real-etcd --bench convergence -- --smoke    # 3 nodes, 2 rounds (CI)
//! ```

#[path = "../tests/support/server.rs"]
#[allow(dead_code, unreachable_pub)]
mod server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::registry::{GossipConfig, GossipRegistry, ServiceEntry};
use cluster::service::version;
use cluster::{CallOptions, FunctionDescription, Node, ServiceDescription};
use cluster_etcd::{EtcdConfig, EtcdRegistry};

const TTL: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug)]
enum Backend {
    Etcd,
    Gossip,
}

struct Member {
    node: Node,
    gossip: Option<GossipRegistry>,
}

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

async fn member(backend: Backend, etcd: &str, name: String, others: &[Member]) -> Member {
    let (ca, key) = secrets();
    let builder = Node::builder().identity(ca.issue(&name).unwrap());
    let (builder, gossip) = match backend {
        Backend::Etcd => {
            let config = EtcdConfig::new([etcd]).plaintext().lease_ttl(TTL);
            (builder.registry(EtcdRegistry::new(config)), None)
        }
        Backend::Gossip => {
            let seeds = others
                .iter()
                .take(3)
                .filter_map(|m| m.gossip.as_ref()?.gossip_addr())
                .map(|a| a.to_string());
            let registry = GossipRegistry::new(
                GossipConfig::new()
                    .keyring(cluster::Keyring::new(key.clone()))
                    .seeds(seeds),
            );
            (builder.registry(registry.clone()), Some(registry))
        }
    };
    Member {
        node: builder.start().await.unwrap(),
        gossip,
    }
}

/// Waits until every node satisfies `seen`; the time it took for the last one.
async fn everywhere(
    nodes: &[&Node],
    limit: Duration,
    seen: impl Fn(&Node) -> bool,
) -> Option<Duration> {
    let start = Instant::now();
    for node in nodes {
        let mut changes = node.registry().changes();
        while !seen(node) {
            let left = limit.checked_sub(start.elapsed())?;
            tokio::time::timeout(left, changes.changed())
                .await
                .ok()?
                .ok()?;
        }
    }
    Some(start.elapsed())
}

async fn convergence(
    backend: Backend,
    etcd: &str,
    n: usize,
    rounds: usize,
) -> (Vec<Duration>, Vec<Duration>) {
    let mut members: Vec<Member> = Vec::new();
    for i in 0..n {
        let m = member(backend, etcd, format!("n{i}"), &members).await;
        members.push(m);
    }
    let all: Vec<&Node> = members.iter().map(|m| &m.node).collect();
    everywhere(&all, Duration::from_secs(60), |node| {
        node.registry().nodes().len() == n
    })
    .await
    .expect("the cluster converges");
    let (mut reach, mut crash) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let name = format!("svc{round}");
        let provider = &members.last().unwrap().node;
        let entry = ServiceEntry::new(provider.info().clone(), Arc::new(description(&name)));
        let start = Instant::now();
        provider.registry().register(entry).await.unwrap();
        let others: Vec<&Node> = members[..n - 1].iter().map(|m| &m.node).collect();
        everywhere(&others, Duration::from_secs(10), |node| {
            !node.registry().lookup(&name).is_empty()
        })
        .await
        .expect("the registration spreads");
        reach.push(start.elapsed());

        let start = Instant::now();
        provider.kill().await;
        everywhere(&others, Duration::from_secs(30), |node| {
            node.registry().lookup(&name).is_empty()
        })
        .await
        .expect("the crash is seen");
        crash.push(start.elapsed());

        members.pop();
        let replacement = member(backend, etcd, format!("n{}", n + round), &members).await;
        members.push(replacement);
        let all: Vec<&Node> = members.iter().map(|m| &m.node).collect();
        everywhere(&all, Duration::from_secs(60), |node| {
            node.registry().nodes().len() == n
        })
        .await
        .expect("the replacement joins");
    }
    for m in &members {
        m.node.shutdown().await;
    }
    (reach, crash)
}

fn summary(mut v: Vec<Duration>) -> String {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "{:.0} / {:.0} / {:.0} ms",
        ms(v[0]),
        ms(v[v.len() / 2]),
        ms(v[v.len() - 1])
    )
}

#[tokio::main]
async fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let (sizes, rounds) = if smoke {
        (vec![3], 2)
    } else {
        (vec![3, 30], 7)
    };
    let etcd = server::Etcd::start();
    let endpoint = etcd.endpoint();
    println!("lease TTL {TTL:?} (etcd), dead_after 2 s (gossip, default); {rounds} rounds each");
    println!(
        "| backend | nodes | registration in every lookup (min / median / max) | crash out of every lookup (min / median / max) |"
    );
    println!("|---|---|---|---|");
    for n in sizes {
        for backend in [Backend::Etcd, Backend::Gossip] {
            let (reach, crash) = convergence(backend, &endpoint, n, rounds).await;
            println!(
                "| {backend:?} | {n} | {} | {} |",
                summary(reach),
                summary(crash)
            );
        }
    }
}
