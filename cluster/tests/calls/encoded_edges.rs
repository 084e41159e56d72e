//! Adversarial tests of a2a5911: values around `Encoded::INLINE` (94 bytes) on real loopback
//! nodes (plaintext and mutual TLS, wire 1 and wire 2), answered at once, after a wait, from the
//! record of at-most-once calls, hedged; and handlers that panic at their first step, later, in
//! the drop of their return value or of their future, all at once on one connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cluster::{CallError, MemoryRegistry, Node, RpcErrorKind};
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;

use crate::support::identity;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    pub name: String,
    pub tags: Vec<String>,
    pub n: u64,
}

/// A value whose drop panics on the provider (armed is never sent).
#[derive(Debug, Serialize, Deserialize)]
pub struct Grenade {
    pub bytes: ByteBuf,
    #[serde(skip)]
    pub armed: bool,
}

impl Drop for Grenade {
    fn drop(&mut self) {
        if self.armed && !std::thread::panicking() {
            panic!("a return value's drop panics");
        }
    }
}

/// Panics when dropped unless disarmed: held across an await, it makes the handler's future's
/// drop panic when it is cancelled.
struct Tripwire(bool);
impl Drop for Tripwire {
    fn drop(&mut self) {
        if self.0 && !std::thread::panicking() {
            panic!("a handler's future's drop panics");
        }
    }
}

#[cluster::service(
    name = "edges",
    version = "1.0.0",
    // Generous: on sockets that do not cooperate (CI's run of this suite), under load, a call
    // near the frame limit takes seconds; the tests that want a timeout set their own.
    timeout = "60s",
    retry(after = "20ms", budget = "120s", jitter = false)
)]
pub trait Edges {
    #[call(idempotent)]
    async fn bytes(&self, bytes: ByteBuf, wait_ms: u64) -> ByteBuf;
    #[call(idempotent)]
    async fn text(&self, text: String, wait_ms: u64) -> String;
    #[call(idempotent)]
    async fn shape(&self, shape: Shape) -> Shape;
    #[call(idempotent)]
    async fn fails(&self, len: u32, wait_ms: u64) -> Result<String, String>;
    #[call(idempotent)]
    async fn repeat(&self, len: u32) -> ByteBuf;
    #[call(idempotent)]
    async fn nothing(&self) -> ();
    #[call(idempotent)]
    async fn panics_now(&self, len: u32) -> ByteBuf;
    #[call(idempotent)]
    async fn panics_later(&self, len: u32) -> ByteBuf;
    #[call(idempotent)]
    async fn grenade(&self, len: u32, wait_ms: u64) -> Grenade;
    /// Waits `wait_ms` holding a tripwire: cancelled by the caller's deadline, its future's
    /// drop panics. Finishing disarms it.
    #[call(idempotent)]
    async fn tripwire(&self, wait_ms: u64) -> u32;
    #[call(at_most_once, timeout = "300ms")]
    async fn once(&self, len: u32, wait_ms: u64) -> ByteBuf;
    #[call(idempotent, hedge(after = "20ms", max = 1))]
    async fn hedged(&self, len: u32, wait_ms: u64) -> ByteBuf;
    /// Served by [`Bombs`], by hand: a future whose drop panics (mode 0: ready at its first
    /// poll; 1: ready after 20 ms; 2: never ready, so dropped when its deadline stops it).
    #[call(idempotent)]
    async fn bomb(&self, mode: u8) -> u32;
}

#[derive(Default)]
pub struct Impl {
    pub once_ran: AtomicUsize,
}

