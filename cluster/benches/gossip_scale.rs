//! The gossip registry at hundreds of nodes, all in this process: `GossipRegistry`s without
//! `Node`s (no TLS, no RPC: the registries alone), each on its own UDP port on loopback, sealed
//! with one cluster key, with the default settings (gossip every 200 ms, `dead_after` 2 s,
//! datagrams within 1,232 bytes), on a tokio runtime of 2 workers. Each joins under a pod's name
//! (`orders-7f9c4d-00042`) with 3 random earlier registries as seeds; every tenth registers a
//! service, so that there is state to carry.
//!
//! For each size: a cold start (from the first `join` until every registry lists all N), then
//! R rounds of a join into the converged cluster (until the new node is in every registry's
//! `nodes()`), a clean leave and a crash (`halt`: until it is out of every other registry's),
//! then a quiet window (gossip bytes and datagrams per node, the digest's parts, datagrams past
//! `max_datagram`). `--soak` restarts every node one after the other: a clean leave, then a new
//! generation under the same name on a new port. Throughout, every registry's events are watched
//! for flaps: a generation that was not made to go leaving some registry's `nodes()` or lookups.
//! The 1-minute load is checked before each measured run (above 2.5 it waits, a minute at a
//! time), and `uptime` is printed before and after it. Every 10 s of a long phase a line says
//! what the registries list, the CPU this process and the machine use, the bytes waiting in
//! the registries' receive queues and how late the runtime wakes: a process too small for N
//! falls behind there first, and every registry then reads its gossip late. `RUST_LOG=warn`
//! says why registries refuse datagrams.
//!
//! ```sh
//! cargo bench -p cluster --bench gossip_scale                              # 100 and 300 nodes, 20 rounds
//! cargo bench -p cluster --bench gossip_scale -- --nodes 300 --rounds 10   # one size
//! cargo bench -p cluster --bench gossip_scale -- --soak                    # rolling restart of 300
//! cargo bench -p cluster --bench gossip_scale -- --smoke                   # 12 nodes, 1 round (CI)
//! cargo bench -p cluster --bench gossip_scale -- --nodes 100 --no-wait     # even on a busy machine
//! cargo bench -p cluster --bench gossip_scale -- --nodes 100 --signed      # each signs its state
//! ```

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cluster::registry::{GossipConfig, GossipRegistry, NodeInfo, RegistryEvent, ServiceEntry};
use cluster::service::version;
use cluster::{CallOptions, FunctionDescription, Registry, ServiceDescription};
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

const CLUSTER: &str = "gossip-scale";
/// The service every tenth registry provides.
const SERVICE: &str = "orders";
const PROVIDER_EVERY: usize = 10;
/// Seeds a joining registry is given: any one live member is enough, three as an operator would.
const SEEDS: usize = 3;
/// How long a join, a leave or a crash may take to reach every registry: past it the sample is
/// counted as not reaching them (with how many registries it missed), and the run goes on.
const LIMIT: Duration = Duration::from_secs(30);
/// Above this 1-minute load another build shares the 2 cores: a run waits for it.
const QUIET_LOAD: f64 = 2.5;
/// A run that holds more stops joining: each of 1,000 registries would hold 1,000
/// failure-detector windows of 8 KB, 8 GB in all, on a machine with others' work on it.
const MAX_RSS: u64 = 12 << 30;
/// Every this many restarts of the soak, the digest is read at one registry.
const DIGEST_EVERY: usize = 25;

/// `--signed`: every registry signs its gossip state (`docs/benchmarks.md`, "What signed gossip
/// costs").
static SIGNED: AtomicBool = AtomicBool::new(false);

/// A certificate of the bench's CA for `name`.
fn identity(name: &str) -> cluster::Identity {
    static CA: OnceLock<cluster::Authority> = OnceLock::new();
    CA.get_or_init(|| cluster::Authority::new(CLUSTER).expect("a CA"))
        .issue(name)
        .expect("an identity")
}

fn keyring() -> cluster::Keyring {
    static KEY: OnceLock<cluster::GossipKey> = OnceLock::new();
    cluster::Keyring::new(KEY.get_or_init(cluster::GossipKey::generate).clone())
}

/// A pod's name, 19 characters: the length every digest entry carries.
fn pod(number: usize) -> String {
    format!("orders-7f9c4d-{number:05}")
}

fn description() -> Arc<ServiceDescription> {
    let f = FunctionDescription::new("get", "get(u64) -> Vec<u8>", true, CallOptions::new());
    Arc::new(ServiceDescription::new(
        SERVICE,
        version(1, 0, 0, "", ""),
        None,
        CallOptions::new(),
        vec![f],
    ))
}

fn has(registry: &GossipRegistry, name: &str, generation: u64) -> bool {
    registry
        .nodes()
        .iter()
        .any(|n| n.name == name && n.generation == generation)
}

fn has_name(registry: &GossipRegistry, name: &str) -> bool {
    registry.nodes().iter().any(|n| n.name == name)
}

