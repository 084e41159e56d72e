//! Nodes in separate OS processes, gossiping over UDP on loopback: one is killed with SIGKILL,
//! another leaves on SIGTERM; a client in this process keeps calling through both. And issue 15's
//! at-most-once deposits while one of three replicas is stopped (SIGSTOP) for 5 s.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cluster::Node;
use cluster::registry::{GossipConfig, GossipRegistry};
use examples::GreeterClient;

/// chitchat's wire format written by hand, as a member holding the gossip key can send it
/// (shared with the registry tests).
#[allow(dead_code, unreachable_pub)]
#[path = "../../cluster/tests/registry/forge.rs"]
mod forge;

/// A `cluster-node` process, killed when dropped so a failing test leaves nothing behind.
struct Process {
    child: Child,
    gossip: SocketAddr,
    rpc: SocketAddr,
}

/// A cluster's secrets in a directory of their own, written by `cluster-node init` and
/// `issue` as an operator would; removed when dropped.
struct Certs(std::path::PathBuf);

impl Certs {
    fn new(nodes: &[&str]) -> Self {
        Self::of_cluster("processes", nodes)
    }

    fn of_cluster(cluster: &str, nodes: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "cluster-processes-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let dir_arg = dir.to_str().unwrap();
        node_command(&["init", "--cluster", cluster, "--dir", dir_arg]);
        for node in nodes {
            node_command(&["issue", "--dir", dir_arg, "--node", node]);
        }
        Self(dir)
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn node_command(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_cluster-node"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cluster-node {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Process {
    fn start(name: &str, certs: &Certs, seeds: &[SocketAddr]) -> Self {
        Self::start_with(name, certs, seeds, &[]).0
    }

    /// A process started with `extra` arguments, and the lines it prints after its first.
    fn start_with(
        name: &str,
        certs: &Certs,
        seeds: &[SocketAddr],
        extra: &[&str],
    ) -> (Self, std::sync::mpsc::Receiver<String>) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cluster-node"));
        command
            .args(["--name", name, "--certs", certs.0.to_str().unwrap()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for seed in seeds {
            command.args(["--seed", &seed.to_string()]);
        }
        let mut child = command.spawn().expect("cluster-node starts");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).expect("its first line");
        let field = |name: &str| -> SocketAddr {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .unwrap_or_else(|| panic!("{name} in its first line: {line:?}"))
                .parse()
                .unwrap()
        };
        let (gossip, rpc) = (field("gossip="), field("rpc="));
        let (lines, rest) = std::sync::mpsc::channel();
        // Ends with the process's stdout.
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    return;
                }
            }
        });
        (Self { child, gossip, rpc }, rest)
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

/// The test's own node `client` of `certs`' cluster, seeding gossip: the node, its registry
/// and the cluster's gossip keyring.
async fn client(certs: &Certs) -> (Node, GossipRegistry, cluster::Keyring) {
    member(certs, "client", &[]).await
}

/// A node of this process named `name`, of `certs`' cluster, seeded with `seeds`.
async fn member(
    certs: &Certs,
    name: &str,
    seeds: &[SocketAddr],
) -> (Node, GossipRegistry, cluster::Keyring) {
    let keyring = cluster::Keyring::from_file(certs.0.join("gossip.key")).unwrap();
    let registry = GossipRegistry::new(
        GossipConfig::new()
            .keyring(keyring.clone())
            .seeds(seeds.iter().map(ToString::to_string)),
    );
    let node = Node::builder()
        .identity(cluster::Identity::from_dir(&certs.0, name).unwrap())
        .registry(registry.clone())
        .start()
        .await
        .unwrap();
    (node, registry, keyring)
}

async fn until(
    node: &Node,
    what: &str,
    limit: Duration,
    condition: impl Fn(usize) -> bool,
) -> Duration {
    let start = Instant::now();
    let mut changes = node.registry().changes();
    while !condition(node.registry().lookup("greeter").len()) {
        let left = limit
            .checked_sub(start.elapsed())
            .unwrap_or_else(|| panic!("not {what} within {limit:?}"));
        let _ = tokio::time::timeout(left, changes.changed()).await;
    }
    start.elapsed()
}

