//! Not upstream's: a deterministic, protocol-level scale simulation of gossip in protocol V2, at
//! hundreds to a thousand nodes, in one process and in virtual time. Ignored by default:
//!
//! ```sh
//! CARGO_TARGET_DIR=/work/target-sim SIM_NODES=300 SIM_LOSS=0.01 \
//!   cargo test --release -p cluster-chitchat --lib --features testsuite \
//!   sim -- --ignored --nocapture
//! ```
//!
//! | variable | default | |
//! |---|---|---|
//! | `SIM_NODES` | 100 | nodes in the cluster once the joins are in (it starts with `SIM_NODES - SIM_JOINS`) |
//! | `SIM_SECONDS` | 30 | the steady window, in which nothing changes |
//! | `SIM_LOSS` | 0 | the fraction of IP packets dropped (see "loss" below) |
//! | `SIM_SEED` | 1 | every random choice of the run (phases, peers, latencies, losses, who crashes) |
//! | `SIM_JOINS`, `SIM_CRASHES`, `SIM_LEAVES` | 8, 8, 4 | joins, crashes and clean leaves measured, one at a time |
//! | `SIM_MTU` | 1500 | the path's MTU; a datagram larger than one packet is IP-fragmented |
//! | `SIM_BUDGETS` | `1188,65507` | the `datagram_budget`s to run, one run each |
//! | `SIM_SOAK` | 0 | 1: end with a rolling restart of every node (6. below) |
//! | `SIM_SOAK_EVERY` | 1 | seconds between two restarts of the rolling restart |
//!
//! # What runs
//!
//! Every node is a [`Chitchat`], the state machine the server drives, built with the settings
//! `cluster` gives it (`cluster/src/registry/gossip/mod.rs`, `spawn`, and `config.rs`'s
//! defaults): protocol V2, a gossip round every 200 ms, phi threshold 6, `initial_interval` of
//! one round, `min_dead_after` 2 s, `max_dead_in_digest` 128, a purge after 1 h, the limits of
//! 2,048 nodes, 256 keys and 256 KiB a node, and `datagram_budget` 1,232 − 44 (the seal's
//! overhead) = 1,188. The huge budget, 65,507, puts every digest in one datagram, as before V2.
//! Node ids are like `("orders-7f9c4d-00042", generation, 10.0.0.43:7280)` (19-byte names, 20
//! services); a node holds `rpc`, `status`, `rev`, its service's description (about 1 KB of
//! JSON, the same for every replica of a service), and chitchat's protocol key.
//!
//! What the simulation adds is the network and the two tasks around the state machine:
//!
//! * **The server's loop** (`server.rs`): a round per node every 200 ms, at a phase drawn at
//!   random, picks peers with the server's own `select_nodes_for_gossip` (three live peers,
//!   now and then a dead one, a seed while few are live), sends each every SYN of
//!   `create_syn_messages` in the versions `versions_for` gives (V2 to a node whose state says
//!   it speaks V2, V0 to one not known yet), then runs `update_nodes_liveness`. A datagram
//!   received goes through `process_message_from` and its reply, if any, goes back in the
//!   same version. The liveness pass `process_message_from` puts off is run when
//!   `liveness_pass_due` says, as the server's `select!` does.
//! * **`cluster`'s claim and pusher** (`claim.rs`, `push.rs`), for a node that joins: its
//!   status is `claiming` until it holds a second node state (polled every 20 ms), then `up`
//!   (and `rev` bumped), at once unless another generation of its name at another address
//!   says it is up (then five rounds later); that change is pushed as one SYN part each
//!   (`ChitchatHandle::gossip`, the server's `gossip_part`) to up to 128 peers, live ones
//!   first, then the others it knows, then the seeds while none is live, 16 a millisecond;
//!   again 50 and 150 ms later to the targets it knows by then, and 650 ms after the first to
//!   those not pushed to yet.
//! * **The network**: every datagram is encoded (`ChitchatEnvelope::serialize_to_vec`) and
//!   decoded as `cluster`'s transport does (`deserialize_up_to(.., V2)`), takes 1 to 5 ms
//!   (uniform, per datagram: datagrams overtake each other), and is lost as below. Sizes are
//!   counted sealed (+44 bytes), as `GossipRegistry::traffic` counts them.
//! * **Loss** is per IP packet: a datagram of more than `SIM_MTU − 28` bytes travels as
//!   ⌈(bytes + 8) / 1,480⌉ fragments (at MTU 1,500) and is lost if any is, with probability
//!   1 − (1 − `SIM_LOSS`)^fragments. A datagram within one packet, which every quiet V2
//!   datagram is, is lost with probability `SIM_LOSS`. `SIM_MTU=65535` makes every datagram
//!   one packet (loss per datagram).
//!
//! Time is tokio's paused clock, which chitchat's failure detector reads: the simulation moves
//! it to each event in turn (`tokio::time::advance`), so a run is the same for the same seed
//! and settings, however long it takes on the machine. (For that, `select_nodes_for_gossip` is
//! given sets of a fixed hasher: it samples in a set's order, which std's `RandomState` makes
//! different in every process.)
//!
//! A run takes one core: about 20 s at 100 nodes, 5 min at 300 and over an hour at 1,000 (per
//! budget; the cost of a simulated second grows as the square of the nodes), and memory as the
//! square too: every node keeps a failure-detector window of 8 KB for every other, 8 GB of the
//! 13 GB or more that 1,000 nodes take.
//!
//! # What it does not model
//!
//! No CPU: a node handles a datagram, and runs a round, in no time, however large the
//! cluster, so nothing queues behind a slow node and no round is late (the real cost per
//! datagram grows with the digest's size, and a 1,000-node cluster's live-nodes watcher clones
//! every node's state on each change). No sealing (only its 44 bytes), no OS socket buffers
//! (nothing is dropped for a full buffer, which a burst of answers to a push could cause), no
//! bandwidth limit or queueing in the network, no partitions, no clock skew. The cluster
//! starts formed: at time 0 every node hears one SYN-ACK from every other (its entry and its
//! state, through `process_message_from`), so that a thousand simultaneous joins need not be
//! simulated; the failure detectors then learn the real intervals during a 10 s settling
//! period before anything is measured. A node's services are in its state from its start
//! (`cluster` registers them after the node is up: one more change, pushed the same way).
//!
//! # What it measures
//!
//! 1. Joins, one at a time: the time from the new node's start until it is live (and live
//!    with `status=up`, what lookups need) at every other node.
//! 2. Crashes of random non-seed nodes, one at a time (the node stops sending and answering):
//!    the time until every other node suspects it or holds it dead, and until every other
//!    node holds it dead.
//! 3. A steady window with no change: suspicions and deaths of nodes that are running (all
//!    false), the interval between new heartbeats of one node as seen at another (sampled
//!    pairs), and the failure detector's mean interval.
//! 4. Traffic in the steady window: bytes and datagrams a node sends per second, the parts of
//!    a SYN, the largest datagram.
//! 5. Clean leaves of random non-seed nodes, one at a time, as `GossipRegistry::leave` does
//!    one: `status=leaving` and the node's `svc:` key deleted, pushed as any change, and the
//!    node stopped two rounds later; the time until every other node holds it leaving (out of
//!    its lookups) or dead.
//! 6. A restart of the first crashed node under its name, address and a new generation.
//! 7. With `SIM_SOAK=1`, a rolling restart of every node, one every `SIM_SOAK_EVERY`: a seed
//!    restarts in place (crashes, and a new generation starts at its address: a stateful pod);
//!    any other node is replaced as a rollout does, by a node under a new name and address that
//!    starts first, the old one crashing (killed, not drained) once the new one is in or the
//!    interval is over. Measured over the whole soak: each replacement's time until it is live
//!    and up at every node, how many observers still hold a crashed node live 3 s after its
//!    crash, false suspicions and deaths of running nodes, the digest's size and parts (the
//!    dead nodes in it grow up to `max_dead_in_digest`), traffic and loss.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::hash::{BuildHasherDefault, DefaultHasher};
use std::net::{Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::digest::Digest;
use crate::message::{ChitchatEnvelope, ChitchatMessage, ProtocolVersion};
use crate::parts::Covers;
use crate::server::{first_seeds, select_nodes_for_gossip};
use crate::{
    Chitchat, ChitchatConfig, ChitchatId, ChitchatLimits, FailureDetectorConfig, NodeState,
    delta_mtu,
};

// What `cluster` gives chitchat (`cluster/src/registry/gossip/config.rs` defaults, `spawn`).
const GOSSIP_INTERVAL: Duration = Duration::from_millis(200);
const PHI_THRESHOLD: f64 = 6.0;
const DEAD_AFTER: Duration = Duration::from_secs(2);
const DEAD_IN_DIGEST: usize = 128;
const PURGE_AFTER: Duration = Duration::from_secs(3_600);
const LIMITS: ChitchatLimits = ChitchatLimits {
    max_nodes: 2_048,
    max_keys_per_node: 256,
    max_bytes_per_node: 256 * 1_024,
};
const PROTOCOL: ProtocolVersion = ProtocolVersion::V2;
/// `GossipConfig::max_datagram`'s default, and what the seal adds (`security/seal.rs`).
const MAX_DATAGRAM: usize = 1_232;
const SEAL_OVERHEAD: usize = 44;
/// A budget that holds any digest: every SYN in one datagram, as before V2.
const HUGE_BUDGET: usize = 65_507;
// The pusher (`push.rs`) and the claim (`claim.rs`).
const PUSH_FANOUT: usize = 128;
const PUSH_BURST: usize = 16;
const PUSH_FOLLOW_UPS: [Duration; 4] = [
    Duration::ZERO,
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(500),
];
const PUSH_AGAIN: usize = 3;
const CLAIM_POLL: Duration = Duration::from_millis(20);
const CLAIM_ROUNDS: u32 = 5;

/// The first nodes are every node's seeds.
const SEEDS: usize = 3;
const CLUSTER_ID: &str = "prod-eu1";
const GOSSIP_PORT: u16 = 7_280;
const RPC_PORT: u16 = 7_281;
/// Twenty services of six letters each, and a deployment hash each, so that every name takes
/// 19 bytes, as `orders-7f9c4d-00042`. Node `k` runs service `k % 20`.
const SERVICES: [(&str, &str); 20] = [
    ("orders", "7f9c4d"),
    ("search", "a1b2c3"),
    ("basket", "5e6f70"),
    ("payout", "c0ffee"),
    ("stocks", "0badf0"),
    ("alerts", "d15ea5"),
    ("ledger", "3c4d5e"),
    ("emails", "9a8b7c"),
    ("quotes", "12ab34"),
    ("events", "fe01dc"),
    ("report", "77aa11"),
    ("authns", "b00b1e"),
    ("images", "4f4f4f"),
    ("crawls", "e1e2e3"),
    ("notify", "0c0c0c"),
    ("pricer", "a5a5a5"),
    ("ranker", "1d2e3f"),
    ("promos", "6b6b6b"),
    ("wallet", "c1c2c3"),
    ("vendor", "8d9eaf"),
];

const SETTLE: Duration = Duration::from_secs(10);
const JOIN_TIMEOUT: Duration = Duration::from_secs(30);
const CRASH_TIMEOUT: Duration = Duration::from_secs(30);
const RESTART_TIMEOUT: Duration = Duration::from_secs(10);
/// Between two measured events, so that each starts from a quiet cluster.
const GAP: Duration = Duration::from_secs(1);
/// Heartbeat intervals are sampled between this many observers and as many subjects.
const SAMPLED: usize = 12;

// ---------------------------------------------------------------------------------------------
// Settings

#[derive(Debug, Clone)]
struct Params {
    nodes: usize,
    steady: Duration,
    loss: f64,
    seed: u64,
    joins: usize,
    crashes: usize,
    leaves: usize,
    mtu: usize,
    budget: usize,
    soak: bool,
    soak_every: Duration,
}

fn env<T: FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(value) => value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} does not parse")),
        Err(_) => default,
    }
}

