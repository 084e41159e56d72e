//! What a call costs: the floor (a bare multiplexed echo over one TCP connection, `calls/floor.rs`),
//! raw tarpc and tonic (gRPC) against the full `#[cluster::service]` call path in plaintext and
//! over mutual TLS, measured in the same run, plus what a new connection costs
//! (plaintext, a full TLS handshake, a resumed one), the registry lookup and the allocations per
//! call. Method and figures: `docs/benchmarks.md`.
//!
//! ```sh
//! cargo bench -p cluster --bench calls                 # full run, about two and a half minutes
//! cargo bench -p cluster --bench calls -- --smoke      # a few seconds, as CI runs it
//! cargo bench -p cluster --bench calls -- --profile ours --calls 2000 --payload 32 --in-flight 1
//! ```
//!
//! `--profile floor|raw|ours|tls|tonic|metered` runs only calls of one side, nothing else (for
//! `valgrind --tool=callgrind`): `floor` is the bare echo, `ours` is the call path in plaintext, `tls` over mutual TLS,
//! `tonic` the same echo over gRPC, `metered` the call path in plaintext with metrics on (both
//! nodes recording into their own Prometheus recorders).
//!
//! `--metrics` compares the call path with metrics off and on, interleaved as the full run
//! does (`docs/benchmarks.md`, "Metrics"); `--metrics --smoke` for a few seconds.

use std::alloc::System;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cluster::registry::{NodeInfo, ServiceEntry};
use cluster::service::version;
use cluster::{
    Authority, CallOptions, FunctionDescription, Identity, MemoryRegistry, Node, Registry,
    ServiceDescription,
};
use serde_bytes::ByteBuf;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

// Counts every allocation of the process: client, provider and tarpc's tasks alike.
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

#[path = "calls/floor.rs"]
mod floor;

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

/// The same echo over gRPC: tonic 0.14 on plaintext HTTP/2 (TCP on loopback, `TCP_NODELAY` on both
/// ends, one `Channel`, which multiplexes all calls over one connection), protobuf through prost.
/// The message and both ends of the service are written here by hand, as `tonic-build` would
/// generate them, minus what the bench does not use (compression and message-size settings, the
/// interceptor and origin constructors); the handler is a plain `Service` with a ready future
/// rather than a boxed `async_trait` method, which spares the generated code's one box per call.
mod grpc {
    use std::convert::Infallible;
    use std::future::{Ready, ready};
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tonic::body::Body;
    /// `message Payload { bytes bytes = 1; }`, both the request and the reply.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Payload {
        #[prost(bytes = "vec", tag = "1")]
        pub(crate) bytes: Vec<u8>,
    }

    /// `service Echo { rpc Echo(Payload) returns (Payload); }` in package `bench`.
    const PATH: &str = "/bench.Echo/Echo";

    /// The server side: routes `PATH` to the handler through tonic's unary call machinery.
    #[derive(Clone)]
    struct EchoServer;

    impl tonic::server::NamedService for EchoServer {
        const NAME: &'static str = "bench.Echo";
    }

    /// The handler: returns its argument.
    struct Handler;

    impl tower::Service<tonic::Request<Payload>> for Handler {
        type Response = tonic::Response<Payload>;
        type Error = tonic::Status;
        type Future = Ready<Result<Self::Response, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: tonic::Request<Payload>) -> Self::Future {
            ready(Ok(tonic::Response::new(request.into_inner())))
        }
    }

    type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, Infallible>> + Send>>;

    impl tower::Service<http::Request<Body>> for EchoServer {
        type Response = http::Response<Body>;
        type Error = Infallible;
        type Future = BoxFuture<Self::Response>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<Body>) -> Self::Future {
            if request.uri().path() == PATH {
                Box::pin(async move {
                    let codec = tonic_prost::ProstCodec::<Payload, Payload>::default();
                    Ok(tonic::server::Grpc::new(codec)
                        .unary(Handler, request)
                        .await)
                })
            } else {
                Box::pin(ready(Ok(
                    tonic::Status::unimplemented("no such method").into_http()
                )))
            }
        }
    }

    /// A client of the service over one channel: cloned once per calling task, as tonic's
    /// clients are (a call takes it by `&mut`).
    #[derive(Clone)]
    pub(crate) struct EchoClient(tonic::client::Grpc<tonic::transport::Channel>);

    impl EchoClient {
        pub(crate) async fn echo(&mut self, bytes: Vec<u8>) -> Result<Vec<u8>, tonic::Status> {
            self.0
                .ready()
                .await
                .map_err(|e| tonic::Status::unknown(format!("not ready: {e}")))?;
            let codec = tonic_prost::ProstCodec::<Payload, Payload>::default();
            let reply = self
                .0
                .unary(
                    tonic::Request::new(Payload { bytes }),
                    http::uri::PathAndQuery::from_static(PATH),
                    codec,
                )
                .await?;
            Ok(reply.into_inner().bytes)
        }
    }

    /// A server on a port from the OS, in this runtime, and one client connected to it.
    pub(crate) async fn start() -> EchoClient {
        let incoming = tonic::transport::server::TcpIncoming::bind(([127, 0, 0, 1], 0).into())
            .expect("listens")
            .with_nodelay(Some(true));
        let addr = incoming.local_addr().expect("an address");
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(EchoServer)
                .serve_with_incoming(incoming),
        );
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("an endpoint")
            .tcp_nodelay(true)
            .connect()
            .await
            .expect("connects");
        EchoClient(tonic::client::Grpc::new(channel))
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

