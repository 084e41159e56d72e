//! The caller's dispatch (`calling.rs`, `caller_frames.rs`) and the provider's serving loop
//! (`answering.rs`, `frames.rs`) together, over IO that does not cooperate
//! (`../uncooperative.rs`): short reads and writes down to a byte, spurious `Pending`s, pauses of
//! either side (a reader that stops for up to 3 s), a reset or an end of stream at any byte;
//! random mixes of sizes up to the frame limit, many calls in flight, cancels and deadlines.
//!
//! Every seed checks that:
//! - every call ends (no call waits past its deadline and the frame timeout),
//! - with its own reply, or an error that is true: "not written" and "not sent" only for
//!   requests that never ran, "timeout" only for a call whose deadline was short or whose
//!   connection broke, "lost" only where it broke;
//! - nothing ran twice, and what answered ran once;
//! - nothing outlives its call: no request left waiting or queued on the caller, no handler
//!   running on the provider, no byte counted in its budget.
//!
//! `UNCOOPERATIVE_SEEDS=0..10000` (or `7`, or `1,5,9`) sets the seeds (default `0..200`); a
//! failure names its seed, which replays it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::budget::{Account, Budget, ConnectionLimits};
use super::caller_frames::CallerFrames;
use super::calling::{Calls, Ended};
use super::frames::{FrameLimits, Frames};
use crate::rate_limited::RateLimited;
use crate::security::tls::Tls;
use crate::transport::uncooperative::{Break, Faults, Uncooperative};
use crate::transport::wire::v2::{ReplyFrame, RequestFrame};
use crate::transport::{Reply, Request};

const MAX_FRAME: usize = 256 << 10;
/// A request's or reply's frame beyond its bytes, with room to spare.
const OVERHEAD: usize = 1024;
const FRAME_TIMEOUT: Duration = Duration::from_secs(10);
/// A call whose deadline is this far lives through every pause a seed can draw.
const GENEROUS: Duration = Duration::from_secs(120);

/// One call of a seed's scenario.
#[derive(Debug, Clone)]
struct Plan {
    request: usize,
    reply: usize,
    handler: Duration,
    start: Duration,
    deadline: Duration,
    cancel_after: Option<Duration>,
}

/// What a seed draws.
#[derive(Debug)]
struct Scenario {
    pipe: usize,
    caller: Faults,
    provider: Faults,
    calls: Vec<Plan>,
}

impl Scenario {
    fn draw(seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let pipe = [64, 4 << 10, 64 << 10][rng.usize(..3)];
        let mut caller = Faults::choppy(&mut rng);
        let mut provider = Faults::choppy(&mut rng);
        // A reader that stops for a while: up to 3 s, once (twice in a row, with a heartbeat
        // interval between, would be a silence past the caller's limit: `heartbeat.rs`).
        for side in [&mut caller, &mut provider] {
            if rng.u32(..4) == 0 {
                side.max_pause = Duration::from_millis(rng.u64(100..3000));
                side.pause_per_mille = rng.u32(5..40);
                side.max_pauses = 1;
            }
        }
        // Byte-sized moves of near-limit frames would take long and prove nothing more.
        let small_moves = caller.max_chunk.min(provider.max_chunk) < 64;
        let size = |rng: &mut fastrand::Rng| match rng.u32(..10) {
            0 => 0,
            1..=5 => rng.usize(1..200),
            6..=7 => rng.usize(200..(16 << 10)),
            _ if small_moves => rng.usize(1..(16 << 10)),
            _ => rng.usize((16 << 10)..=MAX_FRAME - OVERHEAD),
        };
        let calls = (0..rng.usize(1..=24))
            .map(|_| Plan {
                request: size(&mut rng),
                reply: size(&mut rng).max(8),
                handler: Duration::from_millis(rng.u64(0..100)),
                start: Duration::from_millis(rng.u64(0..200)),
                deadline: if rng.u32(..10) < 7 {
                    GENEROUS
                } else {
                    Duration::from_millis(rng.u64(0..300))
                },
                cancel_after: (rng.u32(..8) == 0).then(|| Duration::from_millis(rng.u64(0..300))),
            })
            .collect::<Vec<_>>();
        // A break at any byte, on either side, for a quarter of the seeds.
        if rng.u32(..4) == 0 {
            let total: usize = calls.iter().map(|c| c.request + c.reply + 200).sum();
            let at = rng.u64(0..=total as u64);
            let how = if rng.bool() { Break::Reset } else { Break::Eof };
            let side = if rng.bool() {
                &mut caller
            } else {
                &mut provider
            };
            side.break_at = Some((at, how));
        }
        Self {
            pipe,
            caller,
            provider,
            calls,
        }
    }