impl Params {
    fn from_env() -> (Self, Vec<usize>) {
        let budgets: Vec<usize> = std::env::var("SIM_BUDGETS")
            .unwrap_or_else(|_| format!("{},{HUGE_BUDGET}", MAX_DATAGRAM - SEAL_OVERHEAD))
            .split(',')
            .map(|b| b.trim().parse().expect("SIM_BUDGETS: comma-separated numbers"))
            .collect();
        let params = Params {
            nodes: env("SIM_NODES", 100),
            steady: Duration::from_secs_f64(env("SIM_SECONDS", 30.0)),
            loss: env("SIM_LOSS", 0.0),
            seed: env("SIM_SEED", 1),
            joins: env("SIM_JOINS", 8),
            crashes: env("SIM_CRASHES", 8),
            leaves: env("SIM_LEAVES", 4),
            mtu: env("SIM_MTU", 1_500),
            budget: budgets[0],
            soak: env("SIM_SOAK", 0) != 0,
            soak_every: Duration::from_secs_f64(env("SIM_SOAK_EVERY", 1.0)),
        };
        assert!(
            params.nodes >= params.joins + params.crashes + params.leaves + SEEDS + 2,
            "SIM_NODES too small for the joins, crashes and leaves"
        );
        assert!((0.0..1.0).contains(&params.loss), "SIM_LOSS is a fraction");
        (params, budgets)
    }
}

// ---------------------------------------------------------------------------------------------
// Nodes

/// The id of the `k`-th node: a 19-byte name, a generation (nanoseconds, as `cluster`'s), and
/// an address of its own on port 7280.
fn identity(k: usize, generation: u64) -> ChitchatId {
    let (service, hash) = SERVICES[k % SERVICES.len()];
    let n = k + 1;
    let ip = Ipv4Addr::new(10, (n >> 16) as u8, (n >> 8) as u8, n as u8);
    ChitchatId::new(
        format!("{service}-{hash}-{k:05}"),
        generation,
        SocketAddr::new(ip.into(), GOSSIP_PORT),
    )
}

fn service_of(id: &ChitchatId) -> &str {
    id.node_id.split('-').next().unwrap_or("svc")
}