/// One side of the comparison. Every calling task has a clone of its own.
#[derive(Clone)]
enum Side {
    Floor(floor::EchoClient),
    Raw(raw::EchoClient),
    Ours(BenchClient),
    Tonic(grpc::EchoClient),
}

impl Side {
    async fn echo(&mut self, payload: &ByteBuf) {
        let length = match self {
            Side::Floor(c) => c.echo(payload.to_vec()).await.len(),
            Side::Raw(c) => c
                .echo(tarpc::context::current(), payload.clone())
                .await
                .expect("raw tarpc echo")
                .len(),
            Side::Ours(c) => c.echo(payload.clone()).await.expect("cluster echo").len(),
            Side::Tonic(c) => c.echo(payload.to_vec()).await.expect("tonic echo").len(),
        };
        assert_eq!(length, payload.len(), "the echo came back changed");
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
    /// New connections measured per kind.
    connections: usize,
}

const FULL: Plan = Plan {
    rounds: 7,
    warmup_calls: 2000,
    latency_calls: 4000,
    throughput_for: Duration::from_millis(2000),
    alloc_calls: 2000,
    lookups: 2_000_000,
    connections: 200,
};

const SMOKE: Plan = Plan {
    rounds: 1,
    warmup_calls: 100,
    latency_calls: 400,
    throughput_for: Duration::from_millis(300),
    alloc_calls: 100,
    lookups: 20_000,
    connections: 10,
};

const PAYLOADS: [usize; 2] = [32, 4096];
const IN_FLIGHT: usize = 64;
/// The sides compared: the floor, raw tarpc, the call path in plaintext, the call path over
/// mutual TLS, tonic (gRPC).
const SIDES: usize = 5;
/// The turns each side takes per round and payload, for each of latency and throughput: a
/// multiple of `SIDES`, so that each side goes first equally often.
const SLICES: usize = 10;
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
    if args.iter().any(|a| a == "--metrics") {
        runtime.block_on(metrics_cost(&plan));
        return;
    }
    let (rows, connections) = runtime.block_on(async {
        let bench = start().await;
        let rows = compare(&plan, &bench.sides).await;
        let connections = connection_costs(&plan, &bench).await;
        (rows, connections)
    });
    let lookup = lookup(plan.lookups);
    print_report(&plan, &rows, &lookup);
    print_connections(&plan, &connections);
}