async fn wait(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

impl Edges for Arc<Impl> {
    async fn bytes(&self, bytes: ByteBuf, wait_ms: u64) -> ByteBuf {
        wait(wait_ms).await;
        bytes
    }
    async fn text(&self, text: String, wait_ms: u64) -> String {
        wait(wait_ms).await;
        text
    }
    async fn shape(&self, shape: Shape) -> Shape {
        shape
    }
    async fn fails(&self, len: u32, wait_ms: u64) -> Result<String, String> {
        wait(wait_ms).await;
        Err("e".repeat(len as usize))
    }
    async fn repeat(&self, len: u32) -> ByteBuf {
        ByteBuf::from(vec![0xA5; len as usize])
    }
    async fn nothing(&self) {}
    async fn panics_now(&self, len: u32) -> ByteBuf {
        if len < u32::MAX {
            panic!("panics before its first await");
        }
        ByteBuf::new()
    }
    async fn panics_later(&self, len: u32) -> ByteBuf {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if len < u32::MAX {
            panic!("panics after an await");
        }
        ByteBuf::new()
    }
    async fn grenade(&self, len: u32, wait_ms: u64) -> Grenade {
        wait(wait_ms).await;
        Grenade {
            bytes: ByteBuf::from(vec![1; len as usize]),
            armed: true,
        }
    }
    async fn tripwire(&self, wait_ms: u64) -> u32 {
        let mut wire = Tripwire(true);
        wait(wait_ms).await;
        wire.0 = false;
        7
    }
    async fn once(&self, len: u32, wait_ms: u64) -> ByteBuf {
        self.once_ran.fetch_add(1, Ordering::SeqCst);
        wait(wait_ms).await;
        ByteBuf::from(vec![0x5A; len as usize])
    }
    async fn hedged(&self, len: u32, wait_ms: u64) -> ByteBuf {
        wait(wait_ms).await;
        ByteBuf::from(vec![0x3C; len as usize])
    }
    async fn bomb(&self, _mode: u8) -> u32 {
        unreachable!("served by Bombs")
    }
}

/// A future that the dispatcher's catch does not cover: its drop panics.
struct DropBomb {
    mode: u8,
    sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl std::future::Future for DropBomb {
    type Output = Result<cluster::service::Encoded, cluster::DispatchError>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match self.mode {
            0 => {}
            2 => return std::task::Poll::Pending,
            _ => {
                let sleep = self
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::from_millis(20))));
                if sleep.as_mut().poll(cx).is_pending() {
                    return std::task::Poll::Pending;
                }
            }
        }
        std::task::Poll::Ready(Ok(cluster::service::encode_value(&7u32).unwrap()))
    }
}

impl Drop for DropBomb {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("a dispatched future's drop panics (mode {})", self.mode);
        }
    }
}

/// `EdgesServer`, but `bomb` is a [`DropBomb`].
pub struct Bombs(EdgesServer<Arc<Impl>>);

impl cluster::Provide for Bombs {
    fn description(&self) -> &'static cluster::ServiceDescription {
        cluster::Provide::description(&self.0)
    }
    fn dispatch(&self, function: usize, args: &[u8]) -> cluster::DispatchFuture {
        let name = &cluster::Provide::description(&self.0).functions[function].name;
        if name == "bomb" {
            let (mode,): (u8,) = cluster::service::decode(args).unwrap();
            return Box::pin(DropBomb { mode, sleep: None });
        }
        cluster::Provide::dispatch(&self.0, function, args)
    }
}

#[derive(Debug, Clone, Copy)]
pub enum Sec {
    Tls,
    Plain,
}

async fn node(
    sec: Sec,
    name: &str,
    registry: &MemoryRegistry,
    wire: std::ops::RangeInclusive<u32>,
    max_frame: Option<usize>,
) -> Node {
    let b = Node::builder()
        .name(name)
        .registry(registry.clone())
        .wire_versions(wire);
    let b = match sec {
        Sec::Tls => b.identity(identity(name)),
        Sec::Plain => b.insecure(),
    };
    let b = match max_frame {
        Some(m) => b.max_frame(m),
        None => b,
    };
    b.start().await.expect("node starts")
}