/// Waits until `seen` holds at every one of `registries`, each watched on its `changes()`: the
/// time since `start` when the last one got there, or how many did not within `limit`.
async fn everywhere<'a>(
    registries: impl IntoIterator<Item = &'a GossipRegistry>,
    start: Instant,
    limit: Duration,
    seen: impl Fn(&GossipRegistry) -> bool,
) -> Result<Duration, usize> {
    let mut missing = 0;
    for registry in registries {
        // Subscribed before the check: a change between the two is not missed.
        let mut changes = registry.changes();
        while !seen(registry) {
            let left = limit.saturating_sub(start.elapsed());
            match tokio::time::timeout(left, changes.changed()).await {
                Ok(Ok(())) => {}
                _ => {
                    missing += usize::from(!seen(registry));
                    break;
                }
            }
        }
    }
    match missing {
        0 => Ok(start.elapsed()),
        n => Err(n),
    }
}

/// What the events of every registry showed of generations that were not made to go.
#[derive(Default)]
struct Flaps {
    /// Generations that were made to go (left or halted): their going is no flap. A registry
    /// of one of them has emptied its own copy, so its events stop counting too.
    retired: Mutex<HashSet<(String, u64)>>,
    /// A live node out of some registry's `nodes()`.
    nodes: AtomicU64,
    /// A live provider out of some registry's lookup.
    providers: AtomicU64,
    /// A live provider marked suspect in some registry's lookup (still called, last): the step
    /// before a flap, which a starved CPU shows first.
    suspected: AtomicU64,
    /// Events a watcher missed (its channel ran over): flaps among them are not counted.
    lagged: AtomicU64,
    /// The first few flaps, to print.
    first: Mutex<Vec<String>>,
}

#[derive(Debug, Clone, Copy, Default)]
struct FlapCount {
    nodes: u64,
    providers: u64,
    suspected: u64,
    lagged: u64,
}

impl std::ops::Sub for FlapCount {
    type Output = Self;
    fn sub(self, earlier: Self) -> Self {
        Self {
            nodes: self.nodes - earlier.nodes,
            providers: self.providers - earlier.providers,
            suspected: self.suspected - earlier.suspected,
            lagged: self.lagged - earlier.lagged,
        }
    }
}

impl std::fmt::Display for FlapCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} node flaps, {} provider flaps, {} suspicions of live providers",
            self.nodes, self.providers, self.suspected
        )?;
        if self.lagged > 0 {
            write!(
                f,
                " ({} events missed: flaps among them not counted)",
                self.lagged
            )?;
        }
        Ok(())
    }
}

impl Flaps {
    fn count(&self) -> FlapCount {
        FlapCount {
            nodes: self.nodes.load(Ordering::Relaxed),
            providers: self.providers.load(Ordering::Relaxed),
            suspected: self.suspected.load(Ordering::Relaxed),
            lagged: self.lagged.load(Ordering::Relaxed),
        }
    }

    fn key(node: &NodeInfo) -> (String, u64) {
        (node.name.clone(), node.generation)
    }

    /// Called before the node is made to go, so that no event of its going is read first.
    fn retire(&self, node: &NodeInfo) {
        self.retired.lock().unwrap().insert(Self::key(node));
    }

    fn is_retired(&self, node: &NodeInfo) -> bool {
        self.retired.lock().unwrap().contains(&Self::key(node))
    }

    fn note(&self, counter: &AtomicU64, what: String) {
        counter.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first.lock().unwrap();
        if first.len() < 10 {
            first.push(what);
        }
    }
}

/// Watches one registry's events and lookups for flaps, until that registry is made to go.
/// Retired generations are keyed by name and generation, so an event read late (after the
/// restart it belongs to is over) is still told apart from a flap.
fn watch_flaps(
    flaps: Arc<Flaps>,
    registry: GossipRegistry,
    me: NodeInfo,
    since: Instant,
) -> JoinHandle<()> {
    let mut events = registry.events();
    let mut changes = registry.changes();
    tokio::spawn(async move {
        let mut suspect: HashSet<(String, u64)> = HashSet::new();
        loop {
            tokio::select! {
                event = events.recv() => {
                    let (node, counter, what) = match event {
                        Ok(RegistryEvent::NodeDown(node)) => (node, &flaps.nodes, "node"),
                        Ok(RegistryEvent::ServiceDown(entry)) => {
                            (entry.node.clone(), &flaps.providers, "provider")
                        }
                        Ok(_) => continue,
                        Err(RecvError::Lagged(n)) => {
                            flaps.lagged.fetch_add(n, Ordering::Relaxed);
                            continue;
                        }
                        Err(RecvError::Closed) => return,
                    };
                    if flaps.is_retired(&me) {
                        return;
                    }
                    if !flaps.is_retired(&node) {
                        let at = since.elapsed().as_secs_f64();
                        let text = format!(
                            "{at:.1} s: {what} {} (generation {}) lost at {}",
                            node.name, node.generation, me.name
                        );
                        flaps.note(counter, text);
                    }
                }
                changed = changes.changed() => {
                    if changed.is_err() || flaps.is_retired(&me) {
                        return;
                    }
                    // Suspicion makes no event but moves `changes()`: each new one counts once.
                    let now: HashSet<(String, u64)> = registry
                        .lookup(SERVICE)
                        .iter()
                        .filter(|e| e.suspect && !flaps.is_retired(&e.node))
                        .map(|e| Flaps::key(&e.node))
                        .collect();
                    let new = now.difference(&suspect).count() as u64;
                    flaps.suspected.fetch_add(new, Ordering::Relaxed);
                    suspect = now;
                }
            }
        }
    })
}