#[tokio::test]
async fn a_killed_process_leaves_every_lookup_and_calls_go_on() {
    let certs = Certs::new(&["client", "greeter-a", "greeter-b"]);
    let (client_node, registry, _) = client(&certs).await;
    let seed = registry.gossip_addr().unwrap();
    let a = Process::start("greeter-a", &certs, &[seed]);
    let b = Process::start("greeter-b", &certs, &[seed, a.gossip]);
    until(&client_node, "both seen", Duration::from_secs(10), |n| {
        n == 2
    })
    .await;

    // A second process under a live name (the same certificate copied): it refuses to start,
    // says who holds the name, and takes no call.
    // Under `timeout`, so that a second process that did start ends the test instead of hanging
    // it; waited for off the runtime's thread, which must go on gossiping meanwhile.
    let certs_dir = certs.0.to_str().unwrap().to_owned();
    let second = tokio::task::spawn_blocking(move || {
        Command::new("timeout")
            .args(["20", env!("CARGO_BIN_EXE_cluster-node")])
            .args(["--name", "greeter-a", "--certs", &certs_dir])
            .args(["--seed", &seed.to_string()])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{said}");
    assert!(said.contains("already up at 127.0.0.1:"), "{said}");

    let greeter = GreeterClient::new(&client_node);
    let mut served_by = std::collections::BTreeSet::new();
    for _ in 0..10 {
        served_by.insert(greeter.greet("rust".into()).await.unwrap().node);
    }
    assert_eq!(
        served_by.into_iter().collect::<Vec<_>>(),
        ["greeter-a", "greeter-b"]
    );

    a.signal("-KILL");
    // Calls made meanwhile are not lost: a refused connection is retried on the other process.
    for _ in 0..10 {
        assert_eq!(
            greeter.greet("rust".into()).await.unwrap().node,
            "greeter-b"
        );
    }
    // Bounds with room for a loaded machine; the figures are the registry benchmark's.
    let took = until(
        &client_node,
        "the killed process dropped",
        Duration::from_secs(10),
        |n| n == 1,
    )
    .await;
    println!("SIGKILL seen after {took:?}");

    b.signal("-TERM");
    let took = until(
        &client_node,
        "the leaving process dropped",
        Duration::from_secs(10),
        |n| n == 0,
    )
    .await;
    println!("SIGTERM leave seen after {took:?}");
    client_node.shutdown().await;
}

/// A compromised member (the gossip key, a certificate of its own) says that two live
/// generations of `greeter-a` are up: one at the member's own port, one at a bare TCP
/// listener. The real `greeter-a` process still starts, and is called: neither forged holder
/// presents a certificate naming it (`registry/gossip/claim.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_forging_up_holders_of_a_name_cannot_keep_its_process_from_starting() {
    let certs = Certs::of_cluster(forge::CLUSTER, &["client", "greeter-a", "mallory"]);
    let (client_node, registry, keyring) = client(&certs).await;
    let seed = registry.gossip_addr().unwrap();
    let mallory = Process::start("mallory", &certs, &[seed]);
    let (bare_addr, accepting) = forge::bare_listener().await;
    let beats =
        forge::forge_holders(&registry, keyring, "greeter-a", &[mallory.rpc, bare_addr]).await;

    let greeter = Process::start("greeter-a", &certs, &[seed]);
    until(
        &client_node,
        "greeter-a and mallory seen",
        Duration::from_secs(10),
        |n| n == 2,
    )
    .await;
    let client = GreeterClient::new(&client_node);
    let mut served_by = std::collections::BTreeSet::new();
    for _ in 0..10 {
        served_by.insert(client.greet("rust".into()).await.unwrap().node);
    }
    assert!(served_by.contains("greeter-a"), "{served_by:?}");
    for beat in beats {
        beat.abort();
    }
    accepting.abort();
    drop((greeter, mallory));
    client_node.shutdown().await;
}

/// A compromised member (the gossip key, a certificate of its own, a build of its own: this
/// test's, through `GossipRegistry::__forge`) rewrites the state of the `greeter-a` process:
/// its services deleted, `status = leaving`, its address moved, its heartbeat at 2^64, signed
/// with the member's key and pushed again and again. The client's registry keeps `greeter-a`
/// at its own address and its calls reach it: each value must be signed by the node it is
/// about (`docs/security.md`, "Signed gossip").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_rewriting_a_process_state_changes_nothing_in_another_registry() {
    let certs = Certs::new(&["client", "greeter-a", "mallory"]);
    let (client_node, registry, _) = client(&certs).await;
    let seed = registry.gossip_addr().unwrap();
    let greeter = Process::start("greeter-a", &certs, &[seed]);
    let (mallory, mallory_registry, _) = member(&certs, "mallory", &[seed]).await;
    until(
        &client_node,
        "greeter-a seen",
        Duration::from_secs(10),
        |n| n == 1,
    )
    .await;
    until(
        &mallory,
        "greeter-a seen by mallory",
        Duration::from_secs(10),
        |n| n == 1,
    )
    .await;
    let address = client_node.registry().lookup("greeter")[0].node.addr;
    assert_eq!(address, greeter.rpc);

    // Past `dead_after` (2 s): a heartbeat taken at 2^64 would have greeter-a dead by the end.
    for _ in 0..6 {
        let forged = mallory_registry
            .__forge("greeter-a", Some(u64::MAX), |state| {
                let services: Vec<String> = state
                    .key_values()
                    .filter(|(key, _)| key.starts_with("svc:"))
                    .map(|(key, _)| key.to_owned())
                    .collect();
                for key in services {
                    state.delete(&key);
                }
                state.set("status", "leaving");
                state.set("rpc", "127.0.0.1:1");
            })
            .await;
        assert!(forged, "mallory knows greeter-a");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let entries = client_node.registry().lookup("greeter");
        assert_eq!(entries.len(), 1, "greeter-a still listed");
        assert_eq!(entries[0].node.addr, address, "at its own address");
    }
    assert!(registry.forged_updates() > 0, "the client counted the lies");
    let reply = GreeterClient::new(&client_node)
        .greet("rust".into())
        .await
        .unwrap();
    assert_eq!(reply.node, "greeter-a");
    drop(greeter);
    mallory.shutdown().await;
    client_node.shutdown().await;
}