async fn pair(
    sec: Sec,
    caller_wire: std::ops::RangeInclusive<u32>,
    provider_wire: std::ops::RangeInclusive<u32>,
    max_frame: Option<usize>,
) -> (Node, Node, EdgesClient, Arc<Impl>) {
    let registry = MemoryRegistry::new();
    let provider = node(sec, "edges-1", &registry, provider_wire, max_frame).await;
    let imp = Arc::new(Impl::default());
    let reg = provider
        .serve(Bombs(EdgesServer::new(imp.clone())))
        .await
        .unwrap();
    std::mem::forget(reg);
    let caller = node(sec, "web-1", &registry, caller_wire, max_frame).await;
    let client = EdgesClient::new(&caller);
    (provider, caller, client, imp)
}

/// Sizes of a value's payload such that its MessagePack (args tuple or return value) lands
/// on every length from 0 to 200, and a few large ones.
/// The sizes around every bound of the inline bytes and of MessagePack's length fields.
fn small_sizes() -> Vec<usize> {
    let mut s: Vec<usize> = (0..=200).collect();
    s.extend([255, 256, 257]);
    s
}

/// The sizes past 4 KiB: slow on sockets that do not cooperate, where CI's run of this suite
/// skips them (`--skip large_frames`).
fn large_sizes() -> Vec<usize> {
    vec![4095, 4096, 65535, 65536, 65537, (64 << 10) + 94]
}

async fn round(client: &EdgesClient, wait_ms: u64, sizes: Vec<usize>) {
    for n in sizes {
        let b = vec![(n % 251) as u8; n];
        let back = client.bytes(ByteBuf::from(b.clone()), wait_ms).await;
        assert_eq!(back.expect("bytes").into_vec(), b, "bytes of {n}");
        let t = "x".repeat(n);
        let back = client.text(t.clone(), wait_ms).await.expect("text");
        assert_eq!(back, t, "text of {n}");
        match client.fails(n as u32, wait_ms).await {
            Err(CallError::App { error, .. }) => assert_eq!(error, "e".repeat(n), "an Err of {n}"),
            other => panic!("an Err of {n}: {other:?}"),
        }
        let r = client.repeat(n as u32).await.expect("repeat");
        assert_eq!(r.len(), n);
        assert!(r.iter().all(|&x| x == 0xA5));
        if n <= 200 {
            let shape = Shape {
                name: "s".repeat(n / 2),
                tags: vec!["t".repeat(n / 4); n % 5],
                n: n as u64 * 0x1_0000_0001,
            };
            assert_eq!(client.shape(shape.clone()).await.unwrap(), shape);
        }
    }
    client.nothing().await.expect("unit");
}

macro_rules! matrix {
    ($($name:ident, $large:ident: $sec:expr, $cw:expr, $pw:expr, $wait:expr;)*) => {$(
        #[tokio::test]
        async fn $name() {
            let (_p, _c, client, _) = pair($sec, $cw, $pw, None).await;
            round(&client, $wait, small_sizes()).await;
        }

        #[tokio::test]
        async fn $large() {
            let (_p, _c, client, _) = pair($sec, $cw, $pw, None).await;
            round(&client, $wait, large_sizes()).await;
        }
    )*};
}

matrix! {
    sizes_plain_wire2_at_once, large_frames_sizes_plain_wire2_at_once: Sec::Plain, 2..=2, 1..=2, 0;
    sizes_plain_wire1_at_once, large_frames_sizes_plain_wire1_at_once: Sec::Plain, 1..=1, 1..=2, 0;
    sizes_tls_wire2_at_once, large_frames_sizes_tls_wire2_at_once: Sec::Tls, 2..=2, 1..=2, 0;
    sizes_plain_wire2_waits, large_frames_sizes_plain_wire2_waits: Sec::Plain, 2..=2, 1..=2, 1;
    sizes_plain_wire1_waits, large_frames_sizes_plain_wire1_waits: Sec::Plain, 1..=1, 1..=1, 1;
    sizes_tls_wire2_waits, large_frames_sizes_tls_wire2_waits: Sec::Tls, 2..=2, 2..=2, 1;
}