/// How late a task that sleeps 20 ms at a time wakes: the runtime's two workers' backlog,
/// which every registry's gossip rounds and answers wait in too.
struct Lateness {
    samples: Arc<Mutex<Vec<Duration>>>,
    worst: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Lateness {
    const TICK: Duration = Duration::from_millis(20);

    fn start() -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let worst = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (samples, worst, stop) = (samples.clone(), worst.clone(), stop.clone());
            async move {
                while !stop.load(Ordering::Relaxed) {
                    let start = Instant::now();
                    tokio::time::sleep(Self::TICK).await;
                    let late = start.elapsed().saturating_sub(Self::TICK);
                    worst.fetch_max(late.as_micros() as u64, Ordering::Relaxed);
                    samples.lock().unwrap().push(late);
                }
            }
        });
        Self {
            samples,
            worst,
            stop,
            task,
        }
    }

    /// The samples since the last take.
    fn take(&self) -> Vec<Duration> {
        std::mem::take(&mut *self.samples.lock().unwrap())
    }

    /// The latest wake-up since the last call.
    fn worst(&self) -> Duration {
        Duration::from_micros(self.worst.swap(0, Ordering::Relaxed))
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
    }
}

/// CPU time of this process and of the machine, read from `/proc`.
struct Usage {
    at: Instant,
    /// utime + stime, in USER_HZ (100 a second on Linux, whatever the kernel's tick).
    process: u64,
    /// All CPUs' jiffies: busy (not idle, not iowait) and in all.
    busy: u64,
    total: u64,
    /// Microseconds in which some task of the machine waited for a CPU (`/proc/pressure/cpu`):
    /// this process's workers behind others' work, or others behind them.
    waited: u64,
}

impl Usage {
    fn now() -> Self {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        // The fields after the command's name, which may hold spaces, in parentheses.
        let fields: Vec<u64> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest)
            .unwrap_or("")
            .split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        let process = fields.get(11).unwrap_or(&0) + fields.get(12).unwrap_or(&0);
        let machine = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let cpu: Vec<u64> = machine
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        let total: u64 = cpu.iter().take(8).sum();
        let idle = cpu.get(3).unwrap_or(&0) + cpu.get(4).unwrap_or(&0);
        let pressure = std::fs::read_to_string("/proc/pressure/cpu").unwrap_or_default();
        let waited = pressure
            .lines()
            .find(|l| l.starts_with("some"))
            .and_then(|l| l.rsplit_once("total=")?.1.trim().parse().ok())
            .unwrap_or(0);
        Self {
            at: Instant::now(),
            process,
            busy: total - idle,
            total,
            waited,
        }
    }

    /// This process's CPU, in % of one core (200 % is both), how busy the machine was, and
    /// in what % of the time some task waited for a CPU.
    fn since(&self, earlier: &Usage) -> (f64, f64, f64) {
        let secs = self.at.duration_since(earlier.at).as_secs_f64().max(1e-3);
        let process = (self.process - earlier.process) as f64 / 100.0 / secs * 100.0;
        let total = (self.total - earlier.total).max(1) as f64;
        let waited = (self.waited - earlier.waited) as f64 / 1e6 / secs * 100.0;
        (
            process,
            (self.busy - earlier.busy) as f64 / total * 100.0,
            waited,
        )
    }
}

/// This process's resident memory, and its peak, in bytes.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let read = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (read("VmRSS:"), read("VmHWM:"))
}

/// Datagrams the kernel dropped because a UDP socket's receive buffer was full, on the whole
/// machine (`/proc/net/snmp`, `RcvbufErrors`): a registry whose task is scheduled late enough
/// loses gossip before reading it.
fn receive_buffer_drops() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(names), Some(values)) = (udp.next(), udp.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "RcvbufErrors")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0)
}

/// Bytes waiting in the receive queues of the live registries' sockets (`/proc/net/udp`), in
/// all and the most at one: a registry that reads slower than datagrams come queues them (up
/// to its 4 MiB buffer), and reads every one later by as long as the queue takes to drain.
fn receive_queues(cluster: &Cluster) -> (u64, u64) {
    let ports: HashSet<u16> = cluster
        .registries()
        .filter_map(|r| r.gossip_addr())
        .map(|a| a.port())
        .collect();
    let udp = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
    let (mut total, mut most) = (0, 0);
    for line in udp.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let port = fields
            .get(1)
            .and_then(|a| a.split_once(':'))
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
        let queued = fields
            .get(4)
            .and_then(|q| q.split_once(':'))
            .and_then(|(_, rx)| u64::from_str_radix(rx, 16).ok());
        if let (Some(port), Some(queued)) = (port, queued)
            && ports.contains(&port)
        {
            total += queued;
            most = most.max(queued);
        }
    }
    (total, most)
}

fn queues(cluster: &Cluster) -> String {
    let (total, most) = receive_queues(cluster);
    format!(
        "receive queues {:.1} MB in all, {:.2} MB at most at one registry",
        total as f64 / 1e6,
        most as f64 / 1e6
    )
}

