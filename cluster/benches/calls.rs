//! What a call costs: raw tarpc against the full `#[cluster::service]` call path, measured in the
//! same run, plus the registry lookup and the allocations per call. Method and figures:
//! `docs/benchmarks.md`.
//!
//! ```sh
//! cargo bench -p cluster --bench calls                 # full run, about a minute
//! cargo bench -p cluster --bench calls -- --smoke      # a few seconds, as CI runs it
//! cargo bench -p cluster --bench calls -- --profile ours --calls 2000 --payload 32 --in-flight 1
//! ```
//!
//! `--profile raw|ours` runs only calls of one side, nothing else (for `valgrind --tool=callgrind`).

use std::alloc::System;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cluster::registry::{NodeInfo, ServiceEntry};
use cluster::service::version;
use cluster::{
    CallOptions, FunctionDescription, MemoryRegistry, Node, Registry, ServiceDescription,
};
use serde_bytes::ByteBuf;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

// Counts every allocation of the process: client, provider and tarpc's tasks alike.
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The baseline: tarpc 0.38 alone, with the transport and codec `cluster` uses (TCP on loopback,
/// length-delimited bincode frames, `TCP_NODELAY` on both ends, default configs).
mod raw {
    use futures::{StreamExt, future};
    use serde_bytes::ByteBuf;
    use tarpc::server::{BaseChannel, Channel};
    use tarpc::tokio_serde::formats::Bincode;

    #[tarpc::service]
    pub(crate) trait Echo {
        /// Returns its argument.
        async fn echo(payload: ByteBuf) -> ByteBuf;
    }

    #[derive(Clone)]
    struct Server;

    impl Echo for Server {
        async fn echo(self, _: tarpc::context::Context, payload: ByteBuf) -> ByteBuf {
            payload
        }
    }

    /// A server on a port from the OS and one client connected to it.
    pub(crate) async fn start() -> EchoClient {
        let mut listener = tarpc::serde_transport::tcp::listen(("127.0.0.1", 0), Bincode::default)
            .await
            .expect("listens");
        listener
            .config_mut()
            .max_frame_length(cluster::DEFAULT_MAX_FRAME);
        let addr = listener.local_addr();
        tokio::spawn(listener.filter_map(|r| future::ready(r.ok())).for_each(
            |transport| async move {
                // As `cluster`'s listener does.
                let _ = transport.get_ref().set_nodelay(true);
                tokio::spawn(
                    BaseChannel::with_defaults(transport)
                        .execute(Server.serve())
                        .for_each(|call| async {
                            tokio::spawn(call);
                        }),
                );
            },
        ));
        let mut connect = tarpc::serde_transport::tcp::connect(addr, Bincode::default);
        connect
            .config_mut()
            .max_frame_length(cluster::DEFAULT_MAX_FRAME);
        let transport = connect.await.expect("connects");
        transport.get_ref().set_nodelay(true).expect("nodelay");
        EchoClient::new(tarpc::client::Config::default(), transport).spawn()
    }
}

/// The same echo as a `cluster` service.
#[cluster::service(name = "bench", version = "1.0.0", timeout = "10s")]
trait Bench {
    /// Returns its argument.
    #[call(idempotent)]
    async fn echo(&self, payload: ByteBuf) -> ByteBuf;
}

struct Echo;

impl Bench for Echo {
    async fn echo(&self, payload: ByteBuf) -> ByteBuf {
        payload
    }
}

/// One side of the comparison.
#[derive(Clone)]
enum Side {
    Raw(raw::EchoClient),
    Ours(BenchClient),
}

impl Side {
    async fn echo(&self, payload: &ByteBuf) {
        let back = match self {
            Side::Raw(c) => c
                .echo(tarpc::context::current(), payload.clone())
                .await
                .expect("raw tarpc echo"),
            Side::Ours(c) => c.echo(payload.clone()).await.expect("cluster echo"),
        };
        assert_eq!(back.len(), payload.len(), "the echo came back changed");
    }
}

/// How long each part runs.
struct Plan {
    rounds: usize,
    warmup_calls: usize,
    latency_calls: usize,
    throughput_for: Duration,
    alloc_calls: usize,
    lookups: usize,
}

const FULL: Plan = Plan {
    rounds: 7,
    warmup_calls: 2000,
    latency_calls: 4000,
    throughput_for: Duration::from_millis(2000),
    alloc_calls: 2000,
    lookups: 2_000_000,
};

const SMOKE: Plan = Plan {
    rounds: 1,
    warmup_calls: 100,
    latency_calls: 400,
    throughput_for: Duration::from_millis(400),
    alloc_calls: 100,
    lookups: 20_000,
};

const PAYLOADS: [usize; 2] = [32, 4096];
const IN_FLIGHT: usize = 64;
/// The turns each side takes per round and payload, for each of latency and throughput.
const SLICES: usize = 8;
const SERVICES: usize = 1000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    // `--threads 1`: one thread for everything, so that an instruction count does not depend
    // on how the workers happened to park and steal (the difference between two builds' counts
    // is then the code's, not the scheduler's).
    let runtime = match value("--threads").as_deref() {
        Some("1") => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    }
    .enable_all()
    .build()
    .expect("runtime");
    if let Some(side) = value("--profile") {
        let calls = value("--calls").map_or(2000, |n| n.parse().expect("--calls N"));
        let payload = value("--payload").map_or(32, |n| n.parse().expect("--payload BYTES"));
        let in_flight = value("--in-flight").map_or(1, |n| n.parse().expect("--in-flight N"));
        runtime.block_on(profile(&side, calls, payload, in_flight));
        return;
    }
    let plan = if args.iter().any(|a| a == "--smoke") {
        SMOKE
    } else {
        FULL
    };
    let rows = runtime.block_on(compare(&plan));
    let lookup = lookup(plan.lookups);
    print_report(&plan, &rows, &lookup);
}