/// Near the frame limit: just under it answers, just over it fails with a typed error, and the
/// connection serves on.
async fn near_limit(sec: Sec, wire: std::ops::RangeInclusive<u32>) {
    const LIMIT: usize = 256 << 10;
    let (_p, _c, client, _) = pair(sec, wire.clone(), wire, Some(LIMIT)).await;
    let mut largest_ok = 0;
    let mut first_fail = None;
    let mut slowest = Duration::ZERO;
    for n in (LIMIT - 2048..LIMIT + 16).step_by(16) {
        let started = std::time::Instant::now();
        let r = client
            .bytes(ByteBuf::from(vec![9; n]), 0)
            .timeout(Duration::from_secs(30))
            .budget(Duration::from_secs(60))
            .await;
        slowest = slowest.max(started.elapsed());
        match r {
            Ok(b) => {
                assert_eq!(b.len(), n);
                largest_ok = n;
            }
            Err(e) => {
                first_fail.get_or_insert(n);
                let CallError::Rpc(r) = &e else {
                    panic!("{n}: {e}")
                };
                assert!(
                    matches!(
                        r.kind(),
                        RpcErrorKind::TooLarge | RpcErrorKind::ReplyTooLarge
                    ),
                    "{n}: {:?} {e}",
                    r.kind()
                );
            }
        }
        assert_eq!(client.text("ok".into(), 0).await.unwrap(), "ok");
    }
    println!("{sec:?}: largest ok {largest_ok}, first failure {first_fail:?}, slowest {slowest:?}");
    assert!(largest_ok > LIMIT - 2048 && first_fail.is_some());
    // Replies too: a large reply to a small request.
    for n in (LIMIT - 2048..LIMIT + 16).step_by(16) {
        let _ = client.repeat(n as u32).await;
        assert_eq!(client.text("ok".into(), 0).await.unwrap(), "ok");
    }
}

/// At-most-once: the first attempt times out (300 ms) while the handler runs 500 ms; the retry
/// is answered from the record, with the value intact at every size around the record's and
/// Encoded's inline bounds.
async fn recalled(sec: Sec, wire: std::ops::RangeInclusive<u32>) {
    let (_p, _c, client, imp) = pair(sec, wire.clone(), wire, None).await;
    for n in [
        0usize, 1, 19, 20, 21, 22, 23, 24, 90, 91, 92, 93, 94, 95, 96, 188, 4096,
    ] {
        let before = imp.once_ran.load(Ordering::SeqCst);
        let (v, report) = client
            .once(n as u32, 500)
            .reported()
            .await
            .unwrap_or_else(|e| panic!("{n}: {e}"));
        assert_eq!(v.len(), n, "recalled value of {n}");
        assert!(v.iter().all(|&b| b == 0x5A));
        assert_eq!(imp.once_ran.load(Ordering::SeqCst), before + 1, "ran once");
        assert!(
            report.attempts.iter().any(|a| a.outcome.contains("record")),
            "{n}: {:?}",
            report.attempts
        );
    }
}

/// Hedged calls (two replicas): the same request sent twice, sizes around the bound.
#[tokio::test]
async fn hedged_around_the_bound() {
    let registry = MemoryRegistry::new();
    let mut keep = vec![];
    for name in ["edges-1", "edges-2"] {
        let p = node(Sec::Plain, name, &registry, 1..=2, None).await;
        let r = p
            .serve(EdgesServer::new(Arc::new(Impl::default())))
            .await
            .unwrap();
        std::mem::forget(r);
        keep.push(p);
    }
    let caller = node(Sec::Plain, "web-1", &registry, 1..=2, None).await;
    let client = EdgesClient::new(&caller);
    for n in [0usize, 93, 94, 95, 96, 188, 70000] {
        let (v, report) = client.hedged(n as u32, 60).reported().await.unwrap();
        assert_eq!(v.len(), n);
        assert!(report.attempts.len() >= 2, "{:?}", report.attempts);
    }
}