    fn breaks(&self) -> bool {
        self.caller.break_at.is_some() || self.provider.break_at.is_some()
    }
}

/// A request's arguments: which call it is, the reply it wants and how long its handler takes.
fn args(index: usize, plan: &Plan) -> Vec<u8> {
    let mut args = Vec::with_capacity(plan.request.max(16));
    args.extend((index as u32).to_le_bytes());
    args.extend((plan.reply as u32).to_le_bytes());
    args.extend((plan.handler.as_millis() as u32).to_le_bytes());
    args.resize(plan.request.max(12), 0xAB);
    args
}

fn reply_of(index: usize, len: usize) -> Vec<u8> {
    let mut reply = (index as u32).to_le_bytes().to_vec();
    reply.resize(len, index as u8);
    reply
}

fn word(bytes: &[u8], at: usize) -> usize {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize
}

/// The provider's side: what ran, and the handlers alive now.
#[derive(Default)]
struct Provided {
    runs: Vec<AtomicU32>,
    alive: AtomicUsize,
}

struct Alive(Arc<Provided>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.alive.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The TLS of two nodes of one cluster, made once: `caller-1`'s and `provider-1`'s.
fn tls() -> &'static (Tls, Tls) {
    static TLS: OnceLock<(Tls, Tls)> = OnceLock::new();
    TLS.get_or_init(|| {
        let ca = crate::security::Authority::new("test").unwrap();
        let of = |name| Tls::new(&ca.issue(name).unwrap()).unwrap();
        (of("caller-1"), of("provider-1"))
    })
}

/// Runs one seed; its violations, if any. Odd seeds run mutual TLS over the uncooperative
/// IO, as a secure node does (the IO beneath TLS, as `crate::net::beneath_tls` puts it).
async fn run(seed: u64) -> Vec<String> {
    let scenario = Scenario::draw(seed);
    let tls_on = match std::env::var("UNCOOPERATIVE_TLS").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => !seed.is_multiple_of(2),
    };
    // rustls reads nothing while it has handshake bytes to write: two handshakes whose
    // flights (1.7 kB, with the certificates) do not fit the pipe wait for each other for
    // ever. A socket's buffers always hold a flight (4 KiB at the least, on Linux).
    let pipe = if tls_on {
        scenario.pipe.max(4 << 10)
    } else {
        scenario.pipe
    };
    let (caller_io, provider_io) = tokio::io::duplex(pipe);
    let caller_io = Uncooperative::new(caller_io, scenario.caller.clone(), seed ^ 0xCA11);
    let provider_io = Uncooperative::new(provider_io, scenario.provider.clone(), seed ^ 0x5E4E);
    if !tls_on {
        return exercise(&scenario, caller_io, provider_io).await;
    }
    let (caller, provider) = tls();
    let server_name =
        crate::security::tls::server_name("provider-1", SocketAddr::from(([127, 0, 0, 1], 1)));
    let handshakes = async {
        tokio::join!(
            TlsConnector::from(caller.client.clone()).connect(server_name, caller_io),
            TlsAcceptor::from(provider.server.clone()).accept(provider_io),
        )
    };
    // Every pause a seed draws is over well within this.
    let Ok((caller_io, provider_io)) = tokio::time::timeout(GENEROUS, handshakes).await else {
        return vec!["the TLS handshake never ended".to_owned()];
    };
    match (caller_io, provider_io) {
        (Ok(caller_io), Ok(provider_io)) => exercise(&scenario, caller_io, provider_io).await,
        _ if scenario.breaks() => Vec::new(),
        (caller, provider) => vec![format!(
            "the TLS handshake failed on an IO that does not break: caller {:?}, provider {:?}",
            caller.err(),
            provider.err()
        )],
    }
}