fn load() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

fn uptime() -> String {
    std::process::Command::new("uptime")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|e| format!("(uptime: {e})"))
}

/// Waits, a minute at a time (at most 15), while another build keeps the machine's 1-minute
/// load above [`QUIET_LOAD`]; a smoke run does not wait. Prints the load it starts at.
async fn quiet_machine(wait: bool) {
    let mut waited = 0;
    while wait && load() > QUIET_LOAD && waited < 15 {
        println!(
            "load {:.2} is above {QUIET_LOAD}: waiting a minute ({})",
            load(),
            uptime()
        );
        tokio::time::sleep(Duration::from_secs(60)).await;
        waited += 1;
    }
    if load() > QUIET_LOAD {
        println!("running at load {:.2}, above {QUIET_LOAD}", load());
    }
    println!("before: {}", uptime());
}

struct Member {
    number: usize,
    info: NodeInfo,
    registry: GossipRegistry,
    watch: JoinHandle<()>,
}

/// The registries of one run: those live, those made to go (their traffic still counts), and
/// what their events showed.
struct Cluster {
    live: Vec<Member>,
    gone: Vec<Member>,
    flaps: Arc<Flaps>,
    rng: fastrand::Rng,
    /// The next pod number.
    next: usize,
    since: Instant,
}

impl Cluster {
    fn new() -> Self {
        Self {
            live: Vec::new(),
            gone: Vec::new(),
            flaps: Arc::default(),
            rng: fastrand::Rng::with_seed(14),
            next: 0,
            since: Instant::now(),
        }
    }

    fn registries(&self) -> impl Iterator<Item = &GossipRegistry> {
        self.live.iter().map(|m| &m.registry)
    }

    /// The gossip addresses of [`SEEDS`] random live registries, the one at `except` left out.
    fn seeds(&mut self, except: Option<usize>) -> Vec<String> {
        let mut candidates: Vec<usize> = (0..self.live.len())
            .filter(|i| Some(*i) != except)
            .collect();
        self.rng.shuffle(&mut candidates);
        candidates
            .into_iter()
            .take(SEEDS)
            .filter_map(|i| self.live[i].registry.gossip_addr())
            .map(|a| a.to_string())
            .collect()
    }

    /// A new registry for pod `number` of `generation`, joined (its provider's service
    /// registered after): when `join` was called, and the member.
    async fn start(
        &mut self,
        number: usize,
        generation: u64,
        seeds: Vec<String>,
    ) -> (Instant, Member) {
        let registry = GossipRegistry::new(
            GossipConfig::new()
                .keyring(keyring())
                .cluster_id(CLUSTER)
                .seeds(seeds),
        );
        // `--signed`: each registry signs its state with a certificate of the bench's CA, as a
        // node's does, and its generation is its start time, as a node's is (its heartbeats
        // then count milliseconds: `registry/gossip/authorship.rs`).
        let generation = if SIGNED.load(Ordering::Relaxed) {
            registry
                .bind_identity(&identity(&pod(number)))
                .expect("binds");
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            now.max(generation)
        } else {
            generation
        };
        // Nothing listens there: the registry only carries it. One address per pod, kept
        // across its generations, as a pod's name is.
        let rpc = SocketAddr::from(([127, 0, 0, 1], 20_000 + number as u16));
        let info = NodeInfo::new(pod(number), rpc, generation);
        let called = Instant::now();
        registry.join(info.clone()).await.expect("joins");
        let watch = watch_flaps(
            self.flaps.clone(),
            registry.clone(),
            info.clone(),
            self.since,
        );
        if number.is_multiple_of(PROVIDER_EVERY) {
            let entry = ServiceEntry::new(info.clone(), description());
            registry.register(entry).await.expect("registers");
        }
        let member = Member {
            number,
            info,
            registry,
            watch,
        };
        (called, member)
    }

    /// A new pod joins with seeds among the live ones: when `join` was called.
    async fn add(&mut self) -> Instant {
        let number = self.next;
        self.next += 1;
        let seeds = self.seeds(None);
        let (called, member) = self.start(number, 1, seeds).await;
        self.live.push(member);
        called
    }

    /// Every byte and datagram sent by every registry of the run, gone ones included.
    fn sent(&self) -> (u64, u64) {
        self.live
            .iter()
            .chain(&self.gone)
            .fold((0, 0), |(b, d), m| {
                let t = m.registry.traffic();
                (b + t.sent_bytes, d + t.sent_datagrams)
            })
    }

    fn oversized(&self) -> u64 {
        self.live
            .iter()
            .chain(&self.gone)
            .map(|m| m.registry.traffic().oversized_datagrams)
            .sum()
    }

    /// Datagrams dropped: by full receive buffers (the whole machine's), and by the registries
    /// of this run (not sealed with the key, replayed, not gossip).
    fn losses(&self) -> (u64, u64) {
        let refused = self
            .live
            .iter()
            .chain(&self.gone)
            .map(|m| m.registry.dropped_datagrams())
            .sum();
        (receive_buffer_drops(), refused)
    }

