//! Requests and replies of several MiB on real loopback sockets, through a proxy that stops
//! forwarding for up to 3 s at a time. To the provider, a proxy that stops reading is a caller
//! that stops reading; to the caller, one that stops writing is a provider that does. Every
//! call completes, and the small calls on the same connection meanwhile all succeed.
//!
//! Before e080af7 both loops flushed only in a turn in which they wrote: once a large frame was
//! handed over and the socket was full, its rest waited for another frame that might never
//! come, and the connection died at the 10 s frame timeout with every call on it.
//!
//! The pauses are drawn from a seed, printed; `LARGE_FRAMES_SEED=<seed>` replays a run.
//!
//! The bytes travel as bytes (`serde_bytes`), not as `Vec<u8>`, a MessagePack array: in a
//! debug build, encoding and decoding 8 MiB of those costs over 3 s each way, and the test
//! would be about serde, and too slow.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cluster::registry::{Registry, ServiceEntry};
use cluster::{MemoryRegistry, Node};
use serde_bytes::ByteBuf;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::task::{JoinHandle, JoinSet};

use crate::support::identity;

const MIB: usize = 1 << 20;

/// The sizes of the large arguments and replies. The largest leaves room under the default
/// 8 MiB frame limit for the envelope.
const SIZES: [usize; 4] = [MIB, 2 * MIB, 4 * MIB, 79 * MIB / 10];

/// Pauses in each direction of a connection: a couple, so that the test stays short.
const PAUSES: usize = 2;

const LONGEST_PAUSE: Duration = Duration::from_secs(3);

/// The first bytes of each direction, never paused: the connection's opening (TLS and the
/// handshake, a few KiB) has a timeout of its own (1 s), which a pause there would pass.
const OPENING: u64 = 64 << 10;

/// A call's timeout and budget: room for every pause of both directions at once (4 × 3 s) and
/// the transfer, so that only a stall fails a call. The frame timeout (10 s) is no nearer: at
/// most two pauses (6 s) fall in one frame.
const CALL_TIMEOUT: Duration = Duration::from_secs(25);

/// The proxy's sockets' receive buffers, and what it copies at a time: small, so that a pause
/// soon blocks the writer behind it (the kernel doubles it; the sender's own buffer adds to it).
const PROXY_BUFFER: u32 = 4096;

#[cluster::service(name = "blobs", version = "1.0.0")]
pub trait Blobs {
    /// The bytes back: a large request and a large reply.
    #[call(idempotent)]
    async fn echo(&self, bytes: ByteBuf) -> ByteBuf;
    /// `count` copies of `byte`: a large reply to a small request.
    #[call(idempotent)]
    async fn repeat(&self, byte: u8, count: u32) -> ByteBuf;
}

#[derive(Clone)]
struct Store;

impl Blobs for Store {
    async fn echo(&self, bytes: ByteBuf) -> ByteBuf {
        bytes
    }

    async fn repeat(&self, byte: u8, count: u32) -> ByteBuf {
        ByteBuf::from(vec![byte; count as usize])
    }
}

#[derive(Debug, Clone, Copy)]
enum Security {
    MutualTls,
    Plaintext,
}

#[tokio::test]
async fn large_requests_and_replies_over_mutual_tls_survive_a_pausing_reader() {
    large_calls(Security::MutualTls).await;
}

#[tokio::test]
async fn large_requests_and_replies_in_plaintext_survive_a_pausing_reader() {
    large_calls(Security::Plaintext).await;
}