/// The calls of `scenario` from a caller on `caller_io` to a provider on `provider_io`.
async fn exercise<C, P>(scenario: &Scenario, caller_io: C, provider_io: P) -> Vec<String>
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    P: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut violations = Vec::new();

    // The provider, as `serve.rs` serves a wire 2 connection.
    let budget = Budget::new(4 << 20);
    let account = Account::new(
        budget.clone(),
        &super::established::Peer::test(1),
        ConnectionLimits {
            max_in_flight: 64,
            per_connection: 1 << 20,
        },
    );
    let provided: Arc<Provided> = Arc::new(Provided {
        runs: (0..scenario.calls.len())
            .map(|_| AtomicU32::new(0))
            .collect(),
        alive: AtomicUsize::new(0),
    });
    let serving: Arc<OnceLock<AbortHandle>> = Arc::default();
    let frames = Frames::new(
        provider_io,
        SocketAddr::from(([127, 0, 0, 1], 1)),
        account.clone(),
        FrameLimits {
            max_frame: MAX_FRAME,
            frame_timeout: FRAME_TIMEOUT,
            idle_timeout: Duration::from_secs(300),
        },
        Arc::new(RateLimited::default()),
        serving.clone(),
        &[],
    )
    .beating();
    let guarded = super::channel::guard(frames, serving.clone());
    let handler = {
        let (provided, account) = (provided.clone(), account.clone());
        move |_ctx, request: crate::transport::wire::v2::RequestFrame| {
            let (provided, account) = (provided.clone(), account.clone());
            provided.alive.fetch_add(1, Ordering::SeqCst);
            // Made now: a task aborted before its first poll drops it too.
            let alive = Alive(provided.clone());
            async move {
                let _alive = alive;
                let request = request.0;
                let index = word(&request.args, 0);
                provided.runs[index].fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(word(&request.args, 8) as u64)).await;
                let reply = Reply::Done(reply_of(index, word(&request.args, 4)).into());
                if let Some(frame) = request.head.frame_id {
                    account.add_reply(frame, reply.size());
                }
                ReplyFrame(reply)
            }
        }
    };
    let provider = tokio::spawn(super::answering::serve(guarded, handler));
    serving.set(provider.abort_handle()).unwrap();

    // The caller, as `connect.rs` opens a wire 2 connection.
    let (calls, dispatch) = Calls::new(CallerFrames::<
        _,
        _,
        crate::transport::wire::v2::WireResponse,
    >::new(caller_io, MAX_FRAME, FRAME_TIMEOUT));
    let dispatch = tokio::spawn(dispatch.listening_for_heartbeats(super::heartbeat::SILENCE));

    let outcomes = futures::future::join_all(scenario.calls.iter().enumerate().map(|(i, plan)| {
        let calls = calls.clone();
        async move {
            tokio::time::sleep(plan.start).await;
            let deadline = Instant::now() + plan.deadline;
            let request = RequestFrame(Arc::new(Request {
                service: "svc".into(),
                function: "f".into(),
                signature: 0,
                args: args(i, plan).into(),
                head: crate::transport::Head::default(),
                attempt: AtomicU32::new(1),
            }));
            let call = calls.call(request, deadline);
            // Every call ends by its deadline and a frame timeout, whatever the IO does.
            let bound = deadline + FRAME_TIMEOUT * 2;
            match plan.cancel_after {
                Some(after) => {
                    let _ = tokio::time::timeout(after, call).await;
                    None
                }
                None => Some(tokio::time::timeout_at(bound, call).await),
            }
        }
    }))
    .await;

    let breaks = scenario.breaks();
    for (i, (plan, outcome)) in scenario.calls.iter().zip(outcomes).enumerate() {
        let Some(outcome) = outcome else { continue };
        let short = plan.deadline < GENEROUS;
        let said = match &outcome {
            Err(_) => "nothing: it never ended".to_owned(),
            Ok(Ok(_)) => "its reply".to_owned(),
            Ok(Err(e)) => format!("{e:?}"),
        };
        let fine = match outcome {
            Err(_) => false,
            Ok(Ok(Reply::Done(bytes))) => bytes == reply_of(i, plan.reply),
            Ok(Ok(_)) => false,
            Ok(Err(Ended::Timeout | Ended::Unwritten)) => short || breaks,
            Ok(Err(Ended::Lost(_) | Ended::NotSent(_))) => breaks,
            Ok(Err(Ended::Busy(_))) => false,
        };
        if !fine {
            violations.push(format!("call {i} ({plan:?}) ended with {said}"));
        }
    }

    // Cancels written, handlers past their deadlines stopped, replies written.
    tokio::time::sleep(GENEROUS + FRAME_TIMEOUT).await;
    if !dispatch.is_finished() {
        let (waiting, queued) = calls.left();
        if waiting + queued > 0 {
            violations.push(format!(
                "the caller still holds {waiting} calls and {queued} messages to write"
            ));
        }
        let alive = provided.alive.load(Ordering::SeqCst);
        if alive > 0 {
            violations.push(format!("{alive} handlers still run on the provider"));
        }
        if budget.used() > 0 {
            violations.push(format!(
                "the provider still counts {} bytes held for the caller",
                budget.used()
            ));
        }
    }
    dispatch.abort();
    let _ = dispatch.await;
    let _ = provider.await;
    // Aborted handlers are dropped when the scheduler next gets to them.
    tokio::time::sleep(Duration::from_millis(1)).await;
    if provided.alive.load(Ordering::SeqCst) > 0 {
        violations.push("handlers outlived the connection".to_owned());
    }
    drop(account);
    if budget.used() > 0 {
        violations.push(format!(
            "{} bytes still counted after the connection closed",
            budget.used()
        ));
    }
    violations
}