/// Every kind of handler at once on one connection: each call gets its own answer.
async fn mixed(sec: Sec, wire: std::ops::RangeInclusive<u32>) {
    let (_p, _c, client, _) = pair(sec, wire.clone(), wire, None).await;
    let mut set = tokio::task::JoinSet::new();
    for i in 0..300u32 {
        let c = client.clone();
        set.spawn(async move {
            let n = [0u32, 1, 93, 94, 95, 96, 188, 5000][(i % 8) as usize];
            match i % 9 {
                0 => {
                    let b = c
                        .bytes(ByteBuf::from(vec![3; n as usize]), 0)
                        .no_retry()
                        .await;
                    assert_eq!(b.expect("at once").len(), n as usize);
                }
                1 => {
                    let b = c
                        .bytes(ByteBuf::from(vec![3; n as usize]), 20)
                        .no_retry()
                        .await;
                    assert_eq!(b.expect("waits").len(), n as usize);
                }
                2 => {
                    let e = c.panics_now(n).no_retry().await.expect_err("panics");
                    assert!(e.to_string().contains("panic"), "{e}");
                }
                3 => {
                    let e = c.panics_later(n).no_retry().await.expect_err("panics");
                    assert!(e.to_string().contains("panic"), "{e}");
                }
                4 | 5 => {
                    // The drop of the return value panics, at once or after a wait: answered
                    // as a panic or with the value; anything but silence.
                    let wait = if i % 9 == 4 { 0 } else { 10 };
                    let r = c
                        .grenade(n, wait)
                        .no_retry()
                        .timeout(Duration::from_secs(60))
                        .await;
                    if let Err(e) = &r {
                        assert!(
                            !e.to_string().contains("timeout")
                                && !e.to_string().contains("timed out"),
                            "grenade after {wait} ms: {e}"
                        );
                    }
                }
                6 => {
                    // Cancelled by its deadline while waiting: its future's drop panics.
                    let e = c
                        .tripwire(10_000)
                        .no_retry()
                        .timeout(Duration::from_millis(150))
                        .await
                        .expect_err("times out");
                    let CallError::Rpc(r) = &e else { panic!("{e}") };
                    // On a backlogged connection (uncooperative IO) it may not get sent.
                    assert!(
                        matches!(r.kind(), RpcErrorKind::Timeout | RpcErrorKind::NoConnection),
                        "{e}"
                    );
                }
                7 => match c.fails(n, 0).no_retry().await {
                    Err(CallError::App { error, .. }) => assert_eq!(error, "e".repeat(n as usize)),
                    other => panic!("{other:?}"),
                },
                _ => {
                    assert_eq!(c.tripwire(0).no_retry().await.expect("finishes"), 7);
                }
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("every call got its own answer");
    }
    // Still serving, on the same connection or another.
    assert_eq!(client.text("after".into(), 0).await.unwrap(), "after");
}

/// Futures whose drop panics outside the dispatcher's catch, at their first poll (the
/// connection's slot), later (their task) and when stopped by their deadline, among ordinary
/// calls on one connection: each ends alone, every other call is answered.
async fn bombs(sec: Sec, wire: std::ops::RangeInclusive<u32>) {
    let (_p, _c, client, _) = pair(sec, wire.clone(), wire, None).await;
    // The connection, opened.
    assert_eq!(client.text("first".into(), 0).await.unwrap(), "first");
    let mut set = tokio::task::JoinSet::new();
    for i in 0..300u32 {
        let c = client.clone();
        set.spawn(async move {
            if i % 10 < 3 {
                let mode = (i % 10) as u8;
                let r = c
                    .bomb(mode)
                    .no_retry()
                    .timeout(Duration::from_millis(400))
                    .await;
                (Some(mode), r.map_err(|e| e.to_string()))
            } else {
                let n = (i as usize * 7) % 200;
                let b = c
                    .bytes(ByteBuf::from(vec![1; n]), u64::from(i % 2))
                    .no_retry()
                    .await
                    .unwrap_or_else(|e| panic!("an ordinary call {i} failed: {e}"));
                assert_eq!(b.len(), n);
                (None, Ok(0))
            }
        });
    }
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    while let Some(r) = set.join_next().await {
        let (mode, r) = r.expect("no test task panics");
        if let Some(mode) = mode {
            *outcomes.entry(format!("mode {mode}: {r:?}")).or_default() += 1;
        }
    }
    println!("{sec:?} {outcomes:#?}");
    assert_eq!(client.text("after".into(), 0).await.unwrap(), "after");
}

/// Deadlines that pass during a handler's first step or just after, on every kind of handler,
/// and the node's describe request on the same connection: typed errors, and the connection
/// serves on.
async fn tiny_deadlines(sec: Sec, wire: std::ops::RangeInclusive<u32>) {
    let (p, c, client, _) = pair(sec, wire.clone(), wire.clone(), None).await;
    assert_eq!(client.text("open".into(), 0).await.unwrap(), "open");
    let mut set = tokio::task::JoinSet::new();
    for i in 0..400u32 {
        let c = client.clone();
        set.spawn(async move {
            let t = Duration::from_micros(u64::from(i % 7) * 700);
            let n = [0u32, 93, 94, 95, 200][(i % 5) as usize];
            let r = match i % 6 {
                0 => c
                    .bytes(ByteBuf::from(vec![2; n as usize]), 0)
                    .timeout(t)
                    .no_retry()
                    .await
                    .map(|_| ()),
                1 => c
                    .bytes(ByteBuf::from(vec![2; n as usize]), 2)
                    .timeout(t)
                    .no_retry()
                    .await
                    .map(|_| ()),
                2 => c.panics_now(n).timeout(t).no_retry().await.map(|_| ()),
                3 => c.panics_later(n).timeout(t).no_retry().await.map(|_| ()),
                4 => c.tripwire(3).timeout(t).no_retry().await.map(|_| ()),
                _ => c
                    .bomb((i % 3) as u8)
                    .timeout(t)
                    .no_retry()
                    .await
                    .map(|_| ()),
            };
            if let Err(e) = r {
                let (CallError::Service(_) | CallError::Rpc(_)) = &e else {
                    panic!("{e}")
                };
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("no test task panics");
    }
    if wire.contains(&2) {
        let described = c
            .describe_peer(p.addr(), Duration::from_secs(2))
            .await
            .expect("described");
        let text = format!("{described:?}");
        assert!(text.contains("edges"), "{text}");
    }
    for n in [0usize, 94, 95] {
        let b = client.bytes(ByteBuf::from(vec![5; n]), 0).await.unwrap();
        assert_eq!(b.len(), n);
    }
}

/// One test of each scenario per transport: plaintext on wire 1 and 2, mutual TLS on wire 2.
macro_rules! on_each_transport {
    ($($scenario:ident => { $($name:ident: $sec:expr, $wire:expr;)* })*) => {$($(
        #[tokio::test]
        async fn $name() {
            $scenario($sec, $wire).await;
        }
    )*)*};
}

on_each_transport! {
    near_limit => {
        large_frames_near_the_limit_plain_wire2: Sec::Plain, 2..=2;
        large_frames_near_the_limit_tls_wire2: Sec::Tls, 2..=2;
        large_frames_near_the_limit_plain_wire1: Sec::Plain, 1..=1;
    }
    recalled => {
        recalled_replies_plain_wire2: Sec::Plain, 2..=2;
        recalled_replies_tls_wire2: Sec::Tls, 2..=2;
    }
    mixed => {
        mixed_handlers_on_one_connection_plain_wire2: Sec::Plain, 2..=2;
        mixed_handlers_on_one_connection_tls_wire2: Sec::Tls, 2..=2;
        mixed_handlers_on_one_connection_plain_wire1: Sec::Plain, 1..=1;
    }
    bombs => {
        futures_whose_drop_panics_end_alone_plain_wire2: Sec::Plain, 2..=2;
        futures_whose_drop_panics_end_alone_plain_wire1: Sec::Plain, 1..=1;
        futures_whose_drop_panics_end_alone_tls_wire2: Sec::Tls, 2..=2;
    }
    tiny_deadlines => {
        tiny_deadlines_plain_wire2: Sec::Plain, 2..=2;
        tiny_deadlines_tls_wire2: Sec::Tls, 2..=2;
        tiny_deadlines_plain_wire1: Sec::Plain, 1..=1;
    }
}
