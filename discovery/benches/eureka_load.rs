//! Load on the Eureka server: registrations, heartbeats, full reads from the cache (gzipped),
//! heartbeats while readers poll the full registry, memory, and replication to two peers. Real
//! HTTP on loopback; the servers run in this process on a runtime of their own (2 threads), the
//! load on another (2 threads), so both share the machine as a client and a server would on
//! one host. With `--binary`, the server under load is the `cluster-discovery` binary (release,
//! with its own allocator, mimalloc) in a child process, and the memory is that process's.
//! Method and figures: `docs/benchmarks.md`.
//!
//! ```sh
//! cargo bench -p cluster-discovery --bench eureka_load                      # 10,000 then 100,000
//! cargo bench -p cluster-discovery --bench eureka_load -- --instances 30000 # one size
//! cargo bench -p cluster-discovery --bench eureka_load -- --instances 100000 --binary --peers 0
//! cargo bench -p cluster-discovery --bench eureka_load -- --smoke           # seconds, for CI
//! ```

use std::io::BufRead as _;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cluster_discovery::server::{Access, Limits, RegistryServer, RunningServer, ServerConfig};

/// Connections the load is spread over (each a task sending one request at a time).
const CONNECTIONS: usize = 8;
/// Instances per application (so 100 applications at 100,000).
const PER_APP: usize = 1_000;

struct Options {
    sizes: Vec<usize>,
    seconds: u64,
    readers: usize,
    peers: usize,
    /// After the readers, reads of each format without gzip.
    plain: bool,
    /// Where the server under load runs, per size, in turn.
    servers: Vec<Where>,
}

/// Where the server under load runs.
#[derive(Clone, Copy, PartialEq)]
enum Where {
    /// In this process, on the servers' runtime (glibc's malloc, this process's memory).
    InProcess,
    /// The `cluster-discovery` binary in a child process (its allocator, its memory).
    Binary,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<usize>().ok())
    };
    if args.iter().any(|a| a == "--smoke") {
        // Both servers, so that the binary's start and memory readings are run in CI too.
        return Options {
            sizes: vec![1_000],
            seconds: 1,
            readers: 2,
            peers: 1_000,
            plain: true,
            servers: vec![Where::InProcess, Where::Binary],
        };
    }
    let binary = args.iter().any(|a| a == "--binary");
    Options {
        sizes: value("--instances").map_or(vec![10_000, 100_000], |n| vec![n]),
        seconds: value("--seconds").map_or(5, |s| s as u64),
        readers: value("--readers").unwrap_or(2),
        peers: value("--peers").unwrap_or(40_000),
        plain: args.iter().any(|a| a == "--plain"),
        servers: vec![if binary {
            Where::Binary
        } else {
            Where::InProcess
        }],
    }
}

fn config(instances: usize) -> ServerConfig {
    let mut limits = Limits::default();
    limits.max_instances = instances.max(1);
    limits.max_instances_per_app = PER_APP;
    limits.max_apps = instances.div_ceil(PER_APP).max(1);
    limits.max_peer_queue = instances.saturating_mul(3).max(1);
    let mut config = ServerConfig::default();
    config.limits = limits;
    config.warm_up = false;
    config
}

fn app_of(k: usize) -> String {
    format!("APP-{}", k / PER_APP)
}

fn body(k: usize) -> String {
    let app = app_of(k);
    serde_json::json!({"instance": {
        "app": app, "instanceId": format!("i-{k}"), "hostName": format!("h{k}.example"),
        "ipAddr": format!("10.{}.{}.{}", k >> 16 & 255, k >> 8 & 255, k & 255),
        "port": {"$": 8080, "@enabled": "true"}, "vipAddress": app.to_lowercase(),
        "dataCenterInfo": {"@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", "name": "MyOwn"},
        "leaseInfo": {"renewalIntervalInSecs": 30, "durationInSecs": 90},
        "metadata": {"zone": "a", "version": "1.2.3"},
        "status": "UP"
    }})
    .to_string()
}