fn seeds() -> Vec<u64> {
    let spec = std::env::var("UNCOOPERATIVE_SEEDS").unwrap_or_else(|_| "0..200".to_owned());
    let num = |s: &str| {
        s.trim()
            .parse::<u64>()
            .expect("UNCOOPERATIVE_SEEDS: numbers")
    };
    if let Some((a, b)) = spec.split_once("..") {
        (num(a)..num(b)).collect()
    } else {
        spec.split(',').map(num).collect()
    }
}

#[test]
fn every_call_ends_once_with_its_own_reply_or_a_true_error_over_io_that_does_not_cooperate() {
    let mut failed = Vec::new();
    let seeds = seeds();
    for &seed in &seeds {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let ran =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime.block_on(run(seed))));
        match ran {
            Ok(violations) if violations.is_empty() => {}
            Ok(violations) => failed.push(format!(
                "seed {seed} ({:?}):\n  {}",
                Scenario::draw(seed),
                violations.join("\n  ")
            )),
            Err(_) => failed.push(format!("seed {seed}: panicked")),
        }
        if failed.len() >= 5 {
            break;
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} seeds failed (replay one with UNCOOPERATIVE_SEEDS=SEED cargo test -p cluster --lib uncooperative_tests):\n{}",
        failed.len(),
        seeds.len(),
        failed.join("\n")
    );
    println!("{} seeds passed", seeds.len());
}