/// `calls` calls of one side only, by `in_flight` callers, after a warm-up: run it twice under
/// callgrind with two call counts, and the difference is the cost of that many calls.
async fn profile(side: &str, calls: usize, payload: usize, in_flight: usize) {
    let (raw, ours) = start().await;
    let side = if side == "raw" { raw } else { ours };
    let payload = ByteBuf::from(vec![7u8; payload]);
    let callers: Vec<_> = (0..in_flight)
        .map(|_| {
            let (side, payload) = (side.clone(), payload.clone());
            tokio::spawn(async move {
                for _ in 0..(100 + calls) / in_flight {
                    side.echo(&payload).await;
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.expect("caller panicked");
    }
}

/// Both sides, connected and ready.
async fn start() -> (Side, Side) {
    let raw = Side::Raw(raw::start().await);
    let registry = MemoryRegistry::new();
    // Plaintext, as the baseline is: the mutual-TLS side is measured on its own.
    let provider = Node::builder()
        .name("provider")
        .insecure()
        .registry(registry.clone())
        .start()
        .await
        .expect("provider starts");
    let registration = provider
        .serve(BenchServer::new(Echo))
        .await
        .expect("serves");
    // The provider runs until the process ends.
    std::mem::forget((provider, registration));
    let node = Node::builder()
        .name("client")
        .insecure()
        .registry(registry)
        .start()
        .await
        .expect("client starts");
    (raw, Side::Ours(BenchClient::new(&node)))
}

/// Runs `f` on a runtime worker, as a service's own code would run, rather than on the thread
/// that blocks on the runtime.
async fn on_worker<T: Send + 'static>(f: impl Future<Output = T> + Send + 'static) -> T {
    tokio::spawn(f).await.expect("the measurement panicked")
}

/// The figures of one side for one payload, one value per round.
#[derive(Default)]
struct Series {
    p50: Vec<f64>,
    p99: Vec<f64>,
    calls_per_s: Vec<f64>,
    cpu_per_call: Vec<f64>,
    allocs: f64,
    bytes: f64,
}

struct Row {
    payload: usize,
    raw: Series,
    ours: Series,
}

async fn compare(plan: &Plan) -> Vec<Row> {
    let (raw, ours) = start().await;
    let mut rows: Vec<Row> = PAYLOADS
        .iter()
        .map(|&payload| Row {
            payload,
            raw: Series::default(),
            ours: Series::default(),
        })
        .collect();
    for row in &mut rows {
        let payload = ByteBuf::from(vec![7u8; row.payload]);
        for side in [&raw, &ours] {
            latency(side, &payload, plan.warmup_calls).await;
            throughput(side, &payload, plan.throughput_for / 4).await;
        }
        (row.raw.allocs, row.raw.bytes) = allocations(&raw, &payload, plan.alloc_calls).await;
        (row.ours.allocs, row.ours.bytes) = allocations(&ours, &payload, plan.alloc_calls).await;
    }
    for round in 0..plan.rounds {
        for row in &mut rows {
            let payload = ByteBuf::from(vec![7u8; row.payload]);
            // Both sides take turns in short slices, the first one alternating, so that a change
            // in the machine's load (other processes on the shared cores) hits both alike.
            let mut samples = [Vec::new(), Vec::new()];
            for slice in 0..SLICES {
                for i in [slice % 2, 1 - slice % 2] {
                    let side = [&raw, &ours][i];
                    let calls = plan.latency_calls / SLICES;
                    samples[i].extend(latency(side, &payload, calls).await);
                }
            }
            let [raw_samples, ours_samples] = samples;
            for (series, mut samples) in
                [(&mut row.raw, raw_samples), (&mut row.ours, ours_samples)]
            {
                samples.sort_unstable();
                let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
                series.p50.push(micros(at(0.50)));
                series.p99.push(micros(at(0.99)));
            }
            let mut done = [Done::default(); 2];
            for slice in 0..SLICES {
                for i in [slice % 2, 1 - slice % 2] {
                    let side = [&raw, &ours][i];
                    let slice =
                        throughput(side, &payload, plan.throughput_for / SLICES as u32).await;
                    done[i].calls += slice.calls;
                    done[i].took += slice.took;
                    done[i].cpu += slice.cpu;
                }
            }
            for (series, done) in [(&mut row.raw, done[0]), (&mut row.ours, done[1])] {
                series
                    .calls_per_s
                    .push(done.calls as f64 / done.took.as_secs_f64());
                series
                    .cpu_per_call
                    .push(micros(done.cpu) / done.calls as f64);
            }
        }
        eprintln!("round {} of {} done", round + 1, plan.rounds);
    }
    rows
}

/// Round-trip times of `calls` calls, one in flight.
async fn latency(side: &Side, payload: &ByteBuf, calls: usize) -> Vec<Duration> {
    let (side, payload) = (side.clone(), payload.clone());
    on_worker(async move {
        let mut samples = Vec::with_capacity(calls);
        for _ in 0..calls {
            let start = Instant::now();
            side.echo(&payload).await;
            samples.push(start.elapsed());
        }
        samples
    })
    .await
}

/// What a throughput run did.
#[derive(Default, Clone, Copy)]
struct Done {
    calls: u64,
    /// Wall-clock time.
    took: Duration,
    /// CPU time of the whole process (client and provider), which other processes on the
    /// machine disturb much less than the wall-clock time.
    cpu: Duration,
}

/// Calls completed with `IN_FLIGHT` callers, each one call at a time, over one connection, and
/// the time they took.
async fn throughput(side: &Side, payload: &ByteBuf, run_for: Duration) -> Done {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let callers: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let (side, payload) = (side.clone(), payload.clone());
            let (done, stop) = (done.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    side.echo(&payload).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Counted from after a short ramp-up to the stop signal; calls finishing later are not.
    tokio::time::sleep(run_for / 10).await;
    let (from, start, cpu) = (done.load(Ordering::Relaxed), Instant::now(), cpu_time());
    tokio::time::sleep(run_for).await;
    let (to, took, cpu) = (
        done.load(Ordering::Relaxed),
        start.elapsed(),
        cpu_time() - cpu,
    );
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller.await.expect("caller panicked");
    }
    Done {
        calls: to - from,
        took,
        cpu,
    }
}

/// CPU time used so far by all threads of this process, from Linux's per-thread scheduler
/// statistics (nanoseconds); zero where there are none.
fn cpu_time() -> Duration {
    let Ok(threads) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let nanos: u64 = threads
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(nanos)
}

/// Allocations (reallocations included) and bytes allocated per call, in the whole process, one
/// call in flight.
async fn allocations(side: &Side, payload: &ByteBuf, calls: usize) -> (f64, f64) {
    let (side, payload) = (side.clone(), payload.clone());
    on_worker(async move {
        let region = Region::new(GLOBAL);
        for _ in 0..calls {
            side.echo(&payload).await;
        }
        let change = region.change();
        // A reallocation is an allocation too (a `Vec` growing): counted as one.
        let allocations = change.allocations + change.reallocations;
        (
            allocations as f64 / calls as f64,
            change.bytes_allocated as f64 / calls as f64,
        )
    })
    .await
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The lookup figures, ns per lookup, one value per round.
struct Lookup {
    lookup_only: Vec<f64>,
    with_filter: Vec<f64>,
}

/// `Registry::lookup` with `SERVICES` services registered, alone and with the filtering the
/// call path does on its result (`choose` in `client/select.rs`, which is crate-private, redone
/// here through the public API).
fn lookup(iterations: usize) -> Lookup {
    let registry: Arc<dyn Registry> = Arc::new(MemoryRegistry::new());
    let functions = |i: usize| {
        (0..4)
            .map(|f| {
                let name = format!("f{f}");
                let signature = format!("f{f}(String, u{}) -> Vec<u8>", 8 << (i % 4));
                FunctionDescription::new(&name, &signature, f % 2 == 0, CallOptions::new())
            })
            .collect::<Vec<_>>()
    };
    let mut names = Vec::with_capacity(SERVICES);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    for i in 0..SERVICES {
        let name = format!("service-{i:04}");
        let description = ServiceDescription::new(
            &name,
            version(1, (i % 5) as u64, 0, "", ""),
            None,
            CallOptions::new(),
            functions(i),
        );
        // 100 nodes of 10 services each.
        let node = NodeInfo::new(
            format!("node-{:03}", i / 10),
            ([127, 0, 0, 1], 10_000 + (i / 10) as u16).into(),
            1,
        );
        let entry = ServiceEntry::new(node, Arc::new(description));
        runtime
            .block_on(registry.register(entry))
            .expect("registers");
        names.push(name);
    }
    // What a client of each service wants: caret on 1.0.0, the third function.
    let requirement = semver::VersionReq::parse("^1.0.0").expect("requirement");
    let wanted: Vec<_> = (0..SERVICES).map(|i| functions(i).swap_remove(2)).collect();
    let turn = std::sync::atomic::AtomicUsize::new(0);
    let avoid: Vec<Arc<ServiceEntry>> = Vec::new();

    let mut result = Lookup {
        lookup_only: Vec::new(),
        with_filter: Vec::new(),
    };
    let rounds = if iterations >= 1_000_000 { 5 } else { 1 };
    for _ in 0..rounds {
        let start = Instant::now();
        for i in 0..iterations {
            let entries = registry.lookup(&names[i % SERVICES]);
            std::hint::black_box(&entries);
        }
        result
            .lookup_only
            .push(start.elapsed().as_nanos() as f64 / iterations as f64);

        let start = Instant::now();
        for i in 0..iterations {
            let service = i % SERVICES;
            let chosen = choose_like(
                &*registry,
                &names[service],
                &requirement,
                &wanted[service],
                &avoid,
                &turn,
            );
            std::hint::black_box(chosen.expect("a provider"));
        }
        result
            .with_filter
            .push(start.elapsed().as_nanos() as f64 / iterations as f64);
    }
    result
}

/// `choose` of `cluster/src/client/select.rs`, step for step, as far as the public API allows:
/// each entry judged once (version within the requirement, a wire version in common, not excluded
/// for a wire refusal, the function with the same name and signature, a preference rank: not failed in this call and not ejected, not failed, any), the
/// best rank kept, the turn taken among those. Not measured, being crate-private: the ejection
/// check and the two-choices comparison of outstanding requests (`client.node.peers`), and
/// `newest_only` (off by default).
fn choose_like(
    registry: &dyn Registry,
    service: &str,
    requirement: &semver::VersionReq,
    wanted: &FunctionDescription,
    avoid: &[Arc<ServiceEntry>],
    turn: &std::sync::atomic::AtomicUsize,
) -> Option<(Arc<ServiceEntry>, usize)> {
    let entries = registry.lookup(service);
    let mut eligible: Vec<(&Arc<ServiceEntry>, usize, u8)> = entries
        .iter()
        .filter(|e| requirement.matches(&e.description.version))
        .filter(|e| {
            let theirs = e.node.wire_versions();
            let ours = cluster::WIRE_VERSIONS;
            theirs.start().max(ours.start()) <= theirs.end().min(ours.end())
                && !avoid.iter().any(|a| a.node.name == e.node.name)
        })
        .filter_map(|e| {
            let (index, _) = e.description.function(&wanted.name, &wanted.signature)?;
            let failed_here = avoid.iter().any(|a| a.node == e.node);
            let ejected = false;
            let rank = match (failed_here, ejected) {
                (false, false) => 0,
                (false, true) => 1,
                (true, _) => 2,
            };
            Some((e, index, rank))
        })
        .collect();
    let best = eligible.iter().map(|(.., rank)| *rank).min()?;
    eligible.retain(|(.., rank)| *rank == best);
    let turn = turn.fetch_add(1, Ordering::Relaxed) % eligible.len();
    let (entry, index, _) = eligible[turn];
    Some((entry.clone(), index))
}

/// The median, and the spread (max − min) as a fraction of it.
fn median(values: &[f64]) -> (f64, f64) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let m = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    (m, (v[v.len() - 1] - v[0]) / m)
}

/// The median over rounds of the per-round ratio ours / raw (each round measures both sides
/// back to back, so the ratio of a round is less noisy than the ratio of two medians).
fn ratio(ours: &[f64], raw: &[f64]) -> (f64, f64) {
    let per_round: Vec<f64> = ours.iter().zip(raw).map(|(o, r)| o / r).collect();
    median(&per_round)
}

/// One line of the table: a figure of both sides, and what their ratio should be.
struct Figure<'a> {
    name: &'static str,
    raw: &'a [f64],
    ours: &'a [f64],
    target: Target,
}

enum Target {
    None,
    AtMost(f64),
    AtLeast(f64),
}

fn print_report(plan: &Plan, rows: &[Row], lookup: &Lookup) {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "\n{} round(s), {cpus} CPUs; medians over rounds, ± half their range in % of the median; \
         ratio = cluster / raw, the median of the per-round ratios\n",
        plan.rounds
    );
    println!("| figure | payload | raw tarpc | cluster | ratio | target | met |");
    println!("|---|---|---|---|---|---|---|");
    for row in rows {
        let size = if row.payload >= 1024 {
            format!("{} KB", row.payload / 1024)
        } else {
            format!("{} B", row.payload)
        };
        let figures = [
            Figure {
                name: "p50 latency, 1 in flight (µs)",
                raw: &row.raw.p50,
                ours: &row.ours.p50,
                target: Target::AtMost(1.15),
            },
            Figure {
                name: "p99 latency, 1 in flight (µs)",
                raw: &row.raw.p99,
                ours: &row.ours.p99,
                target: Target::None,
            },
            Figure {
                name: "calls/s, 64 in flight",
                raw: &row.raw.calls_per_s,
                ours: &row.ours.calls_per_s,
                target: Target::AtLeast(0.90),
            },
            Figure {
                name: "CPU time per call, 64 in flight (µs)",
                raw: &row.raw.cpu_per_call,
                ours: &row.ours.cpu_per_call,
                target: Target::None,
            },
        ];
        for figure in figures {
            let (r, r_spread) = median(figure.raw);
            let (o, o_spread) = median(figure.ours);
            let (q, q_spread) = ratio(figure.ours, figure.raw);
            let (target, met) = match figure.target {
                Target::AtMost(limit) => (format!("≤ {limit:.2}"), yes(q <= limit)),
                Target::AtLeast(limit) => (format!("≥ {limit:.2}"), yes(q >= limit)),
                Target::None => (String::new(), ""),
            };
            println!(
                "| {} | {size} | {} (±{:.0}%) | {} (±{:.0}%) | {q:.3} (±{:.0}%) | {target} | {met} |",
                figure.name,
                figure_value(r),
                r_spread * 50.0,
                figure_value(o),
                o_spread * 50.0,
                q_spread * 50.0,
            );
        }
        println!(
            "| allocations per call (reallocations included) | {size} | {:.1} | {:.1} | {:.2} | | |",
            row.raw.allocs,
            row.ours.allocs,
            row.ours.allocs / row.raw.allocs
        );
        println!(
            "| bytes allocated per call | {size} | {:.0} | {:.0} | {:.2} | | |",
            row.raw.bytes,
            row.ours.bytes,
            row.ours.bytes / row.raw.bytes
        );
    }
    let (only, only_spread) = median(&lookup.lookup_only);
    let (filtered, filtered_spread) = median(&lookup.with_filter);
    println!(
        "\n| lookup, {SERVICES} services registered | ns per lookup | target | met |\n|---|---|---|---|"
    );
    println!(
        "| `Registry::lookup` | {only:.0} (±{:.0}%) | | |",
        only_spread * 50.0
    );
    println!(
        "| lookup + version/function filter + rank + turn (as `choose`) | {filtered:.0} (±{:.0}%) | < 1000 | {} |",
        filtered_spread * 50.0,
        yes(filtered < 1000.0)
    );
    println!(
        "\nallocations: whole process (client, provider and tarpc tasks), one call in flight, \
         {} calls after a warm-up",
        plan.alloc_calls
    );
}

fn figure_value(v: f64) -> String {
    if v >= 1000.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn yes(met: bool) -> &'static str {
    if met { "yes" } else { "**no**" }
}