/// Latencies in microseconds, and how to read them.
#[derive(Default)]
struct Latencies(Vec<u32>);

impl Latencies {
    fn add(&mut self, d: Duration) {
        self.0
            .push(u32::try_from(d.as_micros()).unwrap_or(u32::MAX));
    }
    fn merge(&mut self, other: Latencies) {
        self.0.extend(other.0);
    }
    fn summary(&mut self) -> String {
        if self.0.is_empty() {
            return "none".into();
        }
        self.0.sort_unstable();
        let at = |q: f64| {
            let i = ((self.0.len() - 1) as f64 * q).round() as usize;
            f64::from(self.0[i]) / 1000.0
        };
        format!(
            "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            at(0.5),
            at(0.99),
            at(1.0)
        )
    }
}

/// Sends `f(k)` for k in `0..n`, `CONNECTIONS` at a time, until `until` if given: how many
/// were sent, their rate per second, and their latencies.
async fn spread<F, Fut>(n: usize, until: Option<Instant>, f: F) -> (usize, f64, Latencies)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (f, next) = (f.clone(), next.clone());
            tokio::spawn(async move {
                let mut lat = Latencies::default();
                loop {
                    if until.is_some_and(|u| Instant::now() >= u) {
                        return lat;
                    }
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= n {
                        return lat;
                    }
                    let t = Instant::now();
                    f(k).await;
                    lat.add(t.elapsed());
                }
            })
        })
        .collect();
    let mut all = Latencies::default();
    for t in tasks {
        all.merge(t.await.expect("a load task"));
    }
    let sent = all.0.len();
    (sent, sent as f64 / start.elapsed().as_secs_f64(), all)
}

async fn register_range(
    http: &reqwest::Client,
    url: &str,
    range: std::ops::Range<usize>,
) -> (f64, Latencies) {
    let (http, url) = (http.clone(), url.to_owned());
    let first = range.start;
    let (_, rate, lat) = spread(range.len(), None, move |k| {
        let k = first + k;
        let req = http
            .post(format!("{url}apps/{}", app_of(k)))
            .header("content-type", "application/json")
            .body(body(k));
        async move {
            let r = req.send().await.expect("registered");
            assert_eq!(r.status(), 204, "registration {k}");
        }
    })
    .await;
    (rate, lat)
}

/// Heartbeats over every instance in turn, for `seconds`.
async fn heartbeats(http: &reqwest::Client, url: &str, n: usize, seconds: u64) -> (f64, Latencies) {
    let (http, url) = (http.clone(), url.to_owned());
    let until = Instant::now() + Duration::from_secs(seconds);
    let (_, rate, lat) = spread(usize::MAX, Some(until), move |k| {
        let k = k % n;
        let req = http.put(format!("{url}apps/{}/i-{k}", app_of(k)));
        async move {
            let r = req.send().await.expect("renewed");
            assert_eq!(r.status(), 200, "heartbeat of i-{k}");
        }
    })
    .await;
    (rate, lat)
}

/// One full read, asking for gzip: its latency and the bytes received (compressed if the
/// server gzips; a server before the response cache did not, and the bench still runs on it).
async fn read_apps(http: &reqwest::Client, url: &str) -> (Duration, usize) {
    read_as(http, url, "application/json").await
}

/// [`read_apps`] in the format `accept` asks for.
async fn read_as(http: &reqwest::Client, url: &str, accept: &str) -> (Duration, usize) {
    read_encoded(http, url, accept, "gzip").await
}

/// [`read_as`], asking for `encoding` (`identity`: the plain text).
async fn read_encoded(
    http: &reqwest::Client,
    url: &str,
    accept: &str,
    encoding: &str,
) -> (Duration, usize) {
    let t = Instant::now();
    let r = http
        .get(format!("{url}apps/"))
        .header("accept", accept)
        .header("accept-encoding", encoding)
        .send()
        .await
        .expect("read");
    assert_eq!(r.status(), 200);
    if encoding == "gzip" {
        let bytes = r.bytes().await.expect("read body").len();
        return (t.elapsed(), bytes);
    }
    // Counted as it comes, not held: a body without gzip is 70 to 100 MiB at 100,000
    // instances, which would be the load's memory in the figures of this process.
    let (mut r, mut bytes) = (r, 0);
    while let Some(piece) = r.chunk().await.expect("read body") {
        bytes += piece.len();
    }
    (t.elapsed(), bytes)
}