/// `calls` calls of one side only, by `in_flight` callers, after a warm-up: run it twice under
/// callgrind with two call counts, and the difference is the cost of that many calls.
async fn profile(side: &str, calls: usize, payload: usize, in_flight: usize) {
    let side = if side == "metered" {
        metered().await.0
    } else {
        let [floor, raw, ours, tls, tonic] = start().await.sides;
        match side {
            "floor" => floor,
            "raw" => raw,
            "ours" => ours,
            "tls" => tls,
            "tonic" => tonic,
            other => panic!("--profile floor|raw|ours|tls|tonic|metered, not {other}"),
        }
    };
    let payload = ByteBuf::from(vec![7u8; payload]);
    let callers: Vec<_> = (0..in_flight)
        .map(|_| {
            let (mut side, payload) = (side.clone(), payload.clone());
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

/// Everything the run needs, started.
struct Started {
    /// The floor, raw tarpc, the call path in plaintext, the call path over mutual TLS, tonic:
    /// connected, ready.
    sides: [Side; SIDES],
    /// The registry entry of the plaintext provider, and of the TLS one.
    plain: ServiceEntry,
    tls: ServiceEntry,
    /// The throwaway CA of the TLS nodes, for the fresh clients of the connection costs.
    ca: Authority,
}

/// A provider of `Bench` and a client node calling it, each with a registry of its own that
/// holds the provider's entry (so that a client finds only the provider meant for it).
async fn pair(
    provider: cluster::NodeBuilder,
    client: cluster::NodeBuilder,
) -> (Side, ServiceEntry) {
    let registry = MemoryRegistry::new();
    let provider = provider
        .registry(registry.clone())
        .start()
        .await
        .expect("provider starts");
    let registration = provider
        .serve(BenchServer::new(Echo))
        .await
        .expect("serves");
    let entry = ServiceEntry::clone(&provider.registry().lookup("bench")[0]);
    // The provider runs until the process ends.
    std::mem::forget((provider, registration));
    let node = client
        .registry(registry)
        .start()
        .await
        .expect("client starts");
    let side = Side::Ours(BenchClient::new(&node));
    std::mem::forget(node);
    (side, entry)
}

/// The five sides, connected and ready.
async fn start() -> Started {
    let floor = Side::Floor(floor::start().await);
    let raw = Side::Raw(raw::start().await);
    let (ours, plain) = pair(
        Node::builder().name("provider").insecure(),
        Node::builder().name("client").insecure(),
    )
    .await;
    let ca = Authority::new("bench").expect("a CA");
    let (tls_side, tls) = pair(
        Node::builder().identity(ca.issue("provider").expect("issues")),
        Node::builder().identity(ca.issue("client").expect("issues")),
    )
    .await;
    let tonic = Side::Tonic(grpc::start().await);
    // Each side connects before anything is measured.
    let payload = ByteBuf::from(vec![7u8; 32]);
    let mut sides = [floor, raw, ours, tls_side, tonic];
    for side in &mut sides {
        side.echo(&payload).await;
    }
    Started {
        sides,
        plain,
        tls,
        ca,
    }
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
    /// The floor, raw tarpc, cluster in plaintext, cluster over mutual TLS, tonic.
    sides: [Series; SIDES],
}

/// The order of the sides in turn `slice`: each side in each place equally often.
fn order(slice: usize) -> [usize; SIDES] {
    std::array::from_fn(|k| (slice + k) % SIDES)
}

async fn compare(plan: &Plan, sides: &[Side; SIDES]) -> Vec<Row> {
    let mut rows: Vec<Row> = PAYLOADS
        .iter()
        .map(|&payload| Row {
            payload,
            sides: Default::default(),
        })
        .collect();
    for row in &mut rows {
        let payload = ByteBuf::from(vec![7u8; row.payload]);
        for side in sides {
            latency(side, &payload, plan.warmup_calls).await;
            throughput(side, &payload, plan.throughput_for / 4).await;
        }
        for (series, side) in row.sides.iter_mut().zip(sides) {
            (series.allocs, series.bytes) = allocations(side, &payload, plan.alloc_calls).await;
        }
    }
    for round in 0..plan.rounds {
        for row in &mut rows {
            let payload = ByteBuf::from(vec![7u8; row.payload]);
            // The sides take turns in short slices, the first one rotating, so that a change in
            // the machine's load (other processes on the shared cores) hits all alike.
            let mut samples: [Vec<Duration>; SIDES] = Default::default();
            for slice in 0..SLICES {
                for i in order(slice) {
                    let calls = plan.latency_calls / SLICES;
                    samples[i].extend(latency(&sides[i], &payload, calls).await);
                }
            }
            for (series, mut samples) in row.sides.iter_mut().zip(samples) {
                samples.sort_unstable();
                let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
                series.p50.push(micros(at(0.50)));
                series.p99.push(micros(at(0.99)));
            }
            let mut done = [Done::default(); SIDES];
            for slice in 0..SLICES {
                for i in order(slice) {
                    let slice =
                        throughput(&sides[i], &payload, plan.throughput_for / SLICES as u32).await;
                    done[i].calls += slice.calls;
                    done[i].took += slice.took;
                    done[i].cpu += slice.cpu;
                }
            }
            for (series, done) in row.sides.iter_mut().zip(done) {
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
    let (mut side, payload) = (side.clone(), payload.clone());
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
            let (mut side, payload) = (side.clone(), payload.clone());
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
    let (mut side, payload) = (side.clone(), payload.clone());
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

/// The median over rounds of the per-round ratio ours / theirs (each round measures the sides
/// back to back, so the ratio of a round is less noisy than the ratio of two medians).
fn ratio(ours: &[f64], theirs: &[f64]) -> (f64, f64) {
    let per_round: Vec<f64> = ours.iter().zip(theirs).map(|(o, t)| o / t).collect();
    median(&per_round)
}

/// One line of the table: a figure of the five sides, and what their ratios should be.
struct Figure<'a> {
    name: &'static str,
    /// The floor, raw tarpc, cluster in plaintext, cluster over mutual TLS, tonic.
    values: [&'a [f64]; SIDES],
    /// For cluster / the floor.
    floor_target: Target,
    /// For cluster / raw tarpc.
    target: Target,
    /// For TLS / plaintext cluster.
    tls_target: Target,
}

#[derive(Clone, Copy)]
enum Target {
    None,
    AtMost(f64),
    AtLeast(f64),
}

impl Target {
    fn judge(self, q: f64) -> String {
        match self {
            Target::AtMost(limit) => format!("≤ {limit:.2}: {}", yes(q <= limit)),
            Target::AtLeast(limit) => format!("≥ {limit:.2}: {}", yes(q >= limit)),
            Target::None => String::new(),
        }
    }
}

fn print_report(plan: &Plan, rows: &[Row], lookup: &Lookup) {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "\n{} round(s), {cpus} CPUs; medians over rounds, ± half their range in % of the median; \
         each ratio is the median of the per-round ratios: cluster / floor, cluster / raw tarpc \
         (all plaintext), and TLS / cluster (the call path over mutual TLS against the same in \
         plaintext); each target with whether it was met\n",
        plan.rounds
    );
    println!(
        "| figure | payload | floor | raw tarpc | cluster | cluster TLS | tonic | cluster / floor | target | cluster / raw | target | TLS / cluster | target |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for row in rows {
        let size = if row.payload >= 1024 {
            format!("{} KB", row.payload / 1024)
        } else {
            format!("{} B", row.payload)
        };
        let [floor, raw, ours, tls, tonic] = &row.sides;
        let figures = [
            Figure {
                name: "p50 latency, 1 in flight (µs)",
                values: [&floor.p50, &raw.p50, &ours.p50, &tls.p50, &tonic.p50],
                floor_target: Target::AtMost(1.2),
                target: Target::None,
                tls_target: Target::AtMost(1.10),
            },
            Figure {
                name: "p99 latency, 1 in flight (µs)",
                values: [&floor.p99, &raw.p99, &ours.p99, &tls.p99, &tonic.p99],
                floor_target: Target::None,
                target: Target::None,
                tls_target: Target::None,
            },
            Figure {
                name: "calls/s, 64 in flight",
                values: [
                    &floor.calls_per_s,
                    &raw.calls_per_s,
                    &ours.calls_per_s,
                    &tls.calls_per_s,
                    &tonic.calls_per_s,
                ],
                floor_target: Target::None,
                target: Target::AtLeast(1.2),
                tls_target: Target::AtLeast(0.85),
            },
            Figure {
                name: "CPU time per call, 64 in flight (µs)",
                values: [
                    &floor.cpu_per_call,
                    &raw.cpu_per_call,
                    &ours.cpu_per_call,
                    &tls.cpu_per_call,
                    &tonic.cpu_per_call,
                ],
                floor_target: Target::AtMost(1.5),
                target: Target::None,
                tls_target: Target::AtMost(1.1),
            },
        ];
        for figure in figures {
            let [f, r, o, t, _] = figure.values;
            let cells: Vec<String> = figure
                .values
                .iter()
                .map(|v| {
                    let (m, spread) = median(v);
                    format!("{} (±{:.0}%)", figure_value(m), spread * 50.0)
                })
                .collect();
            let quotient = |a: &[f64], b: &[f64], target: Target| {
                let (q, spread) = ratio(a, b);
                (format!("{q:.3} (±{:.0}%)", spread * 50.0), target.judge(q))
            };
            let (qf, floor_met) = quotient(o, f, figure.floor_target);
            let (qr, raw_met) = quotient(o, r, figure.target);
            let (qt, tls_met) = quotient(t, o, figure.tls_target);
            println!(
                "| {} | {size} | {} | {qf} | {floor_met} | {qr} | {raw_met} | {qt} | {tls_met} |",
                figure.name,
                cells.join(" | "),
            );
        }
        let allocs = [floor, raw, ours, tls, tonic].map(|s| format!("{:.1}", s.allocs));
        println!(
            "| allocations per call (reallocations included) | {size} | {} | {:.2} | | {:.2} | ≤ 8 (cluster): {} | {:.2} | |",
            allocs.join(" | "),
            ours.allocs / floor.allocs,
            ours.allocs / raw.allocs,
            yes(ours.allocs <= 8.0),
            tls.allocs / ours.allocs
        );
        let bytes = [floor, raw, ours, tls, tonic].map(|s| format!("{:.0}", s.bytes));
        println!(
            "| bytes allocated per call | {size} | {} | {:.2} | | {:.2} | | {:.2} | |",
            bytes.join(" | "),
            ours.bytes / floor.bytes,
            ours.bytes / raw.bytes,
            tls.bytes / ours.bytes
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
        "\nallocations: whole process (client, provider, the floor's, tarpc's, hyper's and tonic's tasks), one \
         call in flight, \
         {} calls after a warm-up",
        plan.alloc_calls
    );
}

/// A TCP forwarder on loopback between a client node and a provider: the bench's way to close
/// a client's pooled connection (the public API has none short of stopping a node, which also
/// drops its TLS session cache), so that the same client node reconnects on its next call.
mod proxy {
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::task::AbortHandle;

    pub(crate) struct Proxy {
        pub(crate) addr: SocketAddr,
        pumps: Mutex<Vec<AbortHandle>>,
        accepted: AtomicU64,
        /// Bytes forwarded client → provider.
        up: AtomicU64,
        /// Bytes forwarded provider → client.
        down: AtomicU64,
    }

    /// What the proxy has done so far: connections accepted, bytes up, bytes down.
    #[derive(Clone, Copy)]
    pub(crate) struct Counts {
        pub(crate) accepted: u64,
        pub(crate) up: u64,
        pub(crate) down: u64,
    }

    impl Proxy {
        /// Listens on a port from the OS and forwards every connection to `to`.
        pub(crate) async fn start(to: SocketAddr) -> Arc<Proxy> {
            let listener = TcpListener::bind(("127.0.0.1", 0))
                .await
                .expect("the proxy listens");
            let proxy = Arc::new(Proxy {
                addr: listener.local_addr().expect("an address"),
                pumps: Mutex::default(),
                accepted: AtomicU64::new(0),
                up: AtomicU64::new(0),
                down: AtomicU64::new(0),
            });
            let this = proxy.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    let Ok(provider) = TcpStream::connect(to).await else {
                        continue;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = provider.set_nodelay(true);
                    this.accepted.fetch_add(1, Ordering::SeqCst);
                    let (client_read, client_write) = client.into_split();
                    let (provider_read, provider_write) = provider.into_split();
                    let up = tokio::spawn(pump(client_read, provider_write, this.clone(), true));
                    let down = tokio::spawn(pump(provider_read, client_write, this.clone(), false));
                    let mut pumps = this.pumps.lock().expect("pumps");
                    pumps.retain(|p| !p.is_finished());
                    pumps.extend([up.abort_handle(), down.abort_handle()]);
                }
            });
            proxy
        }

        /// Closes every connection forwarded now, both ends.
        pub(crate) fn cut(&self) {
            for pump in self.pumps.lock().expect("pumps").drain(..) {
                pump.abort();
            }
        }

        pub(crate) fn counts(&self) -> Counts {
            Counts {
                accepted: self.accepted.load(Ordering::SeqCst),
                up: self.up.load(Ordering::SeqCst),
                down: self.down.load(Ordering::SeqCst),
            }
        }
    }

    async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, proxy: Arc<Proxy>, up: bool) {
        let counter = if up { &proxy.up } else { &proxy.down };
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    // Counted before it is passed on: once the client has a reply, its bytes
                    // are in the count.
                    counter.fetch_add(n as u64, Ordering::SeqCst);
                    if to.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown().await;
    }
}

/// The ways a call can find no connection to its provider, measured from there to its first
/// reply.
#[derive(Clone, Copy)]
enum Fresh {
    /// A new plaintext client node: TCP, the handshake, the call.
    Plain,
    /// A new TLS client node (an empty session cache): a full TLS 1.3 handshake.
    TlsFull,
    /// The same, through the proxy: what the proxy adds.
    TlsFullProxied,
    /// The same plaintext client node, its connection cut by the proxy.
    PlainReconnect,
    /// The same TLS client node, its connection cut by the proxy: it resumes the session.
    TlsResumed,
}

const FRESH: [Fresh; 5] = [
    Fresh::Plain,
    Fresh::TlsFull,
    Fresh::TlsFullProxied,
    Fresh::PlainReconnect,
    Fresh::TlsResumed,
];

impl Fresh {
    fn describe(self) -> &'static str {
        match self {
            Fresh::Plain => "plaintext, new client node, direct",
            Fresh::TlsFull => "TLS full handshake, new client node, direct",
            Fresh::TlsFullProxied => "TLS full handshake, new client node, through the proxy",
            Fresh::PlainReconnect => "plaintext, same client node reconnecting, through the proxy",
            Fresh::TlsResumed => "TLS resumed, same client node reconnecting, through the proxy",
        }
    }
}

/// What the connection costs need: the providers' entries (direct and through a proxy each),
/// the long-lived client nodes that reconnect, an identity for new TLS client nodes.
struct Reconnects {
    plain: ServiceEntry,
    tls: ServiceEntry,
    tls_proxied: ServiceEntry,
    plain_proxy: Arc<proxy::Proxy>,
    tls_proxy: Arc<proxy::Proxy>,
    plain_client: BenchClient,
    tls_client: BenchClient,
    identity: Identity,
}

/// One new connection: the time to the first reply, and for a connection through a proxy the
/// bytes it carried each way.
struct Sample {
    took: Duration,
    bytes: Option<(u64, u64)>,
}

/// `entry` as if the provider were at `addr` (the proxy).
fn moved(entry: &ServiceEntry, addr: std::net::SocketAddr) -> ServiceEntry {
    let mut entry = entry.clone();
    entry.node.addr = addr;
    entry
}

/// A client node whose registry holds `entry` alone: TLS with `identity`, else plaintext.
async fn client_node(entry: &ServiceEntry, identity: Option<&Identity>) -> Node {
    let registry = MemoryRegistry::new();
    registry
        .register(entry.clone())
        .await
        .expect("registers the entry");
    let builder = match identity {
        Some(identity) => Node::builder().identity(identity.clone()),
        None => Node::builder().name("fresh").insecure(),
    };
    builder
        .registry(registry)
        .start()
        .await
        .expect("a client node starts")
}

/// Times `client`'s call, which has no connection to use, to its first reply.
async fn first_reply(client: &BenchClient, through: Option<&proxy::Proxy>) -> Sample {
    let payload = ByteBuf::from(vec![7u8; 32]);
    let before = through.map(|p| p.counts());
    let start = Instant::now();
    let back = client.echo(payload).await.expect("the first call");
    let took = start.elapsed();
    assert_eq!(back.len(), 32);
    let bytes = through.zip(before).map(|(p, before)| {
        let after = p.counts();
        assert_eq!(
            after.accepted - before.accepted,
            1,
            "the call opened exactly one connection"
        );
        (after.up - before.up, after.down - before.down)
    });
    Sample { took, bytes }
}

async fn sample(r: Arc<Reconnects>, kind: Fresh) -> Sample {
    let new_node = |entry: &ServiceEntry, tls: bool| {
        let (entry, identity) = (entry.clone(), r.identity.clone());
        async move { client_node(&entry, tls.then_some(&identity)).await }
    };
    let (node, through) = match kind {
        Fresh::Plain => (new_node(&r.plain, false).await, None),
        Fresh::TlsFull => (new_node(&r.tls, true).await, None),
        Fresh::TlsFullProxied => (new_node(&r.tls_proxied, true).await, Some(&r.tls_proxy)),
        Fresh::PlainReconnect | Fresh::TlsResumed => {
            let (proxy, client) = match kind {
                Fresh::PlainReconnect => (&r.plain_proxy, &r.plain_client),
                _ => (&r.tls_proxy, &r.tls_client),
            };
            proxy.cut();
            // Long enough for the client to see its connection close, so that the call opens
            // a new one instead of failing on the old one.
            tokio::time::sleep(Duration::from_millis(5)).await;
            return first_reply(client, Some(proxy)).await;
        }
    };
    let client = BenchClient::new(&node);
    let sample = first_reply(&client, through.map(|p| &**p)).await;
    node.kill().await;
    sample
}

/// `plan.connections` new connections of each kind, the kinds in turn (the first rotating).
async fn connection_costs(plan: &Plan, bench: &Started) -> Vec<(Fresh, Vec<Sample>)> {
    let plain_proxy = proxy::Proxy::start(bench.plain.node.addr).await;
    let tls_proxy = proxy::Proxy::start(bench.tls.node.addr).await;
    let plain_client = client_node(&moved(&bench.plain, plain_proxy.addr), None).await;
    let tls_client = client_node(
        &moved(&bench.tls, tls_proxy.addr),
        Some(&bench.ca.issue("resuming").expect("issues")),
    )
    .await;
    let reconnects = Arc::new(Reconnects {
        plain: bench.plain.clone(),
        tls: bench.tls.clone(),
        tls_proxied: moved(&bench.tls, tls_proxy.addr),
        plain_proxy,
        tls_proxy,
        plain_client: BenchClient::new(&plain_client),
        tls_client: BenchClient::new(&tls_client),
        identity: bench.ca.issue("fresh").expect("issues"),
    });
    // The first connections of the long-lived clients (the TLS one's a full handshake, which
    // fills its session cache), and a few of each kind as a warm-up.
    let mut samples: Vec<Vec<Sample>> = FRESH.iter().map(|_| Vec::new()).collect();
    for rep in 0..plan.connections + 5 {
        for k in 0..FRESH.len() {
            let i = (rep + k) % FRESH.len();
            let sample = on_worker(sample(reconnects.clone(), FRESH[i])).await;
            if rep >= 5 {
                samples[i].push(sample);
            }
        }
    }
    std::mem::forget((plain_client, tls_client));
    FRESH.into_iter().zip(samples).collect()
}

fn print_connections(plan: &Plan, costs: &[(Fresh, Vec<Sample>)]) {
    println!(
        "\n| new connection: from no connection to the first reply of a 32 B echo | n | median (µs) | p10 | p90 | min | max | bytes up / down (median) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (kind, samples) in costs {
        let mut took: Vec<f64> = samples.iter().map(|s| micros(s.took)).collect();
        took.sort_by(f64::total_cmp);
        let at = |v: &[f64], q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        let bytes = if samples.iter().all(|s| s.bytes.is_some()) {
            let mut up: Vec<f64> = samples.iter().map(|s| s.bytes.unwrap().0 as f64).collect();
            let mut down: Vec<f64> = samples.iter().map(|s| s.bytes.unwrap().1 as f64).collect();
            up.sort_by(f64::total_cmp);
            down.sort_by(f64::total_cmp);
            format!("{:.0} / {:.0}", at(&up, 0.5), at(&down, 0.5))
        } else {
            String::new()
        };
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {bytes} |",
            kind.describe(),
            took.len(),
            at(&took, 0.5),
            at(&took, 0.1),
            at(&took, 0.9),
            took[0],
            took[took.len() - 1],
        );
    }
    println!(
        "\n{} connections of each kind after 5 of warm-up, the kinds in turn (the first \
         rotating); bytes: both directions, TLS records included, as the proxy forwarded them",
        plan.connections
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

/// The call path in plaintext with metrics on, both nodes recording into recorders of their
/// own and serving them on a port from the OS; and the calling node, to render them.
async fn metered() -> (Side, Node) {
    let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let registry = MemoryRegistry::new();
    let provider = Node::builder()
        .name("provider")
        .insecure()
        .metrics(any)
        .registry(registry.clone())
        .start()
        .await
        .expect("provider starts");
    let registration = provider
        .serve(BenchServer::new(Echo))
        .await
        .expect("serves");
    std::mem::forget((provider, registration));
    let node = Node::builder()
        .name("client")
        .insecure()
        .metrics(any)
        .registry(registry)
        .start()
        .await
        .expect("client starts");
    let mut side = Side::Ours(BenchClient::new(&node));
    side.echo(&ByteBuf::from(vec![7u8; 32])).await;
    (side, node)
}

/// What metrics cost a call: the call path with metrics off and on, at 32 B, the two taking
/// turns in short slices as in `compare`; per-round ratios on / off.
async fn metrics_cost(plan: &Plan) {
    let [_, _, off, ..] = start().await.sides;
    let (on, node) = metered().await;
    let sides = [off, on];
    let payload = ByteBuf::from(vec![7u8; 32]);
    for side in &sides {
        latency(side, &payload, plan.warmup_calls).await;
        throughput(side, &payload, plan.throughput_for / 4).await;
    }
    let allocs: Vec<(f64, f64)> = {
        let mut a = Vec::new();
        for side in &sides {
            a.push(allocations(side, &payload, plan.alloc_calls).await);
        }
        a
    };
    let mut series: [Series; 2] = Default::default();
    for round in 0..plan.rounds {
        let mut samples: [Vec<Duration>; 2] = Default::default();
        let mut done = [Done::default(); 2];
        for slice in 0..SLICES {
            for i in [slice % 2, (slice + 1) % 2] {
                let calls = plan.latency_calls / SLICES;
                samples[i].extend(latency(&sides[i], &payload, calls).await);
            }
        }
        for slice in 0..SLICES {
            for i in [slice % 2, (slice + 1) % 2] {
                let d = throughput(&sides[i], &payload, plan.throughput_for / SLICES as u32).await;
                done[i].calls += d.calls;
                done[i].took += d.took;
                done[i].cpu += d.cpu;
            }
        }
        for ((series, mut samples), done) in series.iter_mut().zip(samples).zip(done) {
            samples.sort_unstable();
            let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
            series.p50.push(micros(at(0.50)));
            series.p99.push(micros(at(0.99)));
            series
                .calls_per_s
                .push(done.calls as f64 / done.took.as_secs_f64());
            series
                .cpu_per_call
                .push(micros(done.cpu) / done.calls as f64);
        }
        eprintln!("round {} of {} done", round + 1, plan.rounds);
    }
    println!("\n| figure, 32 B | metrics off | metrics on | on / off (per round) |");
    println!("|---|---|---|---|");
    let [off, on] = &series;
    let figures: [(&str, &[f64], &[f64]); 4] = [
        ("p50 latency, 1 in flight (µs)", &off.p50, &on.p50),
        ("p99 latency, 1 in flight (µs)", &off.p99, &on.p99),
        ("calls/s, 64 in flight", &off.calls_per_s, &on.calls_per_s),
        (
            "CPU time per call, 64 in flight (µs)",
            &off.cpu_per_call,
            &on.cpu_per_call,
        ),
    ];
    for (name, off, on) in figures {
        let ((a, da), (b, db), (r, dr)) = (median(off), median(on), ratio(on, off));
        println!(
            "| {name} | {} (±{:.0}%) | {} (±{:.0}%) | {r:.3} (±{:.0}%) |",
            figure_value(a),
            da * 50.0,
            figure_value(b),
            db * 50.0,
            dr * 50.0
        );
    }
    println!(
        "| allocations per call | {:.1} | {:.1} | |\n| bytes allocated per call | {:.0} | {:.0} | |",
        allocs[0].0, allocs[1].0, allocs[0].1, allocs[1].1
    );
    // The metrics were recorded: the calls the run made, as the calling node counts them.
    let text = node.render_metrics().expect("metrics on");
    let calls = text
        .lines()
        .find(|l| l.starts_with("cluster_calls_total{"))
        .unwrap_or("cluster_calls_total: missing");
    println!(
        "\n{rounds} rounds; the metered client counted `{calls}`",
        rounds = plan.rounds
    );
}
