//! Issue 15's figures, on real TCP with mutual TLS on loopback, all nodes in this process
//! (method and results: `docs/benchmarks.md`, "Retry throttling and hedging").
//!
//! 1. **A storm**: a provider that fails every call (registered, its process gone: every
//!    attempt is refused at once and would be retried for the whole budget), called 1,000 times
//!    a second for 10 s. Attempts per call with retry throttling (the library's 20 % over 10 s,
//!    10 a second) against the same calls with it off (a ratio of 10 and a floor of 100,000).
//! 2. **A slow replica**: three replicas of an idempotent read, one answering in 50 ms and two
//!    in 1 ms; latency percentiles of 2,000 calls (8 at a time) without hedging, and with a
//!    hedge after 10 ms.
//!
//! ```sh
//! cargo bench -p cluster --bench retries               # the full runs
//! cargo bench -p cluster --bench retries -- --smoke    # a few hundred calls, as CI runs it
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::{CallOptions, MemoryRegistry, Node};

/// A read that is safe to run twice, on replicas of different speeds.
#[cluster::service(
    name = "store",
    version = "1.0.0",
    timeout = "1s",
    retry(after = "100ms", budget = "5s")
)]
pub trait Store {
    /// Answers after the replica's delay; safe to run twice.
    #[call(idempotent)]
    async fn read(&self, key: u64) -> u64;
}

struct Replica {
    delay: Duration,
}

impl Store for Arc<Replica> {
    async fn read(&self, key: u64) -> u64 {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        key
    }
}

fn authority() -> &'static cluster::Authority {
    static CA: std::sync::OnceLock<cluster::Authority> = std::sync::OnceLock::new();
    CA.get_or_init(|| cluster::Authority::new("bench").unwrap())
}

async fn node(name: &str, registry: &MemoryRegistry) -> Node {
    Node::builder()
        .identity(authority().issue(name).unwrap())
        .registry(registry.clone())
        .start()
        .await
        .unwrap()
}

async fn replica(name: &str, registry: &MemoryRegistry, delay: Duration) -> Node {
    let node = node(name, registry).await;
    let _registration = node
        .serve(StoreServer::new(Arc::new(Replica { delay })))
        .await
        .unwrap();
    node
}

/// `calls` calls at `rate` a second to a provider whose process is gone; the attempts they
/// made in all.
async fn storm(calls: usize, rate: u64, options: CallOptions) -> usize {
    let registry = MemoryRegistry::new();
    let gone = replica("gone", &registry, Duration::ZERO).await;
    gone.kill().await;
    let client = StoreClient::new(&node("client", &registry).await).with_options(options);
    let every = Duration::from_nanos(1_000_000_000 / rate);
    let start = tokio::time::Instant::now();
    let mut running = Vec::with_capacity(calls);
    for i in 0..calls {
        tokio::time::sleep_until(start + every * i as u32).await;
        let client = client.clone();
        running.push(tokio::spawn(async move {
            match client.read(i as u64).await {
                Ok(_) => 1,
                Err(e) => e.report().attempts.len() + e.report().attempts_left_out,
            }
        }));
    }
    let mut attempts = 0;
    for call in running {
        attempts += call.await.unwrap();
    }
    attempts
}

/// Latencies of `calls` reads, `parallel` at a time, over three replicas (one slow).
async fn tail(calls: usize, parallel: usize, options: CallOptions) -> Vec<Duration> {
    let registry = MemoryRegistry::new();
    let _slow = replica("slow", &registry, Duration::from_millis(50)).await;
    let _quick_a = replica("quick-a", &registry, Duration::from_millis(1)).await;
    let _quick_b = replica("quick-b", &registry, Duration::from_millis(1)).await;
    let client = StoreClient::new(&node("client", &registry).await).with_options(options);
    // Connections opened before the clock starts.
    for i in 0..30 {
        client.read(i).await.unwrap();
    }
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..parallel {
        let (client, next) = (client.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let mut took = Vec::new();
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < calls {
                let started = Instant::now();
                client.read(7).await.unwrap();
                took.push(started.elapsed());
            }
            took
        }));
    }
    let mut all = Vec::with_capacity(calls);
    for worker in workers {
        all.extend(worker.await.unwrap());
    }
    all.sort();
    all
}

fn at(sorted: &[Duration], q: f64) -> String {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    format!("{:.1} ms", sorted[i].as_secs_f64() * 1e3)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let (calls, reads) = if smoke { (200, 200) } else { (10_000, 2_000) };
    println!("load before: {}", load());

    let throttled = storm(calls, 1_000, CallOptions::new()).await;
    let unthrottled = CallOptions::new().retry_ratio(10.0).retry_floor(100_000);
    let free = storm(calls, 1_000, unthrottled).await;
    println!(
        "\n{calls} calls at 1,000/s to a provider that fails every call (5 s budgets, pauses from 100 ms)"
    );
    println!("| retry throttling | attempts | per call |");
    println!("|---|---|---|");
    for (what, attempts) in [
        ("library default (20 % over 10 s, 10/s)", throttled),
        ("off", free),
    ] {
        println!(
            "| {what} | {attempts} | {:.2} |",
            attempts as f64 / calls as f64
        );
    }

    let plain = tail(reads, 8, CallOptions::new()).await;
    let hedged = tail(
        reads,
        8,
        CallOptions::new().hedge(Duration::from_millis(10), 1),
    )
    .await;
    println!("\n{reads} reads, 8 at a time, over replicas of 50 ms, 1 ms and 1 ms");
    println!("| | p50 | p90 | p99 | max |");
    println!("|---|---|---|---|---|");
    for (what, took) in [("no hedging", &plain), ("hedge after 10 ms", &hedged)] {
        println!(
            "| {what} | {} | {} | {} | {} |",
            at(took, 0.5),
            at(took, 0.9),
            at(took, 0.99),
            at(took, 1.0)
        );
    }
    println!("\nload after: {}", load());
}