/// Issue 15: deposits declared `at_most_once`, from 8 callers at once over three replicas in
/// their own processes, one of which is stopped (SIGSTOP) for 5 s and then continued. Every
/// deposit either succeeds and ran exactly once, or fails and never ran; a deposit whose
/// attempt timed out on the stopped replica is retried there, and answered from its record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deposits_run_exactly_once_or_not_at_all_while_a_replica_is_stopped() {
    use examples::BankClient;
    use std::collections::HashMap;

    let certs = Certs::new(&["client", "bank-a", "bank-b", "bank-c"]);
    let (client_node, registry, _) = client(&certs).await;
    let seed = registry.gossip_addr().unwrap();
    let mut banks = Vec::new();
    for name in ["bank-a", "bank-b", "bank-c"] {
        banks.push(Process::start_with(name, &certs, &[seed], &["--bank"]));
    }
    let start = Instant::now();
    let mut changes = client_node.registry().changes();
    while client_node.registry().lookup("bank").len() < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "three banks seen"
        );
        let _ = tokio::time::timeout(Duration::from_millis(100), changes.changed()).await;
    }

    let bank = BankClient::new(&client_node);
    let stop = Instant::now() + Duration::from_secs(12);
    let mut callers = Vec::new();
    for caller in 0..8u64 {
        let bank = bank.clone();
        callers.push(tokio::spawn(async move {
            // (id, succeeded, answered from a record)
            let mut outcomes = Vec::new();
            let mut n = 0;
            while Instant::now() < stop {
                let id = caller << 32 | n;
                n += 1;
                let outcome = match bank.deposit(id).reported().await {
                    Ok((_, report)) => {
                        let recalled = report.attempts.iter().any(|a| a.outcome.contains("record"));
                        (id, true, recalled)
                    }
                    Err(e) => {
                        eprintln!("deposit {id} failed: {e}");
                        (id, false, false)
                    }
                };
                outcomes.push(outcome);
            }
            outcomes
        }));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    banks[1].0.signal("-STOP");
    tokio::time::sleep(Duration::from_secs(5)).await;
    banks[1].0.signal("-CONT");
    let mut outcomes = Vec::new();
    for caller in callers {
        outcomes.extend(caller.await.unwrap());
    }
    // Deposits that ran after their callers gave up would print late: give them time.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut ran: HashMap<u64, usize> = HashMap::new();
    for (_, lines) in &banks {
        for line in lines.try_iter() {
            if let Some(id) = line.strip_prefix("deposit ") {
                *ran.entry(id.parse().unwrap()).or_default() += 1;
            }
        }
    }
    let (mut succeeded, mut failed, mut recalled) = (0, 0, 0);
    for (id, ok, from_record) in &outcomes {
        let runs = ran.get(id).copied().unwrap_or(0);
        if *ok {
            succeeded += 1;
            assert_eq!(runs, 1, "deposit {id} succeeded and ran {runs} times");
        } else {
            failed += 1;
            assert_eq!(runs, 0, "deposit {id} failed and ran {runs} times");
        }
        recalled += usize::from(*from_record);
    }
    assert_eq!(ran.len(), succeeded, "no deposit ran that nobody asked for");
    println!(
        "{} deposits: {succeeded} succeeded, each ran once; {failed} failed, none ran; {recalled} answered from a record after the stop",
        outcomes.len()
    );
    assert!(succeeded > 1_000, "{succeeded} deposits in 12 s");
    client_node.shutdown().await;
}