/// The process whose memory is measured: this one (`/proc/self`), or the server's child.
#[derive(Clone)]
struct Watched(String);

/// Its resident memory now and at its peak since the last [`reset_peak`] (`VmRSS`,
/// `VmHWM`), in MiB.
struct Memory {
    rss: f64,
    peak: f64,
}

fn memory(of: &Watched) -> Memory {
    let status = std::fs::read_to_string(format!("{}/status", of.0)).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    Memory {
        rss: field("VmRSS:"),
        peak: field("VmHWM:"),
    }
}

/// The largest peak printed since the server under load started, as `f64` bits (positive
/// floats order as their bits do).
static PEAK: AtomicU64 = AtomicU64::new(0);

/// Starts a new peak at the present RSS (Linux 4.0 on; a child of the same user's too; where
/// it cannot, the peak printed is the peak since the process started, and says so).
fn reset_peak(of: &Watched) -> bool {
    std::fs::write(format!("{}/clear_refs", of.0), "5").is_ok()
}

/// `what`'s memory: the RSS now, the peak since `since` (a [`reset_peak`]), and how far the
/// peak rose above `before` (the RSS when the phase began).
fn print_memory(of: &Watched, what: &str, before: &Memory, reset: bool) {
    let m = memory(of);
    let _ = PEAK.fetch_max(m.peak.to_bits(), Ordering::Relaxed);
    let peak = if reset { "peak" } else { "peak since start" };
    println!(
        "memory {what}: rss {:.0} MiB, {peak} {:.0} MiB ({:+.0} MiB over the {:.0} MiB before it)",
        m.rss,
        m.peak,
        m.peak - before.rss,
        before.rss
    );
}

/// Runs `phase` with the peak reset before it, and prints its memory as `what`.
async fn measured<T>(of: &Watched, what: &str, phase: impl std::future::Future<Output = T>) -> T {
    let reset = reset_peak(of);
    let before = memory(of);
    let out = phase.await;
    print_memory(of, what, &before, reset);
    out
}

fn server_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("server")
        .enable_all()
        .build()
        .expect("the servers' runtime")
}

/// Open, said by name: the figures are the registry's own, without a credential check (a
/// SHA-256 per request) in them, as in the baselines of docs/benchmarks.md.
async fn start(config: ServerConfig) -> RunningServer {
    RegistryServer::new()
        .access(Access::open())
        .config(config)
        .start(([127, 0, 0, 1], 0).into())
        .await
        .expect("a server on loopback")
}

/// The server under load, and the process whose memory is its.
enum Server {
    InProcess(RunningServer),
    Binary(Binary),
}

impl Server {
    async fn start(servers: &tokio::runtime::Handle, at: Where, n: usize) -> Self {
        match at {
            Where::InProcess => {
                Self::InProcess(servers.spawn(start(config(n))).await.expect("started"))
            }
            Where::Binary => Self::Binary(
                tokio::task::spawn_blocking(move || Binary::start(n))
                    .await
                    .expect("started"),
            ),
        }
    }

    fn url(&self) -> String {
        match self {
            Self::InProcess(s) => s.url(),
            Self::Binary(b) => b.url.clone(),
        }
    }

    fn watched(&self) -> Watched {
        match self {
            Self::InProcess(_) => Watched("/proc/self".into()),
            Self::Binary(b) => Watched(format!("/proc/{}", b.child.id())),
        }
    }

    async fn stop(self, servers: &tokio::runtime::Handle) {
        match self {
            Self::InProcess(s) => {
                let _ = servers.spawn(s.shutdown()).await;
            }
            Self::Binary(b) => {
                let _ = tokio::task::spawn_blocking(move || b.stop()).await;
            }
        }
    }
}

