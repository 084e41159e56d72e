//! The rolling deploy under load: three replicas of `ledger`, a client sending a steady stream
//! of idempotent and non-idempotent calls, and each replica replaced in turn, either under the
//! same node name or under a new one. Run by `examples/rolling_deploy.rs` and by
//! `tests/deploy.rs`; its figures are in `docs/deploys.md`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cluster::Node;
use cluster::registry::{GossipConfig, GossipRegistry};

use crate::secrets::Secrets;
use crate::{Book, Executions, LedgerClient, LedgerServer};

/// How replacements are named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// A StatefulSet: `ledger-0` comes back as `ledger-0`.
    SameNames,
    /// A Deployment: every pod gets a new name.
    NewNames,
}

/// Latency percentiles of one phase.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    /// Calls in the phase.
    pub calls: usize,
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Slowest.
    pub max: Duration,
}

/// What a run saw.
#[derive(Debug, Default)]
pub struct Report {
    /// Before the deploy.
    pub quiet: Latency,
    /// During the deploy.
    pub deploy: Latency,
    /// Every failed call's message.
    pub failed: Vec<String>,
    /// Deposits the client saw succeed.
    pub deposits: usize,
    /// Deposits that ran other than exactly once (id, times), including acknowledged ones that
    /// never ran.
    pub not_exactly_once: Vec<(u64, u32)>,
}

struct Replica {
    node: Node,
}

async fn replica(
    secrets: &Secrets,
    name: &str,
    seeds: &[String],
    executions: &Executions,
) -> Replica {
    let registry = GossipRegistry::new(
        GossipConfig::new()
            .keyring(secrets.keyring())
            .seeds(seeds.iter().cloned()),
    );
    let node = Node::builder()
        .identity(secrets.identity(name))
        .registry(registry)
        .start()
        .await
        .expect("node starts");
    let book = Book {
        work: Duration::from_millis(2),
        executions: executions.clone(),
    };
    let _registration = node.serve(LedgerServer::new(book)).await.expect("serves");
    Replica { node }
}

async fn until_providers(node: &Node, n: usize) {
    let mut changes = node.registry().changes();
    while node.registry().lookup("ledger").len() != n {
        let _ = tokio::time::timeout(Duration::from_secs(1), changes.changed()).await;
    }
}

fn percentiles(mut samples: Vec<Duration>) -> Latency {
    samples.sort();
    let at = |q: f64| {
        samples
            .get(((samples.len() as f64 * q) as usize).min(samples.len().saturating_sub(1)))
            .copied()
    };
    Latency {
        calls: samples.len(),
        p50: at(0.5).unwrap_or_default(),
        p99: at(0.99).unwrap_or_default(),
        max: samples.last().copied().unwrap_or_default(),
    }
}

/// Runs the scenario: `quiet` of steady load, then the deploy under the same load.
pub async fn run(naming: Naming, quiet: Duration) -> Report {
    let executions = Executions::default();
    let secrets = Secrets::throwaway("deploy");
    let client_registry = GossipRegistry::new(GossipConfig::new().keyring(secrets.keyring()));
    let client_node = Node::builder()
        .identity(secrets.identity("client"))
        .registry(client_registry.clone())
        .start()
        .await
        .unwrap();
    let seed = client_registry.gossip_addr().unwrap().to_string();
    let mut replicas = Vec::new();
    for i in 0..3 {
        replicas.push(
            replica(
                &secrets,
                &format!("ledger-{i}"),
                std::slice::from_ref(&seed),
                &executions,
            )
            .await,
        );
    }
    until_providers(&client_node, 3).await;

    // Four callers, each alternating a read and a deposit, with a short pause between calls.
    let stop = Arc::new(AtomicBool::new(false));
    let deploying = Arc::new(AtomicBool::new(false));
    let next_id = Arc::new(AtomicU64::new(1));
    let ledger = LedgerClient::new(&client_node);
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let (ledger, stop, deploying, next_id) = (
                ledger.clone(),
                stop.clone(),
                deploying.clone(),
                next_id.clone(),
            );
            tokio::spawn(async move {
                let (mut quiet, mut deploy, mut failed, mut deposits) =
                    (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                let mut read = true;
                while !stop.load(Ordering::SeqCst) {
                    let during = deploying.load(Ordering::SeqCst);
                    let start = Instant::now();
                    let outcome = if read {
                        ledger.balance(7).await.map(|_| None)
                    } else {
                        let id = next_id.fetch_add(1, Ordering::SeqCst);
                        ledger.deposit(id, 5).await.map(|_| Some(id))
                    };
                    let took = start.elapsed();
                    match outcome {
                        Ok(deposit) => {
                            deposits.extend(deposit);
                            if during {
                                deploy.push(took)
                            } else {
                                quiet.push(took)
                            }
                        }
                        Err(e) => failed.push(e.to_string()),
                    }
                    read = !read;
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
                (quiet, deploy, failed, deposits)
            })
        })
        .collect();

    tokio::time::sleep(quiet).await;
    deploying.store(true, Ordering::SeqCst);
    for i in 0..3 {
        let seeds = vec![seed.clone()];
        let old = replicas.remove(0);
        match naming {
            Naming::SameNames => {
                old.node.shutdown().await;
                replicas.push(replica(&secrets, &format!("ledger-{i}"), &seeds, &executions).await);
            }
            Naming::NewNames => {
                replicas
                    .push(replica(&secrets, &format!("ledger-{i}-v2"), &seeds, &executions).await);
                until_providers(&client_node, 4).await;
                old.node.shutdown().await;
            }
        }
        until_providers(&client_node, 3).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await; // load on the new replicas too
    stop.store(true, Ordering::SeqCst);

    let mut report = Report::default();
    let (mut quiet_samples, mut deploy_samples, mut acknowledged) =
        (Vec::new(), Vec::new(), Vec::new());
    for caller in callers {
        let (quiet, deploy, failed, deposits) = caller.await.unwrap();
        quiet_samples.extend(quiet);
        deploy_samples.extend(deploy);
        report.failed.extend(failed);
        acknowledged.extend(deposits);
    }
    report.quiet = percentiles(quiet_samples);
    report.deploy = percentiles(deploy_samples);
    report.deposits = acknowledged.len();
    let executions = executions.lock().unwrap().clone();
    for id in &acknowledged {
        let times = executions.get(id).copied().unwrap_or(0);
        if times != 1 {
            report.not_exactly_once.push((*id, times));
        }
    }
    for (id, times) in executions.iter() {
        if *times > 1 && !acknowledged.contains(id) {
            report.not_exactly_once.push((*id, *times));
        }
    }
    for r in &replicas {
        r.node.shutdown().await;
    }
    client_node.shutdown().await;
    report
}