    /// How many nodes each registry lists: min, median, max, and how many list `n`.
    fn seen(&self, n: usize) -> String {
        let mut seen: Vec<usize> = self.registries().map(|r| r.nodes().len()).collect();
        seen.sort_unstable();
        if seen.is_empty() {
            return "no registries".to_owned();
        }
        let all = seen.iter().filter(|s| **s == n).count();
        format!(
            "registries list {} / {} / {} nodes (min / median / max); {all} of {} list all {n}",
            seen[0],
            seen[seen.len() / 2],
            seen[seen.len() - 1],
            seen.len()
        )
    }

    async fn stop(self) {
        for m in &self.live {
            m.registry.halt().await;
        }
        for m in self.live.iter().chain(&self.gone) {
            m.watch.abort();
        }
    }
}

/// A sample that reached every registry within [`LIMIT`], or how many it did not reach.
type Sample = Result<Duration, usize>;

/// Nearest-rank percentiles of the samples that got there, and how many did not.
fn spread(samples: &[Sample]) -> String {
    let mut ok: Vec<Duration> = samples.iter().filter_map(|s| s.ok()).collect();
    ok.sort_unstable();
    let failed: Vec<usize> = samples.iter().filter_map(|s| s.err()).collect();
    let pct = |p: f64| {
        let i = ((p * ok.len() as f64).ceil() as usize).clamp(1, ok.len()) - 1;
        ms(ok[i])
    };
    let mut text = if ok.is_empty() {
        "- | - | - | -".to_owned()
    } else {
        format!(
            "{} | {} | {} | {}",
            ms(ok[0]),
            pct(0.5),
            pct(0.99),
            ms(ok[ok.len() - 1])
        )
    };
    text += &format!(" | {}", samples.len());
    if !failed.is_empty() {
        text += &format!(
            " ({} not everywhere within {LIMIT:?}, missing at {failed:?} registries)",
            failed.len()
        );
    }
    text
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn lateness(samples: &[Duration]) -> String {
    let mut s = samples.to_vec();
    s.sort_unstable();
    if s.is_empty() {
        return "no samples".to_owned();
    }
    let pct = |p: f64| s[((p * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
    format!(
        "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        pct(0.5).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        s[s.len() - 1].as_secs_f64() * 1e3
    )
}

fn gb(bytes: u64) -> String {
    format!("{:.2} GB", bytes as f64 / 1e9)
}

/// One line every 10 s while a long phase runs: what the registries see, CPU, memory, and
/// how late the runtime wakes.
struct Progress {
    last: Instant,
    usage: Usage,
}

impl Progress {
    fn new() -> Self {
        Self {
            last: Instant::now(),
            usage: Usage::now(),
        }
    }

    /// Prints if 10 s have passed; whether memory is past [`MAX_RSS`].
    fn tick(&mut self, cluster: &Cluster, n: usize, probe: &Lateness, force: bool) -> bool {
        let (rss, _) = memory();
        if force || self.last.elapsed() >= Duration::from_secs(10) {
            let usage = Usage::now();
            let (process, machine, waited) = usage.since(&self.usage);
            println!(
                "  {:>5.1} s: {} live; {}; CPU {process:.0} % of a core, machine {machine:.0} % busy, a task waiting for a CPU {waited:.0} % of the time; {}; RSS {}; latest wake-up {} late; load {:.2}",
                cluster.since.elapsed().as_secs_f64(),
                cluster.live.len(),
                cluster.seen(n),
                queues(cluster),
                gb(rss),
                ms(probe.worst()),
                load()
            );
            self.last = Instant::now();
            self.usage = usage;
        }
        rss > MAX_RSS
    }
}

/// Starts `n` registries one after the other, each seeded with 3 earlier ones, and waits until
/// every one lists all `n`: the joins' own times, and the time from the first join until then.
async fn cold_start(cluster: &mut Cluster, n: usize, probe: &Lateness) -> (Vec<Duration>, Sample) {
    let mut progress = Progress::new();
    let mut joins = Vec::new();
    let start = Instant::now();
    cluster.since = start;
    // A cluster that cannot keep up joins ever slower: the run ends instead of taking hours.
    let limit = Duration::from_secs(60) + Duration::from_millis(200) * n as u32;
    for _ in 0..n {
        let called = cluster.add().await;
        joins.push(called.elapsed());
        if progress.tick(cluster, n, probe, false) {
            println!("  stopped joining: RSS past {}", gb(MAX_RSS));
            return (joins, Err(n - cluster.live.len()));
        }
        if start.elapsed() > limit {
            let joined = cluster.live.len();
            println!("  stopped joining after {limit:?}: {joined} of {n} joined");
            progress.tick(cluster, n, probe, true);
            return (joins, Err(n - joined));
        }
    }
    let converged = {
        let registries: Vec<GossipRegistry> = cluster.registries().cloned().collect();
        let wait = everywhere(&registries, start, limit, |r| r.nodes().len() == n);
        tokio::pin!(wait);
        let mut ticks = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                done = &mut wait => break done,
                _ = ticks.tick() => {
                    if progress.tick(cluster, n, probe, false) {
                        println!("  stopped waiting: RSS past {}", gb(MAX_RSS));
                        break Err(n);
                    }
                }
            }
        }
    };
    progress.tick(cluster, n, probe, true);
    (joins, converged)
}

#[derive(Default)]
struct Rounds {
    joins: Vec<Sample>,
    leaves: Vec<Sample>,
    crashes: Vec<Sample>,
    /// Replacements after a crash that did not reach every registry.
    replacements_missed: usize,
}

/// Each round: a new node joins (until it is in every registry's `nodes()`); a random other one
/// leaves cleanly, and another crashes (until each is out of every other registry's); a
/// replacement joins, so that the cluster is back to its size for the next round.
async fn rounds(cluster: &mut Cluster, rounds: usize) -> Rounds {
    let mut out = Rounds::default();
    for _ in 0..rounds {
        let called = cluster.add().await;
        let new = cluster.live.last().unwrap().info.clone();
        out.joins.push(
            everywhere(cluster.registries(), called, LIMIT, |r| {
                has(r, &new.name, new.generation)
            })
            .await,
        );

        // Not the one that just joined: its leave would be timed against its own join.
        let victim = cluster.rng.usize(..cluster.live.len() - 1);
        let member = cluster.live.remove(victim);
        cluster.flaps.retire(&member.info);
        let start = Instant::now();
        let leaving = tokio::spawn({
            let (registry, name) = (member.registry.clone(), member.info.name.clone());
            async move { registry.leave(&name).await }
        });
        out.leaves.push(
            everywhere(cluster.registries(), start, LIMIT, |r| {
                !has_name(r, &member.info.name)
            })
            .await,
        );
        leaving.await.unwrap().expect("leaves");
        cluster.gone.push(member);

        let victim = cluster.rng.usize(..cluster.live.len());
        let member = cluster.live.remove(victim);
        cluster.flaps.retire(&member.info);
        let start = Instant::now();
        member.registry.halt().await;
        out.crashes.push(
            everywhere(cluster.registries(), start, LIMIT, |r| {
                !has_name(r, &member.info.name)
            })
            .await,
        );
        cluster.gone.push(member);

        let called = cluster.add().await;
        let new = cluster.live.last().unwrap().info.clone();
        let replaced = everywhere(cluster.registries(), called, LIMIT, |r| {
            has(r, &new.name, new.generation)
        })
        .await;
        out.replacements_missed += usize::from(replaced.is_err());
    }
    out
}

/// A quiet cluster for `window`: what gossip costs.
struct Steady {
    window: Duration,
    nodes: usize,
    sent_bytes: (f64, f64),
    sent_datagrams: (f64, f64),
    received_bytes: (f64, f64),
    parts: usize,
    digest_bytes: usize,
    oversized: u64,
    /// Updates refused as forged, over every registry (`--signed`: 0 unless signing is wrong).
    forged: u64,
    flaps: FlapCount,
    losses: (u64, u64),
    queues: String,
    cpu: (f64, f64, f64),
    lateness: String,
}

async fn steady(cluster: &Cluster, window: Duration, probe: &Lateness) -> Steady {
    let before: Vec<_> = cluster.registries().map(|r| r.traffic()).collect();
    let flaps = cluster.flaps.count();
    let losses = cluster.losses();
    let usage = Usage::now();
    probe.take();
    tokio::time::sleep(window).await;
    let secs = usage.at.elapsed().as_secs_f64();
    let cpu = Usage::now().since(&usage);
    let lateness = lateness(&probe.take());
    let after: Vec<_> = cluster.registries().map(|r| r.traffic()).collect();
    let queues = queues(cluster);
    let rate = |field: fn(&cluster::registry::GossipTraffic) -> u64| {
        let rates: Vec<f64> = before
            .iter()
            .zip(&after)
            .map(|(b, a)| (field(a) - field(b)) as f64 / secs)
            .collect();
        let mean = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
        (mean, rates.iter().copied().fold(0.0, f64::max))
    };
    let (parts, digest_bytes) = cluster.live[0].registry.digest_parts().await;
    Steady {
        window,
        nodes: cluster.live.len(),
        sent_bytes: rate(|t| t.sent_bytes),
        sent_datagrams: rate(|t| t.sent_datagrams),
        received_bytes: rate(|t| t.received_bytes),
        parts,
        digest_bytes,
        oversized: before
            .iter()
            .zip(&after)
            .map(|(b, a)| a.oversized_datagrams - b.oversized_datagrams)
            .sum(),
        forged: after.iter().map(|a| a.forged_updates).sum(),
        flaps: cluster.flaps.count() - flaps,
        losses: difference(cluster.losses(), losses),
        queues,
        cpu,
        lateness,
    }
}

fn print_steady(s: &Steady) {
    println!(
        "\nquiet for {:?} at {} nodes (per node; mean / max over nodes):",
        s.window, s.nodes
    );
    println!(
        "| sent | datagrams sent | received | digest at one registry | datagrams past 1,232 B | flaps |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| {:.1} / {:.1} kB/s | {:.0} / {:.0} /s | {:.1} / {:.1} kB/s | {} B in {} datagrams | {} | {} |",
        s.sent_bytes.0 / 1e3,
        s.sent_bytes.1 / 1e3,
        s.sent_datagrams.0,
        s.sent_datagrams.1,
        s.received_bytes.0 / 1e3,
        s.received_bytes.1 / 1e3,
        s.digest_bytes,
        s.parts,
        s.oversized,
        s.flaps
    );
    println!(
        "signed: {}; updates refused as forged since the start, all registries: {}",
        SIGNED.load(Ordering::Relaxed),
        s.forged
    );
    println!(
        "CPU: this process {:.0} % of a core (2 cores: 200 %), the machine {:.0} % busy, a task waiting for a CPU {:.0} % of the time; a 20 ms sleep woke late by {}",
        s.cpu.0, s.cpu.1, s.cpu.2, s.lateness
    );
    println!("{}; at the end, {}", lost(s.losses), s.queues);
}

fn difference(after: (u64, u64), before: (u64, u64)) -> (u64, u64) {
    (after.0 - before.0, after.1 - before.1)
}

fn lost((buffers, refused): (u64, u64)) -> String {
    format!(
        "datagrams lost: {buffers} to full receive buffers (the machine's UDP RcvbufErrors), {refused} refused by a registry"
    )
}

fn print_first_flaps(cluster: &Cluster) {
    let first = cluster.flaps.first.lock().unwrap();
    if !first.is_empty() {
        println!("first flaps:");
        for f in first.iter() {
            println!("  {f}");
        }
    }
}

/// Phases 1 to 5 at `n` nodes.
async fn measure(n: usize, rounds_count: usize, window: Duration, wait: bool) {
    println!("\n## {n} nodes, {rounds_count} rounds");
    quiet_machine(wait).await;
    let probe = Lateness::start();
    let mut cluster = Cluster::new();
    let losses = cluster.losses();
    let (joins, converged) = cold_start(&mut cluster, n, &probe).await;
    let cold_lateness = lateness(&probe.take());
    let cold_flaps = cluster.flaps.count();
    let cold_losses = difference(cluster.losses(), losses);
    let (rss, _) = memory();
    println!("\n| {n} nodes | min | p50 | p99 | max | samples |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| one `join` call (claim included), cold start | {} |",
        spread(&joins.iter().map(|d| Ok(*d)).collect::<Vec<_>>())
    );
    match converged {
        Ok(d) => println!(
            "| cold start: first join → all {n} in every registry's nodes() | {} | | | | 1 |",
            ms(d)
        ),
        Err(_) => println!(
            "| cold start: first join → all {n} everywhere | NOT CONVERGED: {} joined, {} | | | | 1 |",
            cluster.live.len(),
            cluster.seen(n)
        ),
    }
    let mut flaps_rounds = FlapCount::default();
    let losses = cluster.losses();
    if converged.is_ok() {
        let before = cluster.flaps.count();
        let r = rounds(&mut cluster, rounds_count).await;
        flaps_rounds = cluster.flaps.count() - before;
        println!(
            "| join → in every registry's nodes() | {} |",
            spread(&r.joins)
        );
        println!(
            "| clean leave → out of every other registry's | {} |",
            spread(&r.leaves)
        );
        println!(
            "| crash (halt) → out of every other registry's | {} |",
            spread(&r.crashes)
        );
        if r.replacements_missed > 0 {
            println!(
                "({} replacements after a crash did not reach every registry)",
                r.replacements_missed
            );
        }
    } else {
        println!("(no rounds: the cluster did not converge)");
    }
    let rounds_lateness = lateness(&probe.take());
    let rounds_losses = difference(cluster.losses(), losses);
    println!(
        "\ncold start: {cold_flaps}; a 20 ms sleep woke late by {cold_lateness}; {}; RSS after it {} ({:.1} MB a registry)",
        lost(cold_losses),
        gb(rss),
        rss as f64 / 1e6 / n as f64
    );
    println!(
        "rounds: {flaps_rounds}; a 20 ms sleep woke late by {rounds_lateness}; {}",
        lost(rounds_losses)
    );
    // The last crash's node is still dying in digests: the window starts after its news.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s = steady(&cluster, window, &probe).await;
    print_steady(&s);
    print_first_flaps(&cluster);
    let (_, peak) = memory();
    println!("peak RSS so far {}", gb(peak));
    println!("after: {}", uptime());
    probe.stop().await;
    cluster.stop().await;
}

/// Phase 6: a rolling restart of every node of a cluster of `n`.
async fn soak(n: usize, wait: bool) {
    println!("\n## soak: a rolling restart of all {n} nodes");
    quiet_machine(wait).await;
    let probe = Lateness::start();
    let mut cluster = Cluster::new();
    let (_, converged) = cold_start(&mut cluster, n, &probe).await;
    let Ok(cold) = converged else {
        println!("the cluster did not converge: {}", cluster.seen(n));
        println!("{}; {}", cluster.flaps.count(), queues(&cluster));
        print_first_flaps(&cluster);
        println!("after: {}", uptime());
        probe.stop().await;
        cluster.stop().await;
        return;
    };
    println!(
        "cold start: all {n} in every registry's nodes() {} after the first join",
        ms(cold)
    );
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The digest is read at the node restarted last, so it is the same one until the end.
    let watcher = n - 1;
    let (sent_bytes, sent_datagrams) = cluster.sent();
    let oversized = cluster.oversized();
    let flaps = cluster.flaps.count();
    let losses = cluster.losses();
    let usage = Usage::now();
    probe.take();
    let start = Instant::now();
    let mut progress = Progress::new();
    let (mut gone, mut joined, mut restarted) = (Vec::new(), Vec::new(), Vec::new());
    let mut digests = Vec::new();
    for k in 0..n {
        if k.is_multiple_of(DIGEST_EVERY) {
            digests.push((k, cluster.live[watcher].registry.digest_parts().await));
        }
        let old = cluster.live[k].info.clone();
        cluster.flaps.retire(&old);
        let t0 = Instant::now();
        let leaving = tokio::spawn({
            let (registry, name) = (cluster.live[k].registry.clone(), old.name.clone());
            async move { registry.leave(&name).await }
        });
        let others = cluster
            .live
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != k)
            .map(|(_, m)| &m.registry);
        gone.push(everywhere(others, t0, LIMIT, |r| !has(r, &old.name, old.generation)).await);
        leaving.await.unwrap().expect("leaves");

        let seeds = cluster.seeds(Some(k));
        let number = cluster.live[k].number;
        let (called, member) = cluster.start(number, old.generation + 1, seeds).await;
        let new = member.info.clone();
        let previous = std::mem::replace(&mut cluster.live[k], member);
        cluster.gone.push(previous);
        let reached = everywhere(cluster.registries(), called, LIMIT, |r| {
            has(r, &new.name, new.generation) && !has(r, &old.name, old.generation)
        })
        .await;
        joined.push(reached);
        restarted.push(reached.map(|d| d + called.duration_since(t0)));
        progress.tick(&cluster, n, &probe, false);
        // A cluster that no longer converges does not come back by itself (every restart
        // then waits out the limit): what it took to get there is the result.
        let misses = joined.iter().rev().take_while(|r| r.is_err()).count();
        if misses == 3 {
            println!(
                "  stopped after {} restarts: 3 in a row not everywhere within {LIMIT:?}",
                k + 1
            );
            progress.tick(&cluster, n, &probe, true);
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    digests.push((
        joined.len(),
        cluster.live[watcher].registry.digest_parts().await,
    ));
    let cpu = Usage::now().since(&usage);
    let soak_lateness = lateness(&probe.take());
    let (sent_bytes_after, sent_datagrams_after) = cluster.sent();
    let flaps = cluster.flaps.count() - flaps;

    println!(
        "\n| {} restarts of {n}, one after the other | min | p50 | p99 | max | samples |",
        joined.len()
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| leave → old generation out of every other registry's nodes() | {} |",
        spread(&gone)
    );
    println!(
        "| new generation's join → in every registry's nodes(), the old one out | {} |",
        spread(&joined)
    );
    println!(
        "| restart (leave called → new generation everywhere) | {} |",
        spread(&restarted)
    );
    println!(
        "\nthe digest at one registry ({}), every {DIGEST_EVERY} restarts:",
        pod(cluster.live[watcher].number)
    );
    println!("| restarts done | digest bytes | datagrams per SYN |");
    println!("|---|---|---|");
    for (k, (parts, bytes)) in &digests {
        println!("| {k} | {bytes} | {parts} |");
    }
    println!(
        "\nover the soak ({secs:.0} s): gossip sent {:.1} kB/s and {:.0} datagrams/s per node ({n} nodes); {} datagrams past 1,232 B (registrations carry an entry); {flaps}",
        (sent_bytes_after - sent_bytes) as f64 / n as f64 / secs / 1e3,
        (sent_datagrams_after - sent_datagrams) as f64 / n as f64 / secs,
        cluster.oversized() - oversized,
    );
    println!(
        "CPU: this process {:.0} % of a core (2 cores: 200 %), the machine {:.0} % busy, a task waiting for a CPU {:.0} % of the time; a 20 ms sleep woke late by {soak_lateness}",
        cpu.0, cpu.1, cpu.2
    );
    println!("{}", lost(difference(cluster.losses(), losses)));
    print_first_flaps(&cluster);
    let (_, peak) = memory();
    println!("peak RSS {}", gb(peak));
    println!("after: {}", uptime());
    probe.stop().await;
    cluster.stop().await;
}

fn flag(args: &[String], name: &str) -> Option<usize> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1)?.parse().ok())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let soak_only = args.iter().any(|a| a == "--soak");
    SIGNED.store(args.iter().any(|a| a == "--signed"), Ordering::Relaxed);
    // For profiling and trials: the runs do not wait for a quiet machine.
    let wait = !smoke && !args.iter().any(|a| a == "--no-wait");
    let nodes = flag(&args, "--nodes");
    let rounds_count = flag(&args, "--rounds").unwrap_or(if smoke { 1 } else { 20 });
    let window = Duration::from_secs(if smoke { 3 } else { 10 });
    // Quiet unless asked: `RUST_LOG=cluster=warn` says why registries refuse datagrams.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    // Two workers, as the brief's 2-core machine shares them with everything else.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        if smoke {
            let n = nodes.unwrap_or(12);
            measure(n, rounds_count, window, false).await;
            soak(n, false).await;
        } else if soak_only {
            soak(nodes.unwrap_or(300), wait).await;
        } else {
            let sizes = nodes.map_or(vec![100, 300], |n| vec![n]);
            for n in sizes {
                measure(n, rounds_count, window, wait).await;
            }
        }
    });
}