/// `cluster-discovery serve` as built for this bench (cargo builds the package's binaries with
/// its benches, in the same profile), open, on a port the OS picks, with the limits that
/// [`config`] gives the server in this process. Killed if the bench panics.
struct Binary {
    child: Child,
    url: String,
    /// Held so that the child never writes to a closed pipe.
    _stdout: std::io::BufReader<ChildStdout>,
}

impl Binary {
    fn start(n: usize) -> Self {
        let count = |v: usize| v.max(1).to_string();
        let mut child = Command::new(env!("CARGO_BIN_EXE_cluster-discovery"))
            .args(["serve", "--open", "--port", "0", "--no-warm-up"])
            .args(["--max-instances", &count(n)])
            .args(["--max-instances-per-app", &count(PER_APP)])
            .args(["--max-apps", &count(n.div_ceil(PER_APP))])
            .args(["--max-peer-queue", &count(n.saturating_mul(3))])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("cluster-discovery serve started");
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("its stdout"));
        let mut line = String::new();
        let read = stdout.read_line(&mut line);
        let Some(url) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            panic!("cluster-discovery serve said {line:?} ({read:?}), not `listening on URL`");
        };
        Self {
            url: url.to_owned(),
            child,
            _stdout: stdout,
        }
    }

    /// SIGTERM, as a deployment stops it, then its exit.
    fn stop(mut self) {
        // Our own child, not yet waited for, so its pid is not anyone else's.
        let term = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        assert!(term.is_ok_and(|s| s.success()), "SIGTERM sent");
        let status = self.child.wait().expect("the server's exit");
        assert!(status.success(), "cluster-discovery serve exited {status}");
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        // After `stop` the child has exited and been waited for: this does nothing then.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn size(servers: &tokio::runtime::Handle, n: usize, at: Where, o: &Options) {
    let server = Server::start(servers, at, n).await;
    PEAK.store(0, Ordering::Relaxed);
    let url = server.url();
    let of = &server.watched();
    match at {
        Where::InProcess => println!("\n== {n} instances, the server in this process =="),
        Where::Binary => println!(
            "\n== {n} instances, the server the cluster-discovery binary ({}) ==",
            of.0
        ),
    }
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(CONNECTIONS * 2)
        .build()
        .expect("a client");
    let (rate, mut lat) = measured(of, "registering", register_range(&http, &url, 0..n)).await;
    println!("registrations: {rate:.0}/s ({})", lat.summary());
    println!("rss after registering: {:.0} MiB", memory(of).rss);

    let (rate, mut lat) = measured(of, "heartbeating", heartbeats(&http, &url, n, o.seconds)).await;
    let needed = n as f64 / 30.0;
    println!(
        "heartbeats: {rate:.0}/s = {:.1}x the {needed:.0}/s {n} instances need ({})",
        rate / needed,
        lat.summary()
    );

    // The peak of the read that builds a payload is the server's: the load holds only the
    // body it receives (a few MiB gzipped) meanwhile.
    let (cold, bytes) = measured(of, "building the json payload", read_apps(&http, &url)).await;
    let mut warm = Latencies::default();
    for _ in 0..20 {
        warm.add(read_apps(&http, &url).await.0);
    }
    println!(
        "GET apps (json, gzip asked, {:.1} MiB received): first {:.1} ms (builds the payload), then {}",
        bytes as f64 / 1048576.0,
        cold.as_secs_f64() * 1000.0,
        warm.summary()
    );

    // XML, as the Python client reads it (it sends no Accept).
    let (cold, bytes) = measured(of, "building the xml payload", read_as(&http, &url, "*/*")).await;
    let mut warm = Latencies::default();
    for _ in 0..20 {
        warm.add(read_as(&http, &url, "*/*").await.0);
    }
    println!(
        "GET apps (xml, gzip asked, {:.1} MiB received): first {:.1} ms (builds the payload), then {}",
        bytes as f64 / 1048576.0,
        cold.as_secs_f64() * 1000.0,
        warm.summary()
    );

    // Readers poll the full registry in a loop while heartbeats go on.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let reset = reset_peak(of);
    let before = memory(of);
    let readers: Vec<_> = (0..o.readers)
        .map(|_| {
            let (http, url, stop, reads) = (http.clone(), url.clone(), stop.clone(), reads.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    read_apps(&http, &url).await;
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let (rate, mut lat) = heartbeats(&http, &url, n, o.seconds).await;
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        let _ = r.await;
    }
    println!(
        "heartbeats while {} readers poll GET apps ({} reads): {rate:.0}/s ({})",
        o.readers,
        reads.load(Ordering::Relaxed),
        lat.summary()
    );
    print_memory(of, "while readers poll", &before, reset);

    // A reader that does not accept gzip: the whole text (70 to 100 MiB at 100,000 instances),
    // counted by the load as it comes.
    if o.plain {
        for (format, accept) in [("json", "application/json"), ("xml", "*/*")] {
            let what = format!("reading the {format} payload without gzip");
            let plain = read_encoded(&http, &url, accept, "identity");
            let (cold, bytes) = measured(of, &what, plain).await;
            let mut warm = Latencies::default();
            for _ in 0..5 {
                warm.add(read_encoded(&http, &url, accept, "identity").await.0);
            }
            println!(
                "GET apps ({format}, no gzip asked, {:.1} MiB received): first {:.1} ms, then {}",
                bytes as f64 / 1048576.0,
                cold.as_secs_f64() * 1000.0,
                warm.summary()
            );
        }
    }
    println!("rss at the end: {:.0} MiB", memory(of).rss);
    println!(
        "peak rss of this server, the largest of the phases' peaks: {:.0} MiB",
        f64::from_bits(PEAK.load(Ordering::Relaxed))
    );
    drop(http);
    server.stop(servers).await;
}

/// Three servers naming each other; `n` registrations on the first: how long until both peers
/// hold them all.
async fn peers(servers: &tokio::runtime::Handle, n: usize) {
    println!("\n== replication: {n} registrations on one of three servers ==");
    // Bound first, so that each knows the others' ports; started together, so that none
    // waits out its start-up fetch on a peer not yet serving.
    let listeners: Vec<_> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a port"))
        .collect();
    let urls: Vec<String> = listeners
        .iter()
        .map(|l| format!("http://{}/eureka/", l.local_addr().expect("bound")))
        .collect();
    let starting: Vec<_> = listeners
        .into_iter()
        .zip(&urls)
        .map(|(l, own)| {
            let server = RegistryServer::new()
                .access(Access::open())
                .config(config(n))
                .peers(urls.clone())
                .own_url(own);
            servers.spawn(async move {
                l.set_nonblocking(true).expect("non-blocking");
                let l = tokio::net::TcpListener::from_std(l).expect("a tokio listener");
                server.start_on(l).await.expect("a peer")
            })
        })
        .collect();
    let mut running: Vec<RunningServer> = Vec::new();
    for s in starting {
        running.push(s.await.expect("started"));
    }
    let http = reqwest::Client::new();
    let start = Instant::now();
    let (rate, _) = register_range(&http, &urls[0], 0..n).await;
    let registered = start.elapsed();
    let mut behind = Duration::ZERO;
    while running[1..].iter().any(|s| s.health().instances < n) {
        if start.elapsed() > registered + Duration::from_secs(60) {
            println!("peers still behind after 60 s");
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        behind = start.elapsed() - registered;
    }
    println!(
        "registered in {:.2} s ({rate:.0}/s); both peers complete {:.2} s after the last one",
        registered.as_secs_f64(),
        behind.as_secs_f64()
    );
    for s in running {
        let _ = servers.spawn(s.shutdown()).await;
    }
}

fn main() {
    let o = options();
    let servers = server_runtime();
    let load = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("load")
        .enable_all()
        .build()
        .expect("the load's runtime");
    for &n in &o.sizes {
        for &at in &o.servers {
            load.block_on(size(servers.handle(), n, at, &o));
        }
    }
    if o.peers > 0 {
        load.block_on(peers(servers.handle(), o.peers));
    }
}