/// A caller calls `blobs-1` through a pausing proxy, twice over the sizes: alone on the
/// connection, then with small calls alongside.
async fn large_calls(security: Security) {
    let seed = std::env::var("LARGE_FRAMES_SEED").map_or_else(
        |_| fastrand::u64(..),
        |s| s.parse().expect("LARGE_FRAMES_SEED is a number"),
    );
    println!("{security:?}: LARGE_FRAMES_SEED={seed}");
    let started = Instant::now();
    let registry = MemoryRegistry::new();
    let provider = node(security, "blobs-1", &registry).await;
    let _serving = provider.serve(BlobsServer::new(Store)).await.unwrap();
    let caller = node(security, "web-1", &registry).await;

    // The caller reaches blobs-1 only through the proxy: an entry under its name (which its
    // certificate, or its welcome in plaintext, still matches) at the proxy's address, of a
    // later generation, replaces the node's own.
    let requests = 2 * SIZES.iter().sum::<usize>() as u64;
    let spans = Spans {
        to_provider: requests,
        to_caller: 2 * requests,
    };
    let proxy = Proxy::start(provider.addr(), fastrand::Rng::with_seed(seed), spans).await;
    let mut entry = ServiceEntry::clone(&registry.lookup("blobs")[0]);
    entry.node.addr = proxy.addr;
    entry.node.generation += 1;
    registry.register(entry).await.unwrap();
    let seen: Vec<SocketAddr> = caller
        .registry()
        .lookup("blobs")
        .iter()
        .map(|e| e.node.addr)
        .collect();
    assert_eq!(seen, [proxy.addr], "the caller sees blobs-1 at the proxy");

    let client = BlobsClient::new(&caller);
    // Alone: what the bug broke. With nothing else to write, nothing pushed out the rest of a
    // frame that the socket had not taken; a reply waiting behind it would have.
    large_round(&client, seed).await;
    let small = SmallCalls::start(client.clone());
    large_round(&client, seed).await;
    let (ok, failed) = small.finish().await;
    println!(
        "{security:?}: {ok} small calls alongside, {:?} in all",
        started.elapsed()
    );
    assert!(
        failed.is_empty(),
        "small calls failed (seed {seed}): {failed:?}"
    );
    assert!(
        ok >= SmallCalls::STREAMS,
        "too few small calls ran alongside the large ones"
    );
    // One connection carried every call: it never broke to be opened again.
    assert_eq!(proxy.accepted.load(Ordering::SeqCst), 1, "seed {seed}");
    let metrics = caller.render_metrics().expect("the caller keeps metrics");
    assert_eq!(
        value(&metrics, "cluster_outlier_ejections_total"),
        Some(0.0),
        "blobs-1 was ejected (seed {seed})"
    );

    drop(proxy);
    caller.shutdown().await;
    provider.shutdown().await;
}

/// For each size, one at a time, an `echo` (a large request and reply) and a `repeat` (a large
/// reply to a small request); each reply checked byte for byte.
async fn large_round(client: &BlobsClient, seed: u64) {
    for (i, &size) in SIZES.iter().enumerate() {
        let sent = ByteBuf::from(pattern(size));
        let echoed = client
            .echo(sent.clone())
            .no_retry()
            .timeout(CALL_TIMEOUT)
            .budget(CALL_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("echo of {size} bytes (seed {seed}): {e}"));
        assert_same(&echoed, &sent, "echo", seed);

        let byte = b'a' + i as u8;
        let repeated = client
            .repeat(byte, size as u32)
            .no_retry()
            .timeout(CALL_TIMEOUT)
            .budget(CALL_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("repeat of {size} bytes (seed {seed}): {e}"));
        assert_same(&repeated, &vec![byte; size], "repeat", seed);
    }
}

/// A node on loopback with metrics of its own (to read its ejections), secure or not.
async fn node(security: Security, name: &str, registry: &MemoryRegistry) -> Node {
    let builder = Node::builder()
        .name(name)
        .registry(registry.clone())
        .metrics(SocketAddr::from(([127, 0, 0, 1], 0)));
    let builder = match security {
        Security::MutualTls => builder.identity(identity(name)),
        Security::Plaintext => builder.insecure(),
    };
    builder.start().await.expect("node starts")
}

/// `len` bytes of a period (251, a prime) that no buffer size shares, so that a chunk lost,
/// repeated or moved shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// Compares without printing megabytes: the lengths and the first byte that differs.
fn assert_same(got: &[u8], want: &[u8], what: &str, seed: u64) {
    if got != want {
        let first = got.iter().zip(want).position(|(g, w)| g != w);
        panic!(
            "{what}: {} bytes back for {} sent, first difference at {first:?} (seed {seed})",
            got.len(),
            want.len()
        );
    }
}

/// A series' value in Prometheus's text format.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(series)?;
        rest.strip_prefix(' ')?.trim().parse().ok()
    })
}

/// Small `echo`s, in a few streams of one call after another: several wait at once behind a
/// large frame, and run while none is under way. Each has bytes of its own (a reply handed to
/// the wrong call shows) and one attempt (a retry would hide a failure). Their timeout is the
/// large calls': a small reply queued behind a large one waits out the large one's pauses.
struct SmallCalls {
    stop: Arc<AtomicBool>,
    streams: JoinSet<(usize, Vec<String>)>,
}

