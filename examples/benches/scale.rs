//! The gossip registry at a hundred nodes, each a separate `cluster-node` process on loopback
//! (the processes the issue measured), watched by a few nodes in this process: how long a new
//! process takes to be in every watcher's lookups after it says it is ready, whether a stall
//! (SIGSTOP, then SIGCONT) takes it out, and how long a crash (SIGKILL) and a clean leave
//! (SIGTERM) take to leave every lookup. Method and figures: `docs/benchmarks.md`.
//!
//! ```sh
//! cargo bench -p examples --bench scale                              # 100 nodes
//! cargo bench -p examples --bench scale -- --nodes 30 --rounds 5     # smaller, quicker
//! ```

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster::Node;
use cluster::registry::{GossipConfig, GossipRegistry};

/// Watchers in this process: every figure is the slowest of them.
const WATCHERS: usize = 4;

struct Process {
    child: Child,
    name: String,
}

impl Process {
    fn start(name: &str, certs: &Path, seeds: &[String]) -> (Self, Instant) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cluster-node"));
        command
            .args(["--name", name, "--certs", certs.to_str().unwrap()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for seed in seeds {
            command.args(["--seed", seed]);
        }
        let mut child = command.spawn().expect("cluster-node starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("its first line");
        assert!(line.starts_with("gossip="), "{name}: {line}");
        let ready = Instant::now();
        let process = Self {
            child,
            name: name.to_owned(),
        };
        (process, ready)
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn cluster_node(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_cluster-node"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}");
}

/// What one watcher saw: for each change of its lookup of `greeter`, when and which nodes.
#[derive(Default)]
struct Trace(Mutex<Vec<(Instant, BTreeSet<String>)>>);

impl Trace {
    fn providers(node: &Node) -> BTreeSet<String> {
        node.registry()
            .lookup("greeter")
            .iter()
            .map(|e| e.node.name.clone())
            .collect()
    }

    /// The first time at or after `since` that `name` was in (`present`) or out of the lookup.
    fn first(&self, since: Instant, name: &str, present: bool) -> Option<Instant> {
        let trace = self.0.lock().unwrap();
        let before = trace
            .iter()
            .rev()
            .find(|(at, _)| *at <= since)
            .is_some_and(|(_, set)| set.contains(name) == present);
        if before {
            return Some(since);
        }
        trace
            .iter()
            .find(|(at, set)| *at > since && set.contains(name) == present)
            .map(|(at, _)| *at)
    }

    /// Whether `name` was ever out of the lookup between `from` and `to`.
    fn lost(&self, from: Instant, to: Instant, name: &str) -> bool {
        self.first(from, name, false).is_some_and(|at| at <= to)
    }
}

async fn watch(node: Node, trace: Arc<Trace>) {
    let mut changes = node.registry().changes();
    loop {
        let seen = Trace::providers(&node);
        trace.0.lock().unwrap().push((Instant::now(), seen));
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// The time until every watcher saw `name` in (`present`) or out of its lookup, from `since`.
async fn everywhere(traces: &[Arc<Trace>], since: Instant, name: &str, present: bool) -> Duration {
    let limit = Duration::from_secs(30);
    loop {
        let seen: Option<Vec<Instant>> = traces
            .iter()
            .map(|t| t.first(since, name, present))
            .collect();
        if let Some(seen) = seen {
            return seen.into_iter().max().unwrap() - since;
        }
        assert!(since.elapsed() < limit, "{name} not settled in {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut v = samples.to_vec();
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn row(what: &str, samples: &[Duration]) {
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1000.0);
    println!(
        "| {what} | {} | {} | {} | {} | {} |",
        samples.len(),
        ms(percentile(samples, 0.0)),
        ms(percentile(samples, 0.5)),
        ms(percentile(samples, 0.99)),
        ms(percentile(samples, 1.0)),
    );
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let nodes = arg(&args, "--nodes", 100);
    let rounds = arg(&args, "--rounds", 20);
    let stall_ms = arg(&args, "--stall-ms", 1000) as u64;
    let processes = nodes - WATCHERS;
    let dir = std::env::temp_dir().join(format!("cluster-scale-{}", std::process::id()));
    let dir_arg = dir.to_str().unwrap().to_owned();
    cluster_node(&["init", "--cluster", "scale", "--dir", &dir_arg]);
    let names: Vec<String> = (0..processes + rounds * 2)
        .map(|i| format!("p{i}"))
        .chain((0..WATCHERS).map(|i| format!("w{i}")))
        .collect();
    for name in &names {
        cluster_node(&["issue", "--dir", &dir_arg, "--node", name]);
    }
    let keyring = cluster::Keyring::from_file(dir.join("gossip.key")).unwrap();

    let mut watchers = Vec::new();
    let mut registries = Vec::new();
    let mut traces = Vec::new();
    let mut seeds: Vec<String> = Vec::new();
    for i in 0..WATCHERS {
        let registry =
            GossipRegistry::new(GossipConfig::new().keyring(keyring.clone()).seeds(&seeds));
        let node = Node::builder()
            .identity(cluster::Identity::from_dir(&dir, &format!("w{i}")).unwrap())
            .registry(registry.clone())
            .start()
            .await
            .unwrap();
        seeds.push(registry.gossip_addr().unwrap().to_string());
        registries.push(registry.clone());
        let trace = Arc::new(Trace::default());
        tokio::spawn(watch(node.clone(), trace.clone()));
        traces.push(trace);
        watchers.push(node);
    }
    let mut next = 0;
    let mut name = || {
        next += 1;
        format!("p{}", next - 1)
    };
    let mut running = Vec::new();
    let started = Instant::now();
    for _ in 0..processes {
        running.push(Process::start(&name(), &dir, &seeds).0);
    }
    for p in &running {
        everywhere(&traces, started, &p.name, true).await;
    }
    println!(
        "{nodes} nodes ({processes} processes, {WATCHERS} watchers in the bench) converged {:.1} s after the first start; digest {}",
        started.elapsed().as_secs_f64(),
        parts(&registries[0]).await
    );
    let settle = || tokio::time::sleep(Duration::from_millis(500));
    let (traffic_from, churn_from) = (registries[0].traffic(), Instant::now());

    let (mut joins, mut leaves, mut crashes) = (Vec::new(), Vec::new(), Vec::new());
    let mut stalls_lost = 0;
    for round in 0..rounds {
        // A join: from the process's ready line to every watcher's lookup.
        let (joined, ready) = Process::start(&name(), &dir, &seeds);
        joins.push(everywhere(&traces, ready, &joined.name, true).await);
        settle().await;
        // A clean leave of the oldest.
        let leaving = running.remove(0);
        let at = Instant::now();
        leaving.signal("-TERM");
        leaves.push(everywhere(&traces, at, &leaving.name, false).await);
        drop(leaving);
        running.push(joined);
        settle().await;
        // A stall of one process, then it goes on.
        let stalled = &running[round % running.len()];
        let from = Instant::now();
        stalled.signal("-STOP");
        tokio::time::sleep(Duration::from_millis(stall_ms)).await;
        stalled.signal("-CONT");
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let lost = traces
            .iter()
            .any(|t| t.lost(from, Instant::now(), &stalled.name));
        stalls_lost += usize::from(lost);
        // A crash, replaced by a new process.
        let victim = running.remove(running.len() / 2);
        let at = Instant::now();
        victim.signal("-KILL");
        crashes.push(everywhere(&traces, at, &victim.name, false).await);
        drop(victim);
        let (replacement, ready) = Process::start(&name(), &dir, &seeds);
        everywhere(&traces, ready, &replacement.name, true).await;
        running.push(replacement);
        settle().await;
        eprintln!("round {round} done");
    }
    println!("\n| {nodes} nodes | n | min | median | p99 | max |\n|---|---|---|---|---|---|");
    row("join: ready → in every watcher's lookup", &joins);
    row("clean leave: SIGTERM → out of every lookup", &leaves);
    row("crash: SIGKILL → out of every lookup", &crashes);
    println!(
        "\nstalls of {stall_ms} ms (SIGSTOP, SIGCONT): {stalls_lost} of {rounds} took the node out of a watcher's lookup"
    );
    println!(
        "digest after {} departures: {}",
        rounds * 2,
        parts(&registries[0]).await
    );
    let (traffic, secs) = (registries[0].traffic(), churn_from.elapsed().as_secs_f64());
    println!(
        "one watcher's gossip during the rounds ({secs:.0} s): {:.0} kB/s sent in {:.0} datagrams/s, {:.0} kB/s received",
        (traffic.sent_bytes - traffic_from.sent_bytes) as f64 / secs / 1e3,
        (traffic.sent_datagrams - traffic_from.sent_datagrams) as f64 / secs,
        (traffic.received_bytes - traffic_from.received_bytes) as f64 / secs / 1e3,
    );
    drop(running);
    for w in watchers {
        w.kill().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The digest a watcher sends each peer in a round, in bytes and datagrams.
async fn parts(registry: &GossipRegistry) -> String {
    let (parts, bytes) = registry.digest_parts().await;
    format!("{bytes} B in {parts} datagram(s)")
}
