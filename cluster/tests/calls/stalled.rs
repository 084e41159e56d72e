//! An at-most-once call whose process stalls after the call may have run on it: the retries
//! that cannot reach it (its connect not answered in time) say nothing of whether it is gone,
//! so they go on until it answers from its record, over real TCP through a proxy that freezes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cluster::registry::ServiceEntry;
use cluster::{AttemptKind, Registry};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::support::{BankClient, Cluster};

/// Forwards connections to `target` until frozen. Frozen, it closes the connections it
/// forwards and accepts new ones that it never forwards: a process stopped mid-run (its
/// kernel still completes TCP handshakes) as the caller sees it.
struct Freezer {
    addr: SocketAddr,
    frozen: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Freezer {
    async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let frozen = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let frozen = frozen.clone();
            async move {
                let mut links = JoinSet::new();
                let mut held = Vec::new();
                loop {
                    let (caller, _) = listener.accept().await.unwrap();
                    if frozen.load(Ordering::SeqCst) {
                        held.push(caller);
                        continue;
                    }
                    let frozen = frozen.clone();
                    links.spawn(async move {
                        let provider = TcpStream::connect(target).await.unwrap();
                        let (mut a, mut b) = (caller, provider);
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut a, &mut b) => {}
                            () = async {
                                while !frozen.load(Ordering::SeqCst) {
                                    tokio::time::sleep(Duration::from_millis(5)).await;
                                }
                            } => {}
                        }
                    });
                }
            }
        });
        Self { addr, frozen, task }
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn an_at_most_once_retry_goes_on_while_its_process_does_not_answer_connects() {
    let cluster = Cluster::tcp();
    let (provider, vault) = cluster.bank("bank-1").await;
    *vault.deposit_takes.lock().unwrap() = Duration::from_millis(600);
    let freezer = Freezer::start(provider.addr()).await;
    // The caller reaches bank-1 only through the freezer: its entry, at the freezer's address.
    let entry = provider.registry().lookup("bank")[0].clone();
    let mut node = entry.node.clone();
    node.addr = freezer.addr;
    cluster
        .registry
        .register(ServiceEntry::new(node, entry.description.clone()))
        .await
        .unwrap();
    let client = BankClient::new(&cluster.node("client").await);
    let call = tokio::spawn(async move {
        client
            .deposit(7)
            .timeout(Duration::from_millis(300))
            .reported()
            .await
    });
    // The first attempt times out at 300 ms and may have run: the call is pinned to bank-1.
    // Frozen then, and for long enough that retries meet connects nobody answers.
    tokio::time::sleep(Duration::from_millis(350)).await;
    freezer.frozen.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    freezer.frozen.store(false, Ordering::SeqCst);
    let (_, report) = call
        .await
        .unwrap()
        .expect("answered once bank-1 answers again");
    assert_eq!(vault.ran(), [7], "ran once");
    let outcomes: Vec<_> = report.attempts.iter().map(|a| a.outcome.clone()).collect();
    assert!(
        outcomes
            .iter()
            .any(|o| o.contains("still being opened") || o.contains("connect timeout")),
        "a retry met a connect nobody answered: {outcomes:?}"
    );
    let last = report.attempts.last().unwrap();
    assert_eq!(last.kind, AttemptKind::SameProcess, "{outcomes:?}");
    assert!(last.outcome.contains("record"), "{outcomes:?}");
}
