//! Attacks on the connection attempt shared by the calls that wait for it (connect.rs, a tokio
//! `watch` channel): a peer that accepts but never completes the handshake, one that resets
//! during it, waiters cancelled mid-connect, the runtime shut down mid-connect. Every waiter
//! answers by its deadline, the pool reconnects once the peer answers, no connection is left
//! open. Over real TCP, through a hostile listener in front of the real provider.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use cluster::Node;
use cluster::Registry;
use cluster::registry::ServiceEntry;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::support::{BankClient, Cluster, identity};

const HOLD: u8 = 0;
const RESET: u8 = 1;
const FORWARD: u8 = 2;

/// A listener in front of `target`: holds connections open and silent (reading until the
/// caller closes), resets them, or forwards them, as `mode` says at accept.
struct Hostile {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    accepted: Arc<AtomicUsize>,
    /// Connections held whose caller has not closed them yet.
    held_open: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Hostile {
    async fn start(target: SocketAddr, mode: u8) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(AtomicU8::new(mode));
        let accepted = Arc::new(AtomicUsize::new(0));
        let held_open = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn({
            let (mode, accepted, held_open) = (mode.clone(), accepted.clone(), held_open.clone());
            async move {
                loop {
                    let (mut caller, _) = listener.accept().await.unwrap();
                    accepted.fetch_add(1, Ordering::SeqCst);
                    match mode.load(Ordering::SeqCst) {
                        HOLD => {
                            held_open.fetch_add(1, Ordering::SeqCst);
                            let held_open = held_open.clone();
                            tokio::spawn(async move {
                                let mut sink = [0u8; 4096];
                                while let Ok(n) = caller.read(&mut sink).await {
                                    if n == 0 {
                                        break;
                                    }
                                }
                                held_open.fetch_sub(1, Ordering::SeqCst);
                            });
                        }
                        RESET => {
                            tokio::spawn(async move {
                                // A few bytes of the hello, then a reset.
                                let mut first = [0u8; 8];
                                let _ = caller.read(&mut first).await;
                                #[allow(deprecated)]
                                let _ = caller.set_linger(Some(Duration::ZERO));
                                drop(caller);
                            });
                        }
                        _ => {
                            tokio::spawn(async move {
                                let mut provider = TcpStream::connect(target).await.unwrap();
                                let _ =
                                    tokio::io::copy_bidirectional(&mut caller, &mut provider).await;
                            });
                        }
                    }
                }
            }
        });
        Self {
            addr,
            mode,
            accepted,
            held_open,
            task,
        }
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A bank provider reachable only through a hostile listener, and a client with a short
/// connect timeout.
async fn setup(mode: u8) -> (Cluster, Node, Hostile, BankClient, Node) {
    let cluster = Cluster::tcp();
    let (provider, _vault) = cluster.bank("bank-1").await;
    let hostile = Hostile::start(provider.addr(), mode).await;
    let entry = provider.registry().lookup("bank")[0].clone();
    let mut node = entry.node.clone();
    node.addr = hostile.addr;
    cluster
        .registry
        .register(ServiceEntry::new(node, entry.description.clone()))
        .await
        .unwrap();
    let client_node = Node::builder()
        .name("client")
        .registry(cluster.registry.clone())
        .identity(identity("client"))
        .connect_timeout(Duration::from_millis(400))
        .start()
        .await
        .unwrap();
    let client = BankClient::new(&client_node);
    (cluster, provider, hostile, client, client_node)
}

/// Calls until one is answered, within 10 s.
async fn until_answered(client: &BankClient) -> String {
    let started = Instant::now();
    loop {
        match client.balance().timeout(Duration::from_millis(600)).await {
            Ok(answer) => return answer,
            Err(error) if started.elapsed() < Duration::from_secs(10) => {
                let _ = error;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => panic!("the pool never reconnected: {error}"),
        }
    }
}

async fn until_zero(what: &str, count: &AtomicUsize) {
    let started = Instant::now();
    while count.load(Ordering::SeqCst) != 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what}: {} left",
            count.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs `waiters` calls at once, each with `timeout` as its attempt's time and its budget, and cancels `cancelled` more mid-connect;
/// every one that runs must end by its deadline (plus scheduling slack).
async fn storm(client: &BankClient, waiters: usize, cancelled: usize, timeout: Duration) {
    let mut calls = Vec::new();
    for _ in 0..waiters {
        let client = client.clone();
        calls.push(tokio::spawn(async move {
            let started = Instant::now();
            let result = client.balance().timeout(timeout).budget(timeout).await;
            (result.map_err(|e| e.to_string()), started.elapsed())
        }));
    }
    let doomed: Vec<_> = (0..cancelled)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.balance().timeout(timeout).budget(timeout).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(30)).await;
    for call in &doomed {
        call.abort();
    }
    for call in doomed {
        // Cancelled, or ended before the abort (a reset fails the attempt at once).
        if let Err(error) = call.await {
            assert!(error.is_cancelled());
        }
    }
    for call in calls {
        let (result, took) = call.await.unwrap();
        assert!(
            result.is_err(),
            "answered through a hostile peer: {result:?}"
        );
        assert!(
            took <= timeout + Duration::from_millis(300),
            "a waiter answered {took:?} after its start, its timeout {timeout:?}: {result:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_a_handshake_that_never_completes_answer_by_their_deadline_and_the_pool_recovers()
 {
    let (_cluster, _provider, hostile, client, _node) = setup(HOLD).await;
    storm(&client, 60, 30, Duration::from_millis(300)).await;
    // Longer deadlines than the connect timeout: the attempt fails, retries meet new ones.
    storm(&client, 30, 10, Duration::from_millis(900)).await;
    let accepted = hostile.accepted.load(Ordering::SeqCst);
    assert!(
        accepted < 40,
        "130 waiting calls opened {accepted} connections: the attempt is not shared"
    );
    hostile.mode.store(FORWARD, Ordering::SeqCst);
    assert_eq!(until_answered(&client).await, "bank-1");
    // Every held connection was closed by the caller once its attempt ended. (Not the count of
    // the process's file descriptors: the suite's other tests open and close theirs meanwhile.)
    until_zero("held connections still open", &hostile.held_open).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_a_handshake_reset_by_the_peer_answer_and_the_pool_recovers() {
    let (_cluster, _provider, hostile, client, _node) = setup(RESET).await;
    storm(&client, 60, 30, Duration::from_millis(500)).await;
    hostile.mode.store(FORWARD, Ordering::SeqCst);
    assert_eq!(until_answered(&client).await, "bank-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_holds_then_answers_is_reached_by_the_next_call_after_the_attempt_ends() {
    let (_cluster, _provider, hostile, client, _node) = setup(HOLD).await;
    // One call starts the attempt and gives up long before the connect timeout (400 ms).
    let quick = client.balance().timeout(Duration::from_millis(50)).await;
    assert!(quick.is_err());
    hostile.mode.store(FORWARD, Ordering::SeqCst);
    // A call now waits for the held attempt, which ends at its connect timeout, then retries.
    let started = Instant::now();
    let answer = client.balance().timeout(Duration::from_secs(3)).await;
    assert_eq!(answer.unwrap(), "bank-1", "after {:?}", started.elapsed());
}

#[test]
fn the_runtime_shut_down_mid_connect_neither_hangs_nor_panics() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let held = runtime.block_on(async {
        let (cluster, provider, hostile, client, node) = setup(HOLD).await;
        for _ in 0..20 {
            let client = client.clone();
            tokio::spawn(async move { client.balance().timeout(Duration::from_secs(5)).await });
        }
        let started = Instant::now();
        while hostile.accepted.load(Ordering::SeqCst) == 0 {
            assert!(started.elapsed() < Duration::from_secs(10));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (cluster, provider, hostile, client, node)
    });
    let started = std::time::Instant::now();
    runtime.shutdown_timeout(Duration::from_secs(5));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "shutdown took {:?}",
        started.elapsed()
    );
    // What the calls held (the node, its pool with an attempt the shutdown stopped) drops
    // outside any runtime.
    drop(held);
}