/// A service description of about 1 KB, as `cluster` writes it (JSON: functions, their
/// signatures and wire shapes). The same for every replica of a service, as a build's is; its
/// shapes are pseudo-random hex, so that it compresses in a delta about as JSON does, not as a
/// repeated pattern would.
fn description(service: &str) -> String {
    let mut rng = SmallRng::seed_from_u64(service.bytes().fold(7, |h, b| h * 31 + u64::from(b)));
    let mut json = format!(
        r#"{{"name":"{service}","version":"1.4.2","options":{{"timeout_ms":5000,"retries":2}},"functions":["#
    );
    let mut i = 0;
    while json.len() < 960 {
        if i > 0 {
            json.push(',');
        }
        let shape: u128 = rng.random();
        json.push_str(&format!(
            r#"{{"name":"{service}_{i}","signature":"{service}_{i}(Req{i}) -> Resp{i}","shape":"{shape:032x}","idempotent":{}}}"#,
            i % 2 == 0
        ));
        i += 1;
    }
    json.push_str(r#"],"wire":3}"#);
    json
}

fn initial_keys(id: &ChitchatId, status: &str) -> Vec<(String, String)> {
    let service = service_of(id);
    vec![
        (
            "rpc".to_owned(),
            SocketAddr::new(id.gossip_advertise_addr.ip(), RPC_PORT).to_string(),
        ),
        ("status".to_owned(), status.to_owned()),
        ("rev".to_owned(), "0".to_owned()),
        (format!("svc:{service}"), description(service)),
    ]
}

fn config(id: &ChitchatId, budget: usize, seeds: &[SocketAddr]) -> ChitchatConfig {
    ChitchatConfig {
        chitchat_id: id.clone(),
        cluster_id: CLUSTER_ID.to_owned(),
        gossip_interval: GOSSIP_INTERVAL,
        listen_addr: id.gossip_advertise_addr,
        seed_nodes: seeds.iter().map(ToString::to_string).collect(),
        failure_detector_config: FailureDetectorConfig {
            phi_threshold: PHI_THRESHOLD,
            initial_interval: GOSSIP_INTERVAL,
            dead_node_grace_period: PURGE_AFTER,
            min_dead_after: DEAD_AFTER,
            max_dead_in_digest: DEAD_IN_DIGEST,
            ..FailureDetectorConfig::default()
        },
        marked_for_deletion_grace_period: PURGE_AFTER,
        catchup_callback: None,
        extra_liveness_predicate: None,
        protocol_version: PROTOCOL,
        datagram_budget: budget,
    }
}

/// A node: the state machine, and what its server and `cluster`'s tasks keep beside it.
struct SimNode {
    cc: Chitchat,
    /// Running: it has started and has not crashed.
    up: bool,
    /// Its server's random choices (peers), and its pusher's.
    rng: fastrand::Rng,
    /// Which digest part the next pushed exchange carries (`Server::next_part`).
    next_part: usize,
    /// The targets its pusher has pushed its last change to.
    pushed: HashSet<SocketAddr>,
    /// When the liveness pass put off by `process_message_from` is due, as the server keeps it.
    liveness_at: Option<Instant>,
    /// What `cluster` watches: a change marks a liveness or suspicion change to scan.
    watcher: watch::Receiver<BTreeMap<ChitchatId, NodeState>>,
    _seeds: watch::Sender<HashSet<SocketAddr>>,
}

/// A set of addresses whose order is the same in every process, unlike std's `RandomState`:
/// `select_nodes_for_gossip` samples in the set's order.
type DetSet = HashSet<SocketAddr, BuildHasherDefault<DefaultHasher>>;

fn det_set(addrs: impl Iterator<Item = SocketAddr>) -> DetSet {
    let mut addrs: Vec<SocketAddr> = addrs.collect();
    addrs.sort_unstable();
    addrs.dedup();
    addrs.into_iter().collect()
}

/// The pusher's targets (`push.rs`, `targets`), each group in a random order of the node's rng
/// (sorted first, so that it does not depend on a hash set's order).
fn push_targets(cc: &Chitchat, fanout: usize, rng: &mut fastrand::Rng) -> Vec<SocketAddr> {
    let own = cc.self_chitchat_id();
    let mut live: Vec<SocketAddr> = cc
        .live_nodes()
        .filter(|id| *id != own)
        .map(|id| id.gossip_advertise_addr)
        .collect();
    let mut others: Vec<SocketAddr> = cc
        .node_states()
        .keys()
        .filter(|id| *id != own)
        .map(|id| id.gossip_advertise_addr)
        .collect();
    let mut seeds: Vec<SocketAddr> = if live.is_empty() {
        cc.seed_nodes().into_iter().collect()
    } else {
        Vec::new()
    };
    for group in [&mut live, &mut others, &mut seeds] {
        group.sort_unstable();
        rng.shuffle(group);
    }
    let mut seen = HashSet::from([own.gossip_advertise_addr]);
    live.into_iter()
        .chain(others)
        .chain(seeds)
        .filter(|addr| seen.insert(*addr))
        .take(fanout)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Events

enum Event {
    /// A gossip round of the node (`Server::gossip_multiple`).
    Round(usize),
    /// A datagram arrives at `to`.
    Deliver {
        from: SocketAddr,
        to: SocketAddr,
        bytes: Vec<u8>,
    },
    /// The server's deferred liveness pass, if still due at `at`.
    LivenessDue { node: usize, at: Instant },
    /// The claim's poll for a second node state (`claim.rs`).
    ClaimPoll { node: usize, give_up: Duration },
    /// The claim done: `status=up`, and the pusher wakes.
    MarkUp(usize),
    /// A leaving node stops, two rounds after it said so (`GossipRegistry::leave`).
    Stop(usize),
    /// A push: to every target the node knows of now, or to those not pushed to yet, paced
    /// (`push.rs`).
    Push { node: usize, all: bool },
    /// One pushed exchange (`Server::gossip_part`).
    PushPart { node: usize, to: SocketAddr },
}

struct Scheduled {
    at: Duration,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    /// Reversed: the heap pops the earliest, and of two at the same time the first scheduled.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

// ---------------------------------------------------------------------------------------------
// Measurements

/// What was sent, from a point on.
#[derive(Debug, Default, Clone)]
struct Traffic {
    since: Duration,
    datagrams: u64,
    /// Sealed bytes.
    bytes: u64,
    /// SYN, SYN-ACK, ACK, other.
    by_kind: [u64; 4],
    /// Sent in V0 (to a node whose version is not known yet): the whole digest in one.
    v0: u64,
    v0_bytes: u64,
    /// Larger than `max_datagram` (1,232 sealed), and IP-fragmented.
    oversized: u64,
    fragmented: u64,
    biggest: usize,
    lost: u64,
    /// Arrived at a node that had crashed.
    to_down: u64,
    sent_by: Vec<(u64, u64)>,
}

impl Traffic {
    fn new(since: Duration, nodes: usize) -> Self {
        Traffic {
            since,
            sent_by: vec![(0, 0); nodes],
            ..Traffic::default()
        }
    }
}

/// A new node's way into every other node's live set.
struct JoinProbe {
    node: usize,
    started: Duration,
    /// Per node: whether it is an observer (running, not the joiner) and when it saw the node
    /// live, and live with `status=up`.
    observer: Vec<bool>,
    live_at: Vec<Option<Duration>>,
    up_at: Vec<Option<Duration>>,
    pending_live: usize,
    pending_up: usize,
}

/// A node that leaves cleanly: its way out of every other node's lookups.
struct LeaveProbe {
    node: usize,
    left: Duration,
    observer: Vec<bool>,
    /// When each observer held it leaving or dead.
    out_at: Vec<Option<Duration>>,
    pending: usize,
}

/// A crashed node's way out of every other node's live set.
struct CrashProbe {
    node: usize,
    crashed: Duration,
    observer: Vec<bool>,
    suspect_at: Vec<Option<Duration>>,
    dead_at: Vec<Option<Duration>>,
    pending_suspect: usize,
    pending_dead: usize,
}

/// Suspicions and deaths of running nodes, as each node sees each other (false, all of them).
#[derive(Debug, Default, Clone, Copy)]
struct FlapCounts {
    suspicions: u64,
    deaths: u64,
    longest_suspicion: Duration,
}

const LIVE: u8 = 1;
const SUSPECT: u8 = 2;

#[derive(Default)]
struct Flaps {
    /// `state[i][j]`: how `i` saw `j` at its last change (`LIVE`, `SUSPECT`).
    state: Vec<Vec<u8>>,
    suspect_since: HashMap<(usize, usize), Duration>,
    counts: FlapCounts,
}

impl Flaps {
    fn grow(&mut self, nodes: usize) {
        for row in &mut self.state {
            row.resize(nodes, 0);
        }
        while self.state.len() < nodes {
            self.state.push(vec![0; nodes]);
        }
    }

    fn take(&mut self) -> FlapCounts {
        std::mem::take(&mut self.counts)
    }
}

/// New heartbeats of sampled subjects as sampled observers see them.
struct HeartbeatSampler {
    /// Per node: its row if it is an observer.
    row: Vec<Option<usize>>,
    subjects: Vec<usize>,
    /// `last[row][k]`: the subject's last heartbeat seen, and when.
    last: Vec<Vec<(u64, Option<Duration>)>>,
    gaps: Vec<Duration>,
}

// ---------------------------------------------------------------------------------------------
// The simulation

struct Sim {
    p: Params,
    t0: Instant,
    now: Duration,
    queue: BinaryHeap<Scheduled>,
    seq: u64,
    nodes: Vec<SimNode>,
    ids: Vec<ChitchatId>,
    by_addr: HashMap<SocketAddr, usize>,
    seeds: Vec<SocketAddr>,
    /// Latencies and losses.
    net: SmallRng,
    /// Phases, and who crashes.
    pick: SmallRng,
    traffic: Traffic,
    join: Option<JoinProbe>,
    crash: Option<CrashProbe>,
    leave: Option<LeaveProbe>,
    flaps: Flaps,
    heartbeats: Option<HeartbeatSampler>,
    decode_errors: u64,
}

impl Sim {
    fn new(p: Params) -> Self {
        let seed = p.seed;
        Sim {
            p,
            t0: Instant::now(),
            now: Duration::ZERO,
            queue: BinaryHeap::new(),
            seq: 0,
            nodes: Vec::new(),
            ids: Vec::new(),
            by_addr: HashMap::new(),
            seeds: (0..SEEDS).map(|k| identity(k, 0).gossip_advertise_addr).collect(),
            net: SmallRng::seed_from_u64(seed ^ 0x6e65_7477_6f72_6b00),
            pick: SmallRng::seed_from_u64(seed ^ 0x7069_636b_0000_0000),
            traffic: Traffic::default(),
            join: None,
            crash: None,
            leave: None,
            flaps: Flaps::default(),
            heartbeats: None,
            decode_errors: 0,
        }
    }

    fn schedule(&mut self, at: Duration, event: Event) {
        self.seq += 1;
        self.queue.push(Scheduled {
            at,
            seq: self.seq,
            event,
        });
    }

    /// Starts a node (a new slot; a restart takes over its address).
    fn add_node(&mut self, id: ChitchatId, status: &str) -> usize {
        let (seeds_tx, seeds_rx) = watch::channel(self.seeds.iter().copied().collect());
        let cc = Chitchat::with_chitchat_id_and_seeds(
            config(&id, self.p.budget, &self.seeds),
            seeds_rx,
            initial_keys(&id, status),
        )
        .with_limits(LIMITS);
        let slot = self.nodes.len();
        let rng = fastrand::Rng::with_seed(
            self.p.seed ^ (slot as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        );
        let watcher = cc.live_nodes_watcher();
        self.nodes.push(SimNode {
            cc,
            up: true,
            rng,
            next_part: 0,
            pushed: HashSet::new(),
            liveness_at: None,
            watcher,
            _seeds: seeds_tx,
        });
        self.by_addr.insert(id.gossip_advertise_addr, slot);
        self.ids.push(id);
        self.flaps.grow(self.nodes.len());
        self.traffic.sent_by.resize(self.nodes.len(), (0, 0));
        slot
    }

    /// The cluster at time 0: every node has heard one SYN-ACK from every other, carrying that
    /// node's own entry (first-hand: live at once) and its whole state.
    fn form(&mut self, count: usize) {
        for k in 0..count {
            self.add_node(identity(k, 1_750_000_000_000_000_000 + k as u64 * 1_000_003), "up");
        }
        let hellos: Vec<Vec<u8>> = self
            .nodes
            .iter()
            .map(|node| {
                let own = node.cc.self_chitchat_id().clone();
                let state = node.cc.node_state(&own).expect("its own state");
                let mut digest = Digest::default();
                digest.node_digests.insert(own.clone(), state.digest());
                // A range of no id: the digest speaks for the sender only.
                digest.covers = Covers {
                    from: Some(own.clone()),
                    to: Some(own),
                };
                let delta = node.cc.cluster_state().compute_partial_delta_respecting_mtu(
                    &Digest::default(),
                    delta_mtu(0),
                    &HashSet::new(),
                );
                let message = ChitchatMessage::SynAck { digest, delta };
                ChitchatEnvelope {
                    version: PROTOCOL,
                    message,
                }
                .serialize_to_vec()
            })
            .collect();
        for (i, node) in self.nodes.iter_mut().enumerate() {
            for (j, hello) in hellos.iter().enumerate() {
                if i == j {
                    continue;
                }
                let envelope = ChitchatEnvelope::deserialize_up_to(&mut &hello[..], PROTOCOL)
                    .expect("a hello decodes");
                let from = self.ids[j].gossip_advertise_addr;
                let reply = node.cc.process_message_from(Some(from), PROTOCOL, envelope.message);
                assert!(reply.is_none(), "nothing to tell a node about itself");
            }
            node.cc.update_nodes_liveness();
            node.liveness_at = None;
        }
        for i in 0..self.nodes.len() {
            let phase = Duration::from_micros(self.pick.random_range(0..200_000));
            self.schedule(phase, Event::Round(i));
            self.scan_flaps(i);
        }
    }

    async fn advance_to(&mut self, at: Duration) {
        if at > self.now {
            tokio::time::advance(at - self.now).await;
            self.now = at;
        }
    }

    /// Runs events up to `deadline`, or until `done`; returns whether `done` held.
    async fn run_until(&mut self, deadline: Duration, done: fn(&Sim) -> bool) -> bool {
        loop {
            if done(self) {
                return true;
            }
            match self.queue.peek() {
                Some(next) if next.at <= deadline => {}
                _ => break,
            }
            let next = self.queue.pop().expect("peeked");
            self.advance_to(next.at).await;
            if let Some(node) = self.dispatch(next.event) {
                self.observe(node);
            }
        }
        self.advance_to(deadline).await;
        done(self)
    }

    /// Handles an event; returns the node whose state it may have changed.
    fn dispatch(&mut self, event: Event) -> Option<usize> {
        match event {
            Event::Round(i) => {
                if !self.nodes[i].up {
                    return None;
                }
                self.round(i);
                Some(i)
            }
            Event::Deliver { from, to, bytes } => self.deliver(from, to, &bytes),
            Event::LivenessDue { node, at } => {
                let n = &mut self.nodes[node];
                if !n.up || n.liveness_at != Some(at) {
                    return None;
                }
                n.cc.run_due_liveness_pass();
                n.liveness_at = None;
                Some(node)
            }
            Event::ClaimPoll { node, give_up } => {
                if !self.nodes[node].up {
                    return None;
                }
                self.claim_poll(node, give_up);
                Some(node)
            }
            Event::MarkUp(node) => {
                if !self.nodes[node].up {
                    return None;
                }
                self.mark_up(node);
                Some(node)
            }
            Event::Stop(node) => {
                self.nodes[node].up = false;
                None
            }
            Event::Push { node, all } => {
                if !self.nodes[node].up {
                    return None;
                }
                let n = &mut self.nodes[node];
                let mut targets = push_targets(&n.cc, PUSH_FANOUT, &mut n.rng);
                targets.retain(|to| n.pushed.insert(*to) || all);
                for (k, to) in targets.into_iter().enumerate() {
                    let at = self.now + Duration::from_millis((k / PUSH_BURST) as u64);
                    self.schedule(at, Event::PushPart { node, to });
                }
                None
            }
            Event::PushPart { node, to } => {
                if !self.nodes[node].up {
                    return None;
                }
                self.gossip_part(node, to);
                Some(node)
            }
        }
    }

    /// `Server::gossip_multiple`.
    fn round(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let cc = &node.cc;
        let own = cc.self_chitchat_id();
        let own_addr = own.gossip_advertise_addr;
        let peer_nodes = det_set(
            cc.cluster_state()
                .nodes()
                .filter(|id| *id != own)
                .map(|id| id.gossip_advertise_addr),
        );
        let live_nodes = det_set(
            cc.live_nodes()
                .filter(|id| *id != own)
                .map(|id| id.gossip_advertise_addr),
        );
        let dead_nodes = det_set(cc.dead_nodes().map(|id| id.gossip_advertise_addr));
        let seed_nodes = det_set(cc.seed_nodes().into_iter().filter(|addr| *addr != own_addr));
        // As the server: a node that knows no other asks up to three seeds.
        let first_seeds = if peer_nodes.is_empty() {
            first_seeds(&mut node.rng, &seed_nodes)
        } else {
            Vec::new()
        };
        let (mut selected, dead, mut seed) =
            select_nodes_for_gossip(&mut node.rng, peer_nodes, live_nodes, dead_nodes, seed_nodes);
        if !first_seeds.is_empty() {
            selected = first_seeds;
            seed = None;
        }
        node.cc.update_self_heartbeat();
        node.cc.gc_keys_marked_for_deletion();
        for addr in selected.into_iter().chain(dead).chain(seed) {
            self.gossip(i, addr);
        }
        let node = &mut self.nodes[i];
        node.cc.update_nodes_liveness();
        node.liveness_at = None;
        self.schedule(self.now + GOSSIP_INTERVAL, Event::Round(i));
    }

    /// `Server::gossip`: every SYN of the digest, in the version the peer speaks.
    fn gossip(&mut self, i: usize, to: SocketAddr) {
        let cc = &self.nodes[i].cc;
        let mut syns = Vec::new();
        for version in cc.versions_for(to) {
            syns.extend(cc.create_syn_messages(version).into_iter().map(|syn| (version, syn)));
        }
        for (version, syn) in syns {
            self.send(i, to, version, syn);
        }
    }

    /// `Server::gossip_part`: one SYN, a different part each time.
    fn gossip_part(&mut self, i: usize, to: SocketAddr) {
        let node = &mut self.nodes[i];
        node.next_part = node.next_part.wrapping_add(1);
        let mut picked = Vec::new();
        for version in node.cc.versions_for(to) {
            let mut syns = node.cc.create_syn_messages(version);
            let part = node.next_part % syns.len().max(1);
            syns.truncate(part + 1);
            picked.extend(syns.pop().map(|syn| (version, syn)));
        }
        for (version, syn) in picked {
            self.send(i, to, version, syn);
        }
    }

    /// `claim.rs`: waits (polling) for a second node state, at most five rounds.
    fn claim_poll(&mut self, i: usize, give_up: Duration) {
        let cc = &self.nodes[i].cc;
        if cc.node_states().len() < 2 && self.now < give_up {
            self.schedule(self.now + CLAIM_POLL, Event::ClaimPoll { node: i, give_up });
            return;
        }
        // Another generation of this name that says it is up, at another address, is probed
        // for five rounds (and here never answers: crashed). One at this node's own address is
        // not probed (`claim.rs`), so a restart in place is up at once.
        let own = cc.self_chitchat_id();
        let holder_elsewhere = cc.node_states().iter().any(|(id, state)| {
            id.node_id == own.node_id
                && id != own
                && state.get("status") == Some("up")
                && id.gossip_advertise_addr.ip() != own.gossip_advertise_addr.ip()
        });
        let at = if holder_elsewhere {
            self.now + GOSSIP_INTERVAL * CLAIM_ROUNDS
        } else {
            self.now
        };
        self.schedule(at, Event::MarkUp(i));
    }

    /// The claim's `change(mark_up)`: `status=up`, `rev` bumped, and the pusher pushes.
    fn mark_up(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let me = node.cc.self_node_state();
        me.set("status", "up");
        let rev = me.get("rev").and_then(|r| r.parse::<u64>().ok()).unwrap_or(0);
        me.set("rev", rev + 1);
        self.push_change(i);
    }

    /// The pusher, woken by a change of node `i`'s own state (`push.rs`).
    fn push_change(&mut self, i: usize) {
        self.nodes[i].pushed.clear();
        let mut at = self.now;
        for (n, wait) in PUSH_FOLLOW_UPS.into_iter().enumerate() {
            at += wait;
            self.schedule(at, Event::Push { node: i, all: n < PUSH_AGAIN });
        }
    }

    /// Encodes a datagram, counts it, and delivers it after its latency unless it is lost.
    fn send(&mut self, from: usize, to: SocketAddr, version: ProtocolVersion, message: ChitchatMessage) {
        let bytes = ChitchatEnvelope { version, message }.serialize_to_vec();
        let sealed = bytes.len() + SEAL_OVERHEAD;
        let packets = packets(sealed, self.p.mtu);
        let t = &mut self.traffic;
        t.datagrams += 1;
        t.bytes += sealed as u64;
        // The message type is the header's fourth byte (`message_serialize.rs`).
        t.by_kind[usize::from(bytes[3].min(3))] += 1;
        if version < ProtocolVersion::V2 {
            t.v0 += 1;
            t.v0_bytes += sealed as u64;
        }
        if sealed > MAX_DATAGRAM {
            t.oversized += 1;
        }
        if packets > 1 {
            t.fragmented += 1;
        }
        t.biggest = t.biggest.max(sealed);
        let sent_by = &mut t.sent_by[from];
        sent_by.0 += 1;
        sent_by.1 += sealed as u64;
        let lost_if = 1.0 - (1.0 - self.p.loss).powi(packets as i32);
        let lost = self.net.random::<f64>() < lost_if;
        let latency = Duration::from_micros(self.net.random_range(1_000..=5_000));
        if lost {
            self.traffic.lost += 1;
            return;
        }
        let from = self.ids[from].gossip_advertise_addr;
        self.schedule(self.now + latency, Event::Deliver { from, to, bytes });
    }

    /// `Server::handle_envelope`, and the deferred liveness pass it leaves due.
    fn deliver(&mut self, from: SocketAddr, to: SocketAddr, bytes: &[u8]) -> Option<usize> {
        let j = *self.by_addr.get(&to)?;
        if !self.nodes[j].up {
            self.traffic.to_down += 1;
            return None;
        }
        let Ok(envelope) = ChitchatEnvelope::deserialize_up_to(&mut &bytes[..], PROTOCOL) else {
            self.decode_errors += 1;
            return None;
        };
        let version = envelope.version;
        let node = &mut self.nodes[j];
        let reply = node.cc.process_message_from(Some(from), version, envelope.message);
        let due = node.cc.liveness_pass_due();
        if due != node.liveness_at {
            node.liveness_at = due;
            if let Some(at) = due {
                let when = at.saturating_duration_since(self.t0).max(self.now);
                self.schedule(when, Event::LivenessDue { node: j, at });
            }
        }
        if let Some(message) = reply {
            self.send(j, from, version, message);
        }
        Some(j)
    }

    /// Takes note of what changed at node `i`.
    fn observe(&mut self, i: usize) {
        let now = self.now;
        let cc = &self.nodes[i].cc;
        if let Some(join) = &mut self.join
            && join.observer[i]
        {
            let id = &self.ids[join.node];
            let live = cc.failure_detector.is_live(id);
            if live && join.live_at[i].is_none() {
                join.live_at[i] = Some(now - join.started);
                join.pending_live -= 1;
            }
            let up = || cc.node_state(id).and_then(|s| s.get("status")) == Some("up");
            if live && join.up_at[i].is_none() && up() {
                join.up_at[i] = Some(now - join.started);
                join.pending_up -= 1;
            }
        }
        if let Some(leave) = &mut self.leave
            && leave.observer[i]
            && leave.out_at[i].is_none()
        {
            let id = &self.ids[leave.node];
            let up = cc.node_state(id).and_then(|s| s.get("status")) == Some("up");
            if !cc.failure_detector.is_live(id) || !up {
                leave.out_at[i] = Some(now - leave.left);
                leave.pending -= 1;
            }
        }
        if let Some(crash) = &mut self.crash
            && crash.observer[i]
        {
            let id = &self.ids[crash.node];
            let live = cc.failure_detector.is_live(id);
            if crash.suspect_at[i].is_none() && (!live || cc.is_suspect(id)) {
                crash.suspect_at[i] = Some(now - crash.crashed);
                crash.pending_suspect -= 1;
            }
            if crash.dead_at[i].is_none() && !live {
                crash.dead_at[i] = Some(now - crash.crashed);
                crash.pending_dead -= 1;
            }
        }
        if let Some(sampler) = &mut self.heartbeats
            && let Some(row) = sampler.row[i]
        {
            for (k, subject) in sampler.subjects.iter().enumerate() {
                let Some(state) = cc.node_state(&self.ids[*subject]) else {
                    continue;
                };
                let heartbeat = state.heartbeat().0;
                let (last, at) = &mut sampler.last[row][k];
                if heartbeat > *last {
                    if let Some(at) = at {
                        sampler.gaps.push(now - *at);
                    }
                    *last = heartbeat;
                    *at = Some(now);
                }
            }
        }
        // Every change of liveness or suspicion is published to the watcher.
        if self.nodes[i].watcher.has_changed().unwrap_or(false) {
            self.nodes[i].watcher.mark_unchanged();
            self.scan_flaps(i);
        }
    }

    /// Counts running nodes that `i` newly suspects or newly holds dead.
    fn scan_flaps(&mut self, i: usize) {
        let cc = &self.nodes[i].cc;
        let flaps = &mut self.flaps;
        for (j, id) in self.ids.iter().enumerate() {
            if j == i {
                continue;
            }
            let live = cc.failure_detector.is_live(id);
            let suspect = cc.is_suspect(id);
            let before = flaps.state[i][j];
            if self.nodes[j].up {
                if before & LIVE != 0 && !live {
                    flaps.counts.deaths += 1;
                }
                if suspect && before & SUSPECT == 0 {
                    flaps.counts.suspicions += 1;
                    flaps.suspect_since.insert((i, j), self.now);
                }
            }
            if !suspect
                && before & SUSPECT != 0
                && let Some(since) = flaps.suspect_since.remove(&(i, j))
            {
                let lasted = self.now - since;
                flaps.counts.longest_suspicion = flaps.counts.longest_suspicion.max(lasted);
            }
            flaps.state[i][j] = u8::from(live) * LIVE | u8::from(suspect) * SUSPECT;
        }
    }

    fn running(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|i| self.nodes[*i].up)
    }

    /// Starts a node that joins through the seeds, as `cluster` starts one, and watches it.
    fn start_join(&mut self, id: ChitchatId) -> usize {
        let observer: Vec<bool> = (0..self.nodes.len() + 1)
            .map(|i| i < self.nodes.len() && self.nodes[i].up)
            .collect();
        let node = self.add_node(id, "claiming");
        let pending = observer.iter().filter(|o| **o).count();
        self.join = Some(JoinProbe {
            node,
            started: self.now,
            live_at: vec![None; observer.len()],
            up_at: vec![None; observer.len()],
            observer,
            pending_live: pending,
            pending_up: pending,
        });
        // The server's first tick is at once; the claim polls from the start.
        self.schedule(self.now, Event::Round(node));
        let give_up = self.now + GOSSIP_INTERVAL * CLAIM_ROUNDS;
        self.schedule(self.now + CLAIM_POLL, Event::ClaimPoll { node, give_up });
        node
    }

    fn crash(&mut self, node: usize) {
        self.nodes[node].up = false;
        let observer: Vec<bool> = (0..self.nodes.len()).map(|i| self.nodes[i].up).collect();
        let pending = observer.iter().filter(|o| **o).count();
        self.crash = Some(CrashProbe {
            node,
            crashed: self.now,
            suspect_at: vec![None; observer.len()],
            dead_at: vec![None; observer.len()],
            observer,
            pending_suspect: pending,
            pending_dead: pending,
        });
    }

    /// A clean leave (`GossipRegistry::leave`): `status=leaving`, the node's entries deleted,
    /// pushed; the node stops two rounds later.
    fn leave(&mut self, node: usize) {
        let me = self.nodes[node].cc.self_node_state();
        me.set("status", "leaving");
        let entries: Vec<String> = me.iter_prefix("svc:").map(|(k, _)| k.to_owned()).collect();
        for key in entries {
            me.delete(&key);
        }
        self.push_change(node);
        self.schedule(self.now + GOSSIP_INTERVAL * 2, Event::Stop(node));
        let observer: Vec<bool> = (0..self.nodes.len())
            .map(|i| i != node && self.nodes[i].up)
            .collect();
        let pending = observer.iter().filter(|o| **o).count();
        self.leave = Some(LeaveProbe {
            node,
            left: self.now,
            out_at: vec![None; observer.len()],
            observer,
            pending,
        });
    }

    /// A crash no probe watches (the soak's), noted in `crashes`.
    fn crash_quietly(&mut self, node: usize, crashes: &mut Vec<(usize, Duration)>) {
        self.nodes[node].up = false;
        crashes.push((node, self.now));
    }

    fn heartbeat_sampler(&mut self) -> HeartbeatSampler {
        let mut candidates: Vec<usize> = self.running().collect();
        candidates.shuffle(&mut self.pick);
        let observers = &candidates[..SAMPLED.min(candidates.len() / 2)];
        let subjects = candidates[observers.len()..2 * observers.len()].to_vec();
        let mut row = vec![None; self.nodes.len()];
        for (k, observer) in observers.iter().enumerate() {
            row[*observer] = Some(k);
        }
        HeartbeatSampler {
            row,
            last: vec![vec![(0, None); subjects.len()]; observers.len()],
            subjects,
            gaps: Vec::new(),
        }
    }

    fn refusals(&self) -> (u64, u64) {
        let nodes = self.nodes.iter().map(|n| n.cc.refusals().nodes()).sum();
        let all = self.nodes.iter().map(|n| n.cc.refusals().total()).sum();
        (nodes, all)
    }
}

/// IP packets a UDP datagram of `len` bytes takes over a path of `mtu` (IPv4: 20-byte IP and
/// 8-byte UDP headers; fragments carry multiples of 8 bytes).
fn packets(len: usize, mtu: usize) -> usize {
    if len + 28 <= mtu {
        return 1;
    }
    let per_fragment = (mtu - 20) / 8 * 8;
    (len + 8).div_ceil(per_fragment)
}

// ---------------------------------------------------------------------------------------------
// A run, and its report

fn ms(d: Duration) -> String {
    if d >= Duration::from_secs(10) {
        format!("{:.1} s", d.as_secs_f64())
    } else if d >= Duration::from_secs(1) {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// The nearest-rank percentile `q` of `values` (sorted here).
fn percentile(values: &mut [Duration], q: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    values.sort_unstable();
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

fn p50_max(values: &[Duration]) -> String {
    if values.is_empty() {
        return "n/a".to_owned();
    }
    let mut values = values.to_vec();
    let p50 = percentile(&mut values, 0.5);
    let max = percentile(&mut values, 1.0);
    let min = values[0];
    format!("{} / {} (min {})", ms(p50), ms(max), ms(min))
}

/// Figures of one run, as rows of a table.
struct Report {
    budget: usize,
    rows: Vec<(String, String)>,
}

impl Report {
    fn row(&mut self, label: impl Into<String>, value: impl Into<String>) {
        self.rows.push((label.into(), value.into()));
    }
}

fn rss_peak() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM"))
                .map(|l| l.trim_start_matches("VmHWM:").trim().to_owned())
        })
        .unwrap_or_else(|| "?".to_owned())
}

fn never(_: &Sim) -> bool {
    false
}

fn join_done(sim: &Sim) -> bool {
    sim.join
        .as_ref()
        .is_some_and(|j| j.pending_live == 0 && j.pending_up == 0)
}

fn leave_done(sim: &Sim) -> bool {
    sim.leave.as_ref().is_some_and(|l| l.pending == 0)
}

fn crash_done(sim: &Sim) -> bool {
    sim.crash.as_ref().is_some_and(|c| c.pending_dead == 0 && c.pending_suspect == 0)
}

async fn run(p: Params) -> Report {
    let wall = std::time::Instant::now();
    let label = format!(
        "[{} nodes, budget {}, loss {}, seed {}]",
        p.nodes, p.budget, p.loss, p.seed
    );
    let mut report = Report {
        budget: p.budget,
        rows: Vec::new(),
    };
    let mut sim = Sim::new(p.clone());
    let base = p.nodes - p.joins;
    sim.form(base);
    println!("{label} formed {base} nodes in {:.1} s wall", wall.elapsed().as_secs_f64());

    // Settle: the failure detectors learn the intervals.
    let phase_wall = std::time::Instant::now();
    sim.run_until(sim.now + SETTLE, never).await;
    let settled = sim.flaps.take();
    let not_live: usize = sim
        .running()
        .map(|i| {
            sim.running()
                .filter(|j| *j != i && !sim.nodes[i].cc.failure_detector.is_live(&sim.ids[*j]))
                .count()
        })
        .sum();
    println!(
        "{label} settled {} s in {:.1} s wall; pairs not live: {not_live}",
        SETTLE.as_secs(),
        phase_wall.elapsed().as_secs_f64()
    );

    // Steady: nothing changes.
    let phase_wall = std::time::Instant::now();
    sim.traffic = Traffic::new(sim.now, sim.nodes.len());
    sim.heartbeats = Some(sim.heartbeat_sampler());
    sim.run_until(sim.now + p.steady, never).await;
    let steady = sim.flaps.take();
    let fresh = Traffic::new(sim.now, sim.nodes.len());
    let traffic = std::mem::replace(&mut sim.traffic, fresh);
    let mut sampler = sim.heartbeats.take().expect("sampling");
    let window = (sim.now - traffic.since).as_secs_f64();
    let running = sim.running().count() as f64;
    let steady_wall = phase_wall.elapsed();
    println!(
        "{label} steady {window:.0} s in {:.1} s wall",
        steady_wall.as_secs_f64()
    );
    let parts: Vec<usize> = sim
        .running()
        .map(|i| sim.nodes[i].cc.create_syn_messages(PROTOCOL).len())
        .collect();
    let digest_bytes = sim.nodes[0].cc.digest_parts().1;
    // The failure detector's own mean interval, over the sampled pairs.
    let mut detector_means = Vec::new();
    for (i, row) in sampler.row.iter().enumerate() {
        if row.is_some() {
            for subject in &sampler.subjects {
                if let Some(timeout) = sim.nodes[i].cc.failure_detection_timeout(&sim.ids[*subject]) {
                    detector_means.push(timeout.as_secs_f64() / PHI_THRESHOLD);
                }
            }
        }
    }
    let detector_mean = detector_means.iter().sum::<f64>() / detector_means.len().max(1) as f64;

    report.row("settle 10 s: false suspicions / false deaths", format!("{} / {}", settled.suspicions, settled.deaths));
    report.row(
        format!("steady {window:.0} s: false suspicions / false deaths (all pairs)"),
        format!("{} / {}", steady.suspicions, steady.deaths),
    );
    report.row("steady: longest false suspicion", ms(steady.longest_suspicion));
    let gaps = &mut sampler.gaps;
    let mean_gap = gaps.iter().sum::<Duration>().as_secs_f64() / gaps.len().max(1) as f64;
    let p99 = percentile(gaps, 0.99);
    let max = percentile(gaps, 1.0);
    report.row(
        "heartbeat interval seen at a peer: mean / p99 / max",
        format!(
            "{:.1} ms / {} / {} ({} intervals, {}x{} pairs)",
            mean_gap * 1e3,
            ms(p99),
            ms(max),
            gaps.len(),
            sampler.subjects.len(),
            sampler.subjects.len()
        ),
    );
    report.row(
        "detector's mean interval -> suspect after (x6)",
        format!("{:.1} ms -> {:.0} ms", detector_mean * 1e3, detector_mean * 6e3),
    );
    let max_by = |f: fn(&(u64, u64)) -> u64| traffic.sent_by.iter().map(f).max().unwrap_or(0);
    report.row(
        "sent per node per s: bytes (mean / max node)",
        format!(
            "{:.1} KB / {:.1} KB",
            traffic.bytes as f64 / running / window / 1e3,
            max_by(|s| s.1) as f64 / window / 1e3
        ),
    );
    report.row(
        "sent per node per s: datagrams (mean / max node)",
        format!(
            "{:.0} / {:.0}",
            traffic.datagrams as f64 / running / window,
            max_by(|s| s.0) as f64 / window
        ),
    );
    report.row(
        "datagrams SYN / SYN-ACK / ACK (steady, all nodes)",
        format!(
            "{} / {} / {}",
            traffic.by_kind[0], traffic.by_kind[1], traffic.by_kind[2]
        ),
    );
    report.row(
        "parts per SYN (min-max); digest bytes (V2)",
        format!(
            "{}-{}; {} B",
            parts.iter().min().unwrap_or(&0),
            parts.iter().max().unwrap_or(&0),
            digest_bytes
        ),
    );
    report.row(
        "biggest datagram, steady (sealed); over 1,232 B; fragmented",
        format!("{} B; {}; {}", traffic.biggest, traffic.oversized, traffic.fragmented),
    );
    report.row(
        "datagrams lost (steady)",
        format!(
            "{} of {} ({:.2} %)",
            traffic.lost,
            traffic.datagrams,
            traffic.lost as f64 * 100.0 / traffic.datagrams.max(1) as f64
        ),
    );

    // Joins, one at a time.
    let phase_wall = std::time::Instant::now();
    let (mut all_live, mut all_up, mut median_live) = (Vec::new(), Vec::new(), Vec::new());
    let (mut join_v0, mut join_v0_bytes, mut join_biggest, mut join_bytes) = (0, 0, 0, 0);
    let mut join_incomplete = Vec::new();
    for k in 0..p.joins {
        // A random phase: the joiner's rounds fall anywhere in the others'.
        let phase = Duration::from_micros(sim.pick.random_range(0..200_000));
        sim.run_until(sim.now + phase, never).await;
        sim.traffic = Traffic::new(sim.now, sim.nodes.len());
        let id = identity(base + k, 1_760_000_000_000_000_000 + sim.now.as_nanos() as u64);
        let node = sim.start_join(id);
        let complete = sim.run_until(sim.now + JOIN_TIMEOUT, join_done).await;
        let join = sim.join.take().expect("joining");
        println!(
            "{label} join {k}: live at {} of {} nodes, up at {}, in {}",
            join.live_at.iter().flatten().count(),
            join.live_at.iter().flatten().count() + join.pending_live,
            join.up_at.iter().flatten().count(),
            ms(sim.now - join.started)
        );
        let times = |at: &[Option<Duration>]| -> Vec<Duration> { at.iter().flatten().copied().collect() };
        let mut live = times(&join.live_at);
        if complete {
            all_live.push(percentile(&mut live, 1.0));
            all_up.push(percentile(&mut times(&join.up_at), 1.0));
        } else {
            join_incomplete.push(format!(
                "join {k}: live at {} of {}, up at {} after {}",
                live.len(),
                live.len() + join.pending_live,
                join.up_at.iter().flatten().count(),
                ms(JOIN_TIMEOUT)
            ));
        }
        median_live.push(percentile(&mut live, 0.5));
        let t = &sim.traffic;
        join_v0 += t.v0;
        join_v0_bytes += t.v0_bytes;
        join_biggest = join_biggest.max(t.biggest);
        join_bytes += t.sent_by[node].1;
        sim.run_until(sim.now + GAP, never).await;
    }
    let joins_flaps = sim.flaps.take();
    println!(
        "{label} {} joins in {:.1} s wall",
        p.joins,
        phase_wall.elapsed().as_secs_f64()
    );
    report.row(
        format!("join: live at every node, p50 / max ({} joins)", all_live.len()),
        p50_max(&all_live),
    );
    report.row("join: live and status=up at every node, p50 / max", p50_max(&all_up));
    report.row("join: median node sees it live after, p50 / max", p50_max(&median_live));
    if !join_incomplete.is_empty() {
        report.row("join: INCOMPLETE", join_incomplete.join("; "));
    }
    report.row(
        "join: V0 datagrams (whole digest) per join; biggest datagram",
        format!(
            "{:.0} ({:.0} KB); {} B",
            join_v0 as f64 / p.joins.max(1) as f64,
            join_v0_bytes as f64 / p.joins.max(1) as f64 / 1e3,
            join_biggest
        ),
    );
    report.row(
        "join: bytes the joiner sends until it is in",
        format!("{:.0} KB", join_bytes as f64 / p.joins.max(1) as f64 / 1e3),
    );
    report.row(
        "joins: false suspicions / false deaths",
        format!("{} / {}", joins_flaps.suspicions, joins_flaps.deaths),
    );

    // Crashes, one at a time, of nodes that are not seeds.
    let phase_wall = std::time::Instant::now();
    let (mut all_suspect, mut all_dead, mut first_suspect) = (Vec::new(), Vec::new(), Vec::new());
    let mut crash_incomplete = Vec::new();
    let mut crashed = Vec::new();
    for k in 0..p.crashes {
        let phase = Duration::from_micros(sim.pick.random_range(0..200_000));
        sim.run_until(sim.now + phase, never).await;
        let candidates: Vec<usize> = sim.running().filter(|i| *i >= SEEDS).collect();
        let node = candidates[sim.pick.random_range(0..candidates.len())];
        sim.crash(node);
        crashed.push(node);
        let complete = sim.run_until(sim.now + CRASH_TIMEOUT, crash_done).await;
        let crash = sim.crash.take().expect("crashed");
        println!(
            "{label} crash {k}: dead at {} of {} nodes, in {}",
            crash.dead_at.iter().flatten().count(),
            crash.dead_at.iter().flatten().count() + crash.pending_dead,
            ms(sim.now - crash.crashed)
        );
        let mut suspect: Vec<Duration> = crash.suspect_at.iter().flatten().copied().collect();
        let mut dead: Vec<Duration> = crash.dead_at.iter().flatten().copied().collect();
        if complete {
            all_suspect.push(percentile(&mut suspect, 1.0));
            all_dead.push(percentile(&mut dead, 1.0));
            first_suspect.push(percentile(&mut suspect, 0.0));
        } else {
            crash_incomplete.push(format!(
                "crash {k}: dead at {} of {} after {}",
                dead.len(),
                dead.len() + crash.pending_dead,
                ms(CRASH_TIMEOUT)
            ));
        }
        sim.run_until(sim.now + GAP, never).await;
    }
    let crash_flaps = sim.flaps.take();
    println!(
        "{label} {} crashes in {:.1} s wall",
        p.crashes,
        phase_wall.elapsed().as_secs_f64()
    );
    report.row(
        format!("crash: first node suspects it, p50 / max ({} crashes)", first_suspect.len()),
        p50_max(&first_suspect),
    );
    report.row("crash: suspect (or dead) at every node, p50 / max", p50_max(&all_suspect));
    report.row("crash: dead at every node, p50 / max", p50_max(&all_dead));
    if !crash_incomplete.is_empty() {
        report.row("crash: INCOMPLETE", crash_incomplete.join("; "));
    }
    report.row(
        "crashes: false suspicions / false deaths (running nodes)",
        format!("{} / {}", crash_flaps.suspicions, crash_flaps.deaths),
    );

    // Clean leaves, one at a time, of nodes that are not seeds.
    let phase_wall = std::time::Instant::now();
    let (mut all_out, mut median_out, mut leave_incomplete) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..p.leaves {
        let phase = Duration::from_micros(sim.pick.random_range(0..200_000));
        sim.run_until(sim.now + phase, never).await;
        let candidates: Vec<usize> = sim.running().filter(|i| *i >= SEEDS).collect();
        let node = candidates[sim.pick.random_range(0..candidates.len())];
        sim.leave(node);
        let complete = sim.run_until(sim.now + CRASH_TIMEOUT, leave_done).await;
        let leave = sim.leave.take().expect("left");
        let mut out: Vec<Duration> = leave.out_at.iter().flatten().copied().collect();
        println!(
            "{label} leave {k}: out at {} of {} nodes, in {}",
            out.len(),
            out.len() + leave.pending,
            ms(sim.now - leave.left)
        );
        if complete {
            median_out.push(percentile(&mut out, 0.5));
            all_out.push(percentile(&mut out, 1.0));
        } else {
            leave_incomplete.push(format!("leave {k}: out at {} nodes", out.len()));
        }
        sim.run_until(sim.now + GAP, never).await;
    }
    let leave_flaps = sim.flaps.take();
    println!(
        "{label} {} leaves in {:.1} s wall",
        p.leaves,
        phase_wall.elapsed().as_secs_f64()
    );
    report.row(
        format!("leave: out of every node's lookups, p50 / max ({} leaves)", all_out.len()),
        p50_max(&all_out),
    );
    report.row("leave: median node has it out after, p50 / max", p50_max(&median_out));
    if !leave_incomplete.is_empty() {
        report.row("leave: INCOMPLETE", leave_incomplete.join("; "));
    }
    report.row(
        "leaves: false suspicions / false deaths (running nodes)",
        format!("{} / {}", leave_flaps.suspicions, leave_flaps.deaths),
    );

    // A restart of the first crashed node: its name and address, a new generation.
    let (refused_before, _) = sim.refusals();
    if let Some(first) = crashed.first() {
        let old = sim.ids[*first].clone();
        let id = ChitchatId::new(
            old.node_id.clone(),
            old.generation_id + sim.now.as_nanos() as u64,
            old.gossip_advertise_addr,
        );
        sim.traffic = Traffic::new(sim.now, sim.nodes.len());
        sim.start_join(id);
        let complete = sim.run_until(sim.now + RESTART_TIMEOUT, join_done).await;
        let join = sim.join.take().expect("restarting");
        let live = join.live_at.iter().flatten().count();
        let (refused_after, _) = sim.refusals();
        report.row(
            "restart in place: live and up at every node",
            if complete {
                ms(join.up_at.iter().flatten().copied().max().unwrap_or_default())
            } else {
                format!(
                    "NOT after {}: live at {live} of {}; {} new-node refusals meanwhile",
                    ms(RESTART_TIMEOUT),
                    live + join.pending_live,
                    refused_after - refused_before
                )
            },
        );
    }
    if p.soak {
        soak(&mut sim, &p, &label, &mut report).await;
    }
    let (refused_nodes, refused_all) = sim.refusals();
    report.row(
        "refusals, all nodes: new nodes / all",
        format!("{refused_nodes} / {refused_all}"),
    );
    if sim.decode_errors > 0 {
        report.row("DECODE ERRORS", sim.decode_errors.to_string());
    }
    let total = wall.elapsed();
    report.row(
        "wall time: run (steady window) ; peak RSS so far",
        format!(
            "{:.0} s ({:.0} s) ; {} ; sim time {:.0} s",
            total.as_secs_f64(),
            steady_wall.as_secs_f64(),
            rss_peak(),
            sim.now.as_secs_f64()
        ),
    );
    println!("{label} done in {:.1} s wall", total.as_secs_f64());
    for (label, value) in &report.rows {
        println!("    {label}: {value}");
    }
    report
}

/// Phase 6: a rolling restart of every running node, one every `SIM_SOAK_EVERY`.
async fn soak(sim: &mut Sim, p: &Params, label: &str, report: &mut Report) {
    /// How long after its crash a node should be out of every observer's live set.
    const OUT_AFTER: Duration = Duration::from_secs(3);
    let phase_wall = std::time::Instant::now();
    let started = sim.now;
    sim.flaps.take();
    sim.traffic = Traffic::new(sim.now, sim.nodes.len());
    let originals: Vec<usize> = sim.running().collect();
    let mut ins = Vec::new();
    let mut incomplete = 0;
    // Crashed nodes, and when, to check `OUT_AFTER` later; and the pairs still live then.
    let mut crashes: Vec<(usize, Duration)> = Vec::new();
    let (mut checked, mut still_live, mut crashes_not_out) = (0, 0, 0);
    let (mut max_parts, mut max_digest, mut max_dead) = (0, 0, 0);
    for (r, old) in originals.iter().copied().enumerate() {
        let tick = sim.now;
        let in_place = old < SEEDS;
        let id = if in_place {
            let was = sim.ids[old].clone();
            sim.crash_quietly(old, &mut crashes);
            ChitchatId::new(was.node_id, 1_770_000_000_000_000_000 + sim.now.as_nanos() as u64, was.gossip_advertise_addr)
        } else {
            identity(p.nodes + 1 + r, 1_770_000_000_000_000_000 + sim.now.as_nanos() as u64)
        };
        sim.start_join(id);
        let complete = sim.run_until(tick + p.soak_every, join_done).await;
        let join = sim.join.take().expect("replacing");
        if complete {
            ins.push(join.up_at.iter().flatten().copied().max().unwrap_or_default());
        } else {
            incomplete += 1;
        }
        if !in_place {
            sim.crash_quietly(old, &mut crashes);
        }
        sim.run_until(tick + p.soak_every, never).await;
        // The crashes that are `OUT_AFTER` old by now.
        while checked < crashes.len() && crashes[checked].1 + OUT_AFTER <= sim.now {
            let (node, _) = crashes[checked];
            let live = sim
                .running()
                .filter(|i| sim.nodes[*i].cc.failure_detector.is_live(&sim.ids[node]))
                .count();
            still_live += live;
            crashes_not_out += usize::from(live > 0);
            checked += 1;
        }
        let probe = sim.running().next().expect("a running node");
        let (parts, bytes) = sim.nodes[probe].cc.digest_parts();
        max_parts = max_parts.max(parts);
        max_digest = max_digest.max(bytes);
        let dead = sim.running().map(|i| sim.nodes[i].cc.dead_nodes().count()).max().unwrap_or(0);
        max_dead = max_dead.max(dead);
        if r % 50 == 49 {
            println!(
                "{label} soak: {} of {} restarted, {:.0} s wall; digest {parts} parts, {bytes} B, {dead} dead",
                r + 1,
                originals.len(),
                phase_wall.elapsed().as_secs_f64()
            );
        }
    }
    // The last crashes' `OUT_AFTER`.
    sim.run_until(sim.now + OUT_AFTER, never).await;
    for (node, _) in &crashes[checked..] {
        let live = sim
            .running()
            .filter(|i| sim.nodes[*i].cc.failure_detector.is_live(&sim.ids[*node]))
            .count();
        still_live += live;
        crashes_not_out += usize::from(live > 0);
    }
    let flaps = sim.flaps.take();
    let t = std::mem::replace(&mut sim.traffic, Traffic::new(sim.now, sim.nodes.len()));
    let window = (sim.now - started).as_secs_f64();
    let running = sim.running().count() as f64;
    let mut ins_sorted = ins.clone();
    report.row(
        format!(
            "soak: rolling restart of {} nodes, one every {}: replacement live and up at every node, p50 / p99 / max",
            originals.len(),
            ms(p.soak_every)
        ),
        format!(
            "{} / {} / {}{}",
            ms(percentile(&mut ins_sorted, 0.5)),
            ms(percentile(&mut ins_sorted, 0.99)),
            ms(percentile(&mut ins_sorted, 1.0)),
            if incomplete > 0 { format!(" ({incomplete} NOT within the interval)") } else { String::new() }
        ),
    );
    report.row(
        "soak: crashed nodes still live somewhere 3 s after the crash (observer pairs)",
        format!("{crashes_not_out} of {} ({still_live})", crashes.len()),
    );
    report.row(
        "soak: false suspicions / false deaths (running nodes)",
        format!("{} / {}", flaps.suspicions, flaps.deaths),
    );
    report.row(
        "soak: digest, largest: parts; bytes (V2); dead nodes held",
        format!("{max_parts}; {max_digest} B; {max_dead}"),
    );
    report.row(
        "soak: sent per node per s; datagrams lost; biggest; fragmented",
        format!(
            "{:.1} KB; {} of {} ({:.2} %); {} B; {}",
            t.bytes as f64 / running / window / 1e3,
            t.lost,
            t.datagrams,
            t.lost as f64 * 100.0 / t.datagrams.max(1) as f64,
            t.biggest,
            t.fragmented
        ),
    );
    println!(
        "{label} soak of {} restarts in {:.1} s wall",
        originals.len(),
        phase_wall.elapsed().as_secs_f64()
    );
}

fn print_table(p: &Params, reports: &[Report]) {
    println!();
    println!(
        "## chitchat V2 simulation: {} nodes, SIM_LOSS {}, seed {}, MTU {}, {} joins, {} crashes",
        p.nodes, p.loss, p.seed, p.mtu, p.joins, p.crashes
    );
    println!();
    let mut header = "| measure |".to_owned();
    let mut rule = "|---|".to_owned();
    for r in reports {
        let name = if r.budget >= HUGE_BUDGET {
            format!(" budget {} (one datagram, as before V2) |", r.budget)
        } else {
            format!(" budget {} (V2 parts) |", r.budget)
        };
        header.push_str(&name);
        rule.push_str("---|");
    }
    println!("{header}");
    println!("{rule}");
    let mut labels: Vec<&str> = Vec::new();
    for r in reports {
        for (label, _) in &r.rows {
            if !labels.contains(&label.as_str()) {
                labels.push(label);
            }
        }
    }
    for label in labels {
        let mut line = format!("| {label} |");
        for r in reports {
            let value = r
                .rows
                .iter()
                .find(|(l, _)| l == label)
                .map_or("", |(_, v)| v.as_str());
            line.push_str(&format!(" {value} |"));
        }
        println!("{line}");
    }
    println!();
}

#[tokio::test]
#[ignore = "a scale simulation (minutes at 1,000 nodes): run it by name, see the module's doc"]
async fn scale() {
    tokio::time::pause();
    let (params, budgets) = Params::from_env();
    let mut reports = Vec::new();
    for budget in budgets {
        let p = Params {
            budget,
            ..params.clone()
        };
        reports.push(run(p).await);
    }
    print_table(&params, &reports);
}

/// The packet arithmetic the loss model rests on.
#[test]
fn a_datagram_past_one_packet_is_fragmented() {
    assert_eq!(packets(1_232, 1_500), 1);
    assert_eq!(packets(1_472, 1_500), 1);
    assert_eq!(packets(1_473, 1_500), 2);
    assert_eq!(packets(60_000, 1_500), 41);
    assert_eq!(packets(60_000, 65_535), 1);
}

/// A node's state is what the module's doc says: ids of 19 bytes, a description of about 1 KB.
#[test]
fn a_node_is_a_19_byte_name_and_a_kilobyte_of_state() {
    let id = identity(42, 1);
    assert_eq!(id.node_id.as_ref(), "basket-5e6f70-00042");
    let bytes: usize = initial_keys(&id, "up").iter().map(|(k, v)| k.len() + v.len()).sum();
    assert!((1_000..1_200).contains(&bytes), "{bytes} bytes");
}