impl SmallCalls {
    const STREAMS: usize = 4;

    fn start(client: BlobsClient) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let mut streams = JoinSet::new();
        for stream in 0..Self::STREAMS {
            let (client, stop) = (client.clone(), stop.clone());
            streams.spawn(async move {
                let (mut ok, mut failed) = (0, Vec::new());
                while !stop.load(Ordering::SeqCst) {
                    let sent = ByteBuf::from(format!("stream {stream}, call {ok}"));
                    let call = client
                        .echo(sent.clone())
                        .no_retry()
                        .timeout(CALL_TIMEOUT)
                        .budget(CALL_TIMEOUT);
                    match call.await {
                        Ok(echoed) if echoed == sent => ok += 1,
                        Ok(echoed) => failed.push(format!("{echoed:?} back for {sent:?}")),
                        Err(e) => failed.push(e.to_string()),
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                (ok, failed)
            });
        }
        Self { stop, streams }
    }

    /// Stops after the calls under way; the calls that succeeded, and the errors of the rest.
    async fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        let (mut ok, mut failed) = (0, Vec::new());
        for (stream_ok, stream_failed) in self.streams.join_all().await {
            ok += stream_ok;
            failed.extend(stream_failed);
        }
        (ok, failed)
    }
}

/// Over how many bytes of each direction a connection's pauses are spread: about what the
/// calls send that way, so that pauses fall inside the large frames.
#[derive(Debug, Clone, Copy)]
struct Spans {
    to_provider: u64,
    to_caller: u64,
}

/// Forwards each connection it accepts to `target`, in each direction stopping for up to
/// [`LONGEST_PAUSE`] at [`PAUSES`] points drawn from its seed. Stops, with every connection,
/// when dropped.
struct Proxy {
    addr: SocketAddr,
    /// Connections accepted so far.
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Proxy {
    async fn start(target: SocketAddr, mut rng: fastrand::Rng, spans: Spans) -> Self {
        let socket = small_buffered();
        socket.bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        // Accepted sockets take the listener's buffer size.
        let listener = socket.listen(16).unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn({
            let accepted = accepted.clone();
            async move {
                // Dropped with this task: aborts the forwarding of every connection.
                let mut links = JoinSet::new();
                while let Ok((caller, _)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let provider = small_buffered().connect(target).await.unwrap();
                    let (to_provider, to_caller) = (
                        pauses(&mut rng, spans.to_provider),
                        pauses(&mut rng, spans.to_caller),
                    );
                    println!("pauses (at byte, for) to the provider {to_provider:?}");
                    println!("pauses (at byte, for) to the caller {to_caller:?}");
                    let (from_caller, into_caller) = caller.into_split();
                    let (from_provider, into_provider) = provider.into_split();
                    links.spawn(forward(from_caller, into_provider, to_provider));
                    links.spawn(forward(from_provider, into_caller, to_caller));
                }
            }
        });
        Self {
            addr,
            accepted,
            task,
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn small_buffered() -> TcpSocket {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(PROXY_BUFFER).unwrap();
    socket
}

/// [`PAUSES`] pauses within the first `span` bytes past the opening, in the order of their
/// place.
fn pauses(rng: &mut fastrand::Rng, span: u64) -> VecDeque<(u64, Duration)> {
    let longest = LONGEST_PAUSE.as_millis() as u64;
    let mut pauses: Vec<_> = (0..PAUSES)
        .map(|_| {
            (
                rng.u64(OPENING..span),
                Duration::from_millis(rng.u64(..=longest)),
            )
        })
        .collect();
    pauses.sort();
    pauses.into()
}

/// Copies `from` to `to`, stopping for each pause when its byte is reached: nothing is read
/// meanwhile, so the writer behind it blocks once the buffers between are full.
async fn forward(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut pauses: VecDeque<(u64, Duration)>,
) {
    let mut buffer = vec![0; PROXY_BUFFER as usize];
    let mut passed = 0u64;
    loop {
        while let Some(&(at, pause)) = pauses.front()
            && at <= passed
        {
            tokio::time::sleep(pause).await;
            pauses.pop_front();
        }
        // Not past the next pause's byte.
        let room = pauses.front().map_or(buffer.len(), |&(at, _)| {
            buffer.len().min((at - passed) as usize)
        });
        let read = match from.read(&mut buffer[..room]).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
        passed += read as u64;
    }
    // The other side sees the end this side saw.
    let _ = to.shutdown().await;
}
