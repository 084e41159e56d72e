//! The abuse suite (issue 11): each test attacks one real `cluster-node` process over real
//! sockets on loopback, measures the victim from outside (`VmRSS`, `VmHWM` from
//! `/proc/<pid>/status`, open descriptors from `/proc/<pid>/fd`), and ends with a legitimate
//! call from a real `cluster::Node`, which must succeed in its stated time. The node runs with
//! its default settings throughout; only how the process is run changes (TLS or `--insecure`,
//! `RUST_LOG`, where its output goes, `ulimit -n`).
//!
//! Run it with the figures printed (one line per measurement, `row N |` first):
//!
//! ```text
//! cargo test -p examples --test abuse -- --nocapture
//! ```
//!
//! `ABUSE_NODE_BIN=path/to/cluster-node` runs the same attacks against another build.
//!
//! A test checks everything it measured before it fails, and fails with the figures; every wait
//! has a bound, and no test takes more than about 30 s.

mod abuse {
    pub(crate) mod raw;
    pub(crate) mod victim;
}

use std::future::IntoFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use abuse::raw::{self, Call, Deadline, Reply};
use abuse::victim::{ATTACKER, Legit, Setup, Stderr, Victim};

/// The bound on the victim's resident memory under every memory attack.
const RSS_LIMIT: u64 = 100 << 20;

/// How much the victim may grow over its baseline under an attack.
const RSS_GROWTH_LIMIT: u64 = 64 << 20;

/// The time a legitimate call has, during or after an attack.
const LEGIT_LIMIT: Duration = Duration::from_secs(1);

/// The time the first call to a victim has, before any attack (a fresh debug-build process).
const WARM_UP_LIMIT: Duration = Duration::from_secs(5);

/// The node's default frame timeout (`NodeBuilder::frame_timeout`): a frame begun and not
/// finished closes its connection after this long.
const FRAME_TIMEOUT: Duration = Duration::from_secs(10);

/// What the frame timeout may overrun by on a loaded machine.
const FRAME_TIMEOUT_SLACK: Duration = Duration::from_secs(3);

/// The node's default bound on connections (`NodeBuilder::max_connections`).
const MAX_CONNECTIONS: usize = 1024;

/// Descriptors a node holds besides its connections: listener, gossip socket, epoll, pipes.
const OWN_FDS: usize = 64;

/// How long one attacker's connection may take to open (and say what it says first). Past the
/// listen backlog a connect waits for SYN retries; a victim that stalls a handshake is counted.
const ATTEMPT_LIMIT: Duration = Duration::from_secs(2);

/// How long the log flood of the pipe tests may go on.
const FLOOD_TIME: Duration = Duration::from_secs(10);

/// How long an attack that writes as fast as the victim reads may go on.
const ATTACK_TIME: Duration = Duration::from_secs(15);

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// What a test found wrong, all said at its end with the figures.
#[derive(Default)]
struct Failures(Vec<String>);

impl Failures {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.0.push(what());
        }
    }

    /// Checks a legitimate call: it succeeded within [`LEGIT_LIMIT`].
    fn legit(&mut self, row: &str, when: &str, outcome: &Result<Duration, String>) {
        match outcome {
            Ok(took) => eprintln!("{row} | legit call {when}: ok in {took:?}"),
            Err(e) => {
                eprintln!("{row} | legit call {when}: FAILED: {e}");
                self.0.push(format!("the legitimate call {when}: {e}"));
            }
        }
    }

    /// Checks the victim's memory against [`RSS_LIMIT`] and [`RSS_GROWTH_LIMIT`].
    fn memory(&mut self, row: &str, victim: &Victim, baseline: u64) {
        let (now, peak) = (victim.rss(), victim.peak_rss());
        eprintln!(
            "{row} | RSS baseline {:.1} MiB, now {:.1} MiB, peak {:.1} MiB (growth {:.1} MiB)",
            mib(baseline),
            mib(now),
            mib(peak),
            mib(peak.saturating_sub(baseline))
        );
        self.check(peak < RSS_LIMIT, || {
            format!(
                "peak RSS {:.1} MiB, over {:.0} MiB",
                mib(peak),
                mib(RSS_LIMIT)
            )
        });
        self.check(peak.saturating_sub(baseline) <= RSS_GROWTH_LIMIT, || {
            format!(
                "RSS grew {:.1} MiB over its baseline {:.1} MiB, more than {:.0} MiB",
                mib(peak.saturating_sub(baseline)),
                mib(baseline),
                mib(RSS_GROWTH_LIMIT)
            )
        });
    }

    /// Checks the victim's stderr for a panic.
    fn no_panic(&mut self, victim: &mut Victim) {
        let stderr = victim.stderr();
        self.check(!stderr.contains("panicked"), || {
            format!("the victim panicked: {stderr}")
        });
        let alive = victim.alive();
        self.check(alive, || format!("the victim died: {stderr}"));
    }

    fn finish(self, row: &str) {
        assert!(
            self.0.is_empty(),
            "{row}: {} problem(s):\n  {}",
            self.0.len(),
            self.0.join("\n  ")
        );
    }
}

/// A victim that answered a first legitimate call, and its resident memory after it.
async fn warmed(setup: Setup) -> (Victim, u64) {
    let victim = Victim::start(setup);
    let legit = Legit::new(&victim).await;
    legit
        .greet(WARM_UP_LIMIT)
        .await
        .expect("the victim answers before any attack");
    legit.stop().await;
    let baseline = victim.rss();
    (victim, baseline)
}

/// The victim's descriptors once they stop changing (the node accepts in its own time), at
/// most `limit` from now.
async fn settled_fds(victim: &Victim, limit: Duration) -> usize {
    let start = Instant::now();
    let mut last = victim.fds();
    let mut same = 0;
    while start.elapsed() < limit && same < 5 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = victim.fds();
        same = if now == last { same + 1 } else { 0 };
        last = now;
    }
    last
}

/// `n` connections opened `concurrent` at a time, each by `open` given [`ATTEMPT_LIMIT`], all
/// within `limit`; those that opened.
async fn open_many<S, F, Fut>(n: usize, concurrent: usize, limit: Duration, open: F) -> Vec<S>
where
    S: Send + 'static,
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = std::io::Result<S>> + Send + 'static,
{
    let open = Arc::new(open);
    let next = Arc::new(AtomicUsize::new(0));
    let deadline = tokio::time::Instant::now() + limit;
    let workers: Vec<_> = (0..concurrent)
        .map(|_| {
            let (open, next) = (open.clone(), next.clone());
            tokio::spawn(async move {
                let mut opened = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let attempt = deadline.min(tokio::time::Instant::now() + ATTEMPT_LIMIT);
                    match tokio::time::timeout_at(attempt, open(i)).await {
                        Ok(Ok(stream)) => opened.push(stream),
                        Ok(Err(_)) => {}
                        Err(_) if attempt == deadline => break,
                        Err(_) => {}
                    }
                }
                opened
            })
        })
        .collect();
    let mut all = Vec::new();
    for worker in workers {
        all.extend(worker.await.unwrap());
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row00_the_raw_client_speaks_the_wire_in_plaintext_and_over_tls() {
    let row = "row 0";
    let victim = Victim::start(Setup::default());
    let mut io = raw::connect(victim.rpc).await.unwrap();
    let welcome = raw::handshake(&mut io, ATTACKER).await.unwrap();
    assert_eq!(welcome.node, "victim");
    let reply = raw::call(&mut io, &Call::greet(1, "raw"), WARM_UP_LIMIT)
        .await
        .unwrap();
    let greeting = reply.greeting().unwrap_or_else(|| panic!("{reply:?}"));
    assert_eq!(greeting.text, "hello, raw");
    eprintln!("{row} | plaintext: {greeting:?}");

    let victim = Victim::start(Setup {
        secure: true,
        ..Setup::default()
    });
    let tls = raw::tls_connector(victim.certs().dir(), ATTACKER);
    let mut io = raw::connect_tls(&tls, victim.rpc, "victim").await.unwrap();
    raw::handshake(&mut io, ATTACKER).await.unwrap();
    let reply = raw::call(&mut io, &Call::greet(1, "tls"), WARM_UP_LIMIT)
        .await
        .unwrap();
    let greeting = reply.greeting().unwrap_or_else(|| panic!("{reply:?}"));
    assert_eq!(greeting.text, "hello, tls");
    eprintln!("{row} | TLS, a compromised peer: {greeting:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row01_one_connection_sends_20000_requests_of_60_kb_and_never_reads_a_reply() {
    let row = "row 1";
    let (mut victim, baseline) = warmed(Setup::default()).await;
    let mut failures = Failures::default();
    let mut io = raw::connect(victim.rpc).await.unwrap();
    raw::handshake(&mut io, ATTACKER).await.unwrap();
    let template = Call {
        args: cluster::service::encode(&("x".repeat(60 << 10),)).unwrap(),
        ..Call::greet(0, "")
    };
    const REQUESTS: u64 = 20_000;
    let sent = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let writer = tokio::spawn({
        let sent = sent.clone();
        async move {
            let deadline = tokio::time::Instant::now() + ATTACK_TIME;
            let mut outcome = "all sent".to_owned();
            for id in 0..REQUESTS {
                let frame = Call {
                    id,
                    ..template.clone()
                }
                .frame();
                match tokio::time::timeout_at(deadline, io.write_all(&frame)).await {
                    Ok(Ok(())) => sent.fetch_add(1, Ordering::Relaxed),
                    Ok(Err(e)) => {
                        outcome = format!("the victim closed the connection: {e}");
                        break;
                    }
                    Err(_) => {
                        outcome = format!("the victim stopped reading (held for {ATTACK_TIME:?})");
                        break;
                    }
                };
            }
            (io, outcome)
        }
    });
    // Midway: a new caller while the attacker is still writing.
    while sent.load(Ordering::Relaxed) < 5_000 && !writer.is_finished() {
        if start.elapsed() > ATTACK_TIME {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let legit = Legit::new(&victim).await;
    let during = legit.greet(LEGIT_LIMIT).await;
    failures.legit(
        row,
        &format!(
            "while writing ({} requests sent)",
            sent.load(Ordering::Relaxed)
        ),
        &during,
    );
    let (io, outcome) = writer.await.unwrap();
    eprintln!(
        "{row} | {} of {REQUESTS} requests of 60 KB sent in {:?}: {outcome}",
        sent.load(Ordering::Relaxed),
        start.elapsed()
    );
    failures.memory(row, &victim, baseline);
    // The attacker's connection is still open, its replies unread.
    let held = legit.greet(LEGIT_LIMIT).await;
    failures.legit(row, "with the connection held", &held);
    failures.no_panic(&mut victim);
    drop(io);
    legit.stop().await;
    failures.finish(row);
}

/// A compromised member on 1,000 connections (4 KiB receive buffers) sends greetings of 15 KB
/// as fast as they go, each with an hour to run, and reads 1 KiB of replies per connection
/// every 3 s (the attack's own pace: never "none of its replies", so no connection is closed
/// for that). Its replies pile up unread; the node stops reading every connection of a peer
/// past its part of the buffered bytes (`budget.rs`) and holds 256 of its connections at most.
/// Measured once the node holds that steady state: every connection tried, and nothing more
/// read for 2 s (or after 25 s at most).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row01b_a_member_reads_a_trickle_of_its_replies_on_1000_connections() {
    let row = "row 1b";
    let (mut victim, baseline) = warmed(Setup {
        secure: true,
        ..Setup::default()
    })
    .await;
    let mut failures = Failures::default();
    let tls = Arc::new(raw::tls_connector(victim.certs().dir(), ATTACKER));
    let name: Arc<str> = "x".repeat(15_000).into();
    let (tried, opened, sent) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let start = tokio::time::Instant::now();
    let stop_at = start + ATTACK_TIME + Duration::from_secs(10);
    let rpc = victim.rpc;
    let opening = Arc::new(tokio::sync::Semaphore::new(64));
    let connections: Vec<_> = (0..1_000)
        .map(|_| {
            let (tls, name, tried, opened, sent, opening) = (
                tls.clone(),
                name.clone(),
                tried.clone(),
                opened.clone(),
                sent.clone(),
                opening.clone(),
            );
            tokio::spawn(async move {
                let io = {
                    let _turn = opening.acquire().await.unwrap();
                    let open = async {
                        let tcp = raw::connect_small(rpc, 4096).await?;
                        let mut io = raw::tls_over(&tls, tcp, "victim").await?;
                        raw::handshake(&mut io, ATTACKER).await?;
                        Ok::<_, std::io::Error>(io)
                    };
                    let opened_or_not = tokio::time::timeout(ATTEMPT_LIMIT, open).await;
                    tried.fetch_add(1, Ordering::Relaxed);
                    match opened_or_not {
                        Ok(Ok(io)) => io,
                        _ => return,
                    }
                };
                opened.fetch_add(1, Ordering::Relaxed);
                let (mut read, mut write) = tokio::io::split(io);
                let writing = tokio::spawn(async move {
                    for id in 0u64.. {
                        let mut call = Call::greet(id, &name);
                        call.deadline = Deadline::in_(Duration::from_secs(3600));
                        if tokio::time::Instant::now() > stop_at
                            || write.write_all(&call.frame()).await.is_err()
                        {
                            break;
                        }
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                    std::future::pending::<()>().await;
                });
                let mut trickle = [0u8; 1024];
                while tokio::time::Instant::now() < stop_at {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    let _ =
                        tokio::time::timeout(Duration::from_millis(100), read.read(&mut trickle))
                            .await;
                }
                writing.abort();
                std::future::pending::<()>().await;
            })
        })
        .collect();
    // The steady state: every connection tried, and the node reading nothing more.
    let mut last = (usize::MAX, tokio::time::Instant::now());
    while tokio::time::Instant::now() < stop_at {
        let now = sent.load(Ordering::Relaxed);
        if now != last.0 {
            last = (now, tokio::time::Instant::now());
        } else if tried.load(Ordering::Relaxed) == 1_000
            && last.1.elapsed() >= Duration::from_secs(2)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "{row} | {} of 1,000 connections opened, {} requests of 15 KB sent in {:?}; victim fds {}",
        opened.load(Ordering::Relaxed),
        sent.load(Ordering::Relaxed),
        start.elapsed(),
        victim.fds()
    );
    // Not yet within the 64 MiB aim (docs/reliability.md, "Still open"): this bound catches
    // the +257 MiB this attack reached before replies counted against the peer's part.
    let (now, peak) = (victim.rss(), victim.peak_rss());
    let growth = peak.saturating_sub(baseline);
    eprintln!(
        "{row} | RSS baseline {:.1} MiB, now {:.1} MiB, peak {:.1} MiB (growth {:.1} MiB)",
        mib(baseline),
        mib(now),
        mib(peak),
        mib(growth)
    );
    failures.check(growth <= 2 * RSS_GROWTH_LIMIT, || {
        format!("RSS grew {:.1} MiB, more than 128 MiB", mib(growth))
    });
    let legit = Legit::new(&victim).await;
    let outcome = legit.greet(LEGIT_LIMIT).await;
    failures.legit(row, "during the attack", &outcome);
    failures.no_panic(&mut victim);
    connections.iter().for_each(tokio::task::JoinHandle::abort);
    legit.stop().await;
    failures.finish(row);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row02_100_connections_each_send_almost_all_of_an_8_mib_frame_and_hold() {
    hold_frames("row 2", false, &[ATTACKER]).await;
}

/// Row 2 over mutual TLS, the attacker a compromised member: TLS adds each connection's
/// record buffers to what the frames take.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row02b_the_same_over_mutual_tls_from_a_member() {
    hold_frames("row 2b", true, &[ATTACKER]).await;
}

/// Row 2b from four members at once, 25 connections each: together they may hold the node's
/// whole budget, a quarter each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row02c_the_same_from_four_members_at_once() {
    let mut members = vec![ATTACKER];
    members.extend(abuse::victim::MORE_ATTACKERS);
    hold_frames("row 2c", true, &members).await;
}

/// 100 connections (TLS from `members` in turn, or plaintext) each send all but a byte of an
/// 8 MiB frame and hold.
async fn hold_frames(row: &str, secure: bool, members: &[&str]) {
    let (mut victim, baseline) = warmed(Setup {
        secure,
        ..Setup::default()
    })
    .await;
    let tls: Vec<_> = members
        .iter()
        .filter(|_| secure)
        .map(|member| Arc::new(raw::tls_connector(victim.certs().dir(), member)))
        .collect();
    let mut failures = Failures::default();
    let announced = raw::MAX_FRAME - 1;
    let body = Arc::new(vec![0xa5u8; announced - 1]);
    let start = Instant::now();
    let deadline = tokio::time::Instant::now() + ATTACK_TIME;
    // Each connection is held to the end however far its writes got: a victim that stops
    // reading one (its budget spent) must not see it closed by the attacker.
    let attackers: Vec<_> = (0..100)
        .map(|i| {
            let (body, rpc) = (body.clone(), victim.rpc);
            let member = members[i % members.len()].to_owned();
            let tls = (!tls.is_empty()).then(|| tls[i % tls.len()].clone());
            tokio::spawn(async move {
                let mut io = match tokio::time::timeout_at(deadline, async {
                    let mut io: Box<dyn raw::Wire> = match &tls {
                        Some(tls) => Box::new(raw::connect_tls(tls, rpc, "victim").await?),
                        None => Box::new(raw::connect(rpc).await?),
                    };
                    raw::handshake(&mut io, &member).await?;
                    Ok::<_, std::io::Error>(io)
                })
                .await
                {
                    Ok(Ok(io)) => io,
                    Ok(Err(e)) => return (None, format!("not opened: {e}")),
                    Err(_) => return (None, "not opened in time".to_owned()),
                };
                let sent = tokio::time::timeout_at(deadline, async {
                    io.write_all(&(announced as u32).to_be_bytes()).await?;
                    io.write_all(&body).await?;
                    io.flush().await
                })
                .await;
                let outcome = match sent {
                    Ok(Ok(())) => "all sent",
                    Ok(Err(_)) => "closed by the victim",
                    Err(_) => "stalled: the victim stopped reading",
                };
                (Some(io), outcome.to_owned())
            })
        })
        .collect();
    let mut held = Vec::new();
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    for attacker in attackers {
        let (io, outcome) = attacker.await.unwrap();
        held.extend(io);
        *outcomes.entry(outcome).or_default() += 1;
    }
    eprintln!(
        "{row} | 100 connections announced {announced} bytes and sent up to {} of them in {:?}: {outcomes:?}",
        announced - 1,
        start.elapsed()
    );
    failures.memory(row, &victim, baseline);
    let legit = Legit::new(&victim).await;
    let outcome = legit.greet(LEGIT_LIMIT).await;
    failures.legit(row, "with the 100 connections held", &outcome);
    failures.no_panic(&mut victim);
    drop(held);
    legit.stop().await;
    failures.finish(row);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row03a_2500_silent_tcp_connections_to_a_secure_node() {
    let row = "row 3a";
    let (mut victim, _) = warmed(Setup {
        secure: true,
        ..Setup::default()
    })
    .await;
    let mut failures = Failures::default();
    let before = victim.fds();
    let rpc = victim.rpc;
    let start = Instant::now();
    let held = open_many(2_500, 64, ATTACK_TIME, move |_| raw::connect(rpc)).await;
    let fds = settled_fds(&victim, Duration::from_secs(3)).await;
    eprintln!(
        "{row} | {} silent connections held (opened in {:?}); victim fds {before} before, {fds} after",
        held.len(),
        start.elapsed()
    );
    failures.check(fds <= MAX_CONNECTIONS + OWN_FDS, || {
        format!(
            "{fds} open descriptors, over the budget of {}",
            MAX_CONNECTIONS + OWN_FDS
        )
    });
    let legit = Legit::new(&victim).await;
    let outcome = legit.greet(LEGIT_LIMIT).await;
    failures.legit(row, "with 2,500 silent connections held", &outcome);
    failures.no_panic(&mut victim);
    drop(held);
    legit.stop().await;
    failures.finish(row);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row03b_2500_idle_connections_past_tls_and_the_handshake() {
    let row = "row 3b";
    let (mut victim, baseline) = warmed(Setup {
        secure: true,
        ..Setup::default()
    })
    .await;
    let mut failures = Failures::default();
    let before = victim.fds();
    let tls = raw::tls_connector(victim.certs().dir(), ATTACKER);
    let rpc = victim.rpc;
    let start = Instant::now();
    let held = open_many(2_500, 32, ATTACK_TIME, move |_| {
        let tls = tls.clone();
        async move {
            let mut io = raw::connect_tls(&tls, rpc, "victim").await?;
            raw::handshake(&mut io, ATTACKER).await?;
            Ok(io)
        }
    })
    .await;
    let opened = start.elapsed();
    let fds = settled_fds(&victim, Duration::from_secs(3)).await;
    eprintln!(
        "{row} | {} of 2500 connections completed TLS and the handshake in {opened:?}, held idle; victim fds {before} before, {fds} after",
        held.len()
    );
    failures.check(fds <= MAX_CONNECTIONS + OWN_FDS, || {
        format!(
            "{fds} open descriptors, over the budget of {}",
            MAX_CONNECTIONS + OWN_FDS
        )
    });
    // Each established connection a member holds costs its TLS state and the serving task.
    failures.memory(row, &victim, baseline);
    let legit = Legit::new(&victim).await;
    let outcome = legit.greet(LEGIT_LIMIT).await;
    failures.legit(row, "with the idle connections held", &outcome);
    failures.no_panic(&mut victim);
    drop(held);
    legit.stop().await;
    failures.finish(row);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row04_2000_connections_held_open_against_ulimit_1024() {
    let row = "row 4";
    let (mut victim, _) = warmed(Setup {
        max_files: Some(1024),
        ..Setup::default()
    })
    .await;
    let mut failures = Failures::default();
    let before = victim.fds();
    let rpc = victim.rpc;
    let start = Instant::now();
    // Each says hello and does not wait for the answer: a node that accepts it has a
    // connection past its handshake; one that cannot accept leaves it in the listen backlog.
    let held = open_many(2_000, 128, ATTACK_TIME, move |_| async move {
        let mut io = raw::connect(rpc).await?;
        io.write_all(&raw::hello(ATTACKER)).await?;
        Ok(io)
    })
    .await;
    let fds = settled_fds(&victim, Duration::from_secs(3)).await;
    eprintln!(
        "{row} | {} connections held (opened in {:?}); victim under ulimit -n 1024: fds {before} before, {fds} after",
        held.len(),
        start.elapsed()
    );
    let legit = Legit::new(&victim).await;
    let outcome = legit.greet(LEGIT_LIMIT).await;
    failures.legit(row, "with 2,000 connections held", &outcome);
    failures.no_panic(&mut victim);
    drop(held);
    legit.stop().await;
    failures.finish(row);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row05_a_frame_sent_half_is_closed_after_the_frame_timeout() {
    let row = "row 5";
    let (mut victim, _) = warmed(Setup {
        secure: true,
        ..Setup::default()
    })
    .await;
    let mut failures = Failures::default();
    let tls = raw::tls_connector(victim.certs().dir(), ATTACKER);
    let mut io = raw::connect_tls(&tls, victim.rpc, "victim").await.unwrap();
    raw::handshake(&mut io, ATTACKER).await.unwrap();
    let frame = Call::greet(1, &"y".repeat(1000)).frame();
    io.write_all(&frame[..frame.len() / 2]).await.unwrap();
    io.flush().await.unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 64];
    let limit = FRAME_TIMEOUT + FRAME_TIMEOUT_SLACK;
    let closed = tokio::time::timeout(limit, io.read(&mut buf)).await;
    let took = start.elapsed();
    match &closed {
        Ok(Ok(0)) | Ok(Err(_)) => {
            eprintln!("{row} | the half frame's connection closed after {took:?}")
        }
        Ok(Ok(n)) => eprintln!("{row} | the victim wrote {n} bytes to a half frame after {took:?}"),
        Err(_) => eprintln!("{row} | the half frame's connection still open after {took:?}"),
    }
    failures.check(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), || {
        format!(
            "a frame sent half was still held after {took:?} (frame timeout {FRAME_TIMEOUT:?}): {closed:?}"
        )
    });
    let legit = Legit::new(&victim).await;
    let outcome = legit.greet(LEGIT_LIMIT).await;
    failures.legit(row, "after the half frame", &outcome);
    failures.no_panic(&mut victim);
    legit.stop().await;
    failures.finish(row);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row06_a_deadline_of_u64_max_seconds_is_answered_and_the_connection_goes_on() {
    let row = "row 6";
    let (mut victim, _) = warmed(Setup::default()).await;
    let mut failures = Failures::default();
    let mut io = raw::connect(victim.rpc).await.unwrap();
    raw::handshake(&mut io, ATTACKER).await.unwrap();
    let far = Call {
        deadline: Deadline {
            secs: u64::MAX,
            nanos: 999_999_999,
        },
        ..Call::greet(1, "far")
    };
    let huge_budget = Call {
        budget_micros: u64::MAX - 1,
        ..Call::greet(2, "budget")
    };
    for (what, call, text) in [
        ("a deadline of u64::MAX s", far, "hello, far"),
        ("a budget of u64::MAX - 1 µs", huge_budget, "hello, budget"),
        ("the next call", Call::greet(3, "next"), "hello, next"),
    ] {
        let reply = raw::call(&mut io, &call, LEGIT_LIMIT).await;
        match reply.as_ref().ok().and_then(Reply::greeting) {
            Some(greeting) => eprintln!("{row} | {what}: answered {greeting:?}"),
            None => eprintln!("{row} | {what}: {reply:?}"),
        }
        let answered = matches!(&reply, Ok(r) if r.greeting().is_some_and(|g| g.text == text));
        failures.check(answered, || {
            format!("{what}: not answered on the same connection: {reply:?}")
        });
    }
    failures.no_panic(&mut victim);
    let legit = Legit::new(&victim).await;
    let outcome = legit.greet(LEGIT_LIMIT).await;
    failures.legit(row, "afterwards", &outcome);
    legit.stop().await;
    failures.finish(row);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row07_timeouts_of_three_years_work_beside_ordinary_calls() {
    let row = "row 7";
    let (mut victim, _) = warmed(Setup {
        probe: true,
        ..Setup::default()
    })
    .await;
    let mut failures = Failures::default();
    let legit = Legit::new(&victim).await;
    let three_years = Duration::from_secs(3 * 365 * 24 * 3600);
    let start = Instant::now();
    let long = legit
        .greeter()
        .greet("patient".into())
        .timeout(three_years)
        .budget(three_years);
    let long = tokio::time::timeout(LEGIT_LIMIT, long).await;
    eprintln!(
        "{row} | greet with .timeout(3 years): {long:?} in {:?}",
        start.elapsed()
    );
    failures.check(
        matches!(&long, Ok(Ok(g)) if g.text == "hello, patient"),
        || format!("greet with .timeout(3 years): {long:?}"),
    );
    let start = Instant::now();
    let declared = tokio::time::timeout(LEGIT_LIMIT, legit.probe().patient(7)).await;
    eprintln!(
        "{row} | probe.patient, declared timeout 26280h: {declared:?} in {:?}",
        start.elapsed()
    );
    failures.check(matches!(declared, Ok(Ok(7))), || {
        format!("probe.patient (timeout 26280h): {declared:?}")
    });
    // A call of three years in flight on the pooled connection, and ordinary ones beside it.
    let slow = legit
        .probe()
        .sleep(500)
        .timeout(three_years)
        .budget(three_years);
    let beside = async {
        let mut took = Vec::new();
        for _ in 0..5 {
            took.push(legit.greet(LEGIT_LIMIT).await);
        }
        took
    };
    let (slow, beside) = tokio::time::timeout(Duration::from_secs(5), async {
        tokio::join!(slow.into_future(), beside)
    })
    .await
    .expect("within 5 s");
    eprintln!("{row} | sleep(500) with .timeout(3 years): {slow:?}");
    failures.check(matches!(slow, Ok(500)), || {
        format!("sleep(500) with a 3-year timeout: {slow:?}")
    });
    for (i, outcome) in beside.iter().enumerate() {
        failures.legit(row, &format!("{} beside it", i + 1), outcome);
    }
    failures.no_panic(&mut victim);
    legit.stop().await;
    failures.finish(row);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row08_the_same_request_id_twice_is_never_met_with_silence() {
    let row = "row 8";
    let (mut victim, _) = warmed(Setup {
        probe: true,
        ..Setup::default()
    })
    .await;
    let mut failures = Failures::default();
    let mut io = raw::connect(victim.rpc).await.unwrap();
    raw::handshake(&mut io, ATTACKER).await.unwrap();
    // The first holds id 7 for 2 s; the second reuses it at once.
    io.write_all(&Call::sleep(7, 2_000).frame()).await.unwrap();
    io.write_all(&Call::greet(7, "twice").frame())
        .await
        .unwrap();
    io.flush().await.unwrap();
    let start = Instant::now();
    let heard = tokio::time::timeout(LEGIT_LIMIT, raw::read_reply(&mut io)).await;
    let took = start.elapsed();
    eprintln!("{row} | after the second request with id 7: {heard:?} in {took:?}");
    let told = match &heard {
        Ok(Err(_)) => true,
        Ok(Ok(Reply::Other { id: 7, .. } | Reply::ServerError { id: 7, .. })) => true,
        Ok(Ok(_)) | Err(_) => false,
    };
    failures.check(told, || {
        format!(
            "the second request with id 7 was not refused nor its connection closed within {LEGIT_LIMIT:?}: {heard:?}"
        )
    });
    let legit = Legit::new(&victim).await;
    let outcome = legit.greet(LEGIT_LIMIT).await;
    failures.legit(row, "afterwards", &outcome);
    failures.no_panic(&mut victim);
    legit.stop().await;
    failures.finish(row);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row09_a_request_past_its_deadline_is_refused_before_its_handler_runs() {
    let row = "row 9";
    let (mut victim, _) = warmed(Setup {
        probe: true,
        ..Setup::default()
    })
    .await;
    let mut failures = Failures::default();
    let mut io = raw::connect(victim.rpc).await.unwrap();
    raw::handshake(&mut io, ATTACKER).await.unwrap();
    let no_time = Call {
        deadline: Deadline::in_(Duration::ZERO),
        ..Call::count(1)
    };
    let no_budget = Call {
        budget_micros: 0,
        ..Call::count(2)
    };
    for (what, call) in [
        ("a deadline of 0 s", no_time),
        ("a budget of 0 µs", no_budget),
    ] {
        let reply = raw::call(&mut io, &call, LEGIT_LIMIT).await;
        eprintln!("{row} | {what}: {reply:?}");
        let expired = matches!(
            &reply,
            Ok(Reply::Other {
                kind: raw::EXPIRED,
                ..
            } | Reply::ServerError { .. })
        );
        failures.check(expired, || {
            format!("{what}: not refused as expired within {LEGIT_LIMIT:?}: {reply:?}")
        });
    }
    let legit = Legit::new(&victim).await;
    let runs = tokio::time::timeout(LEGIT_LIMIT, legit.probe().count()).await;
    eprintln!("{row} | count's runs, the legitimate call's included: {runs:?}");
    failures.check(matches!(runs, Ok(Ok(1))), || {
        format!("the handler ran for an expired request: count says {runs:?} (1 is the legitimate call's own)")
    });
    failures.no_panic(&mut victim);
    legit.stop().await;
    failures.finish(row);
}

/// Connections that make the node log a line each at DEBUG: `resets` reset (RST) halfway
/// through their hello, `damaged` open with a damaged magic; and `bad_frames` connections
/// that send a frame that is no request after their handshake (a WARN, at most once per
/// address per 10 s). How many were made.
async fn log_flood(victim: &Victim, resets: usize, damaged: usize, bad_frames: usize) -> usize {
    let rpc = victim.rpc;
    // One bound for the three kinds: a node that stopped reading ends the flood, not the row.
    let end = Instant::now() + FLOOD_TIME;
    let left = move || end.saturating_duration_since(Instant::now());
    let hello = raw::hello(ATTACKER);
    let half = hello[..hello.len() / 2].to_vec();
    let reset = open_many(resets, 16, left(), move |_| {
        let half = half.clone();
        async move {
            let mut io = raw::connect(rpc).await?;
            raw::resets_on_drop(&io)?;
            io.write_all(&half).await?;
            // Read by the node before the reset arrives: it then fails reading the rest.
            let mut nothing = [0u8; 1];
            let _ = tokio::time::timeout(Duration::from_millis(20), io.read(&mut nothing)).await;
            Ok(())
        }
    })
    .await;
    let mut broken = hello.clone();
    broken[7] = b'!';
    let damaged = open_many(damaged, 16, left(), move |_| {
        let broken = broken.clone();
        async move {
            let mut io = raw::connect(rpc).await?;
            io.write_all(&broken).await?;
            let mut rest = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(2), io.read_to_end(&mut rest)).await;
            Ok(())
        }
    })
    .await;
    let bad = open_many(bad_frames, 16, left(), move |_| async move {
        let mut io = raw::connect(rpc).await?;
        raw::handshake(&mut io, ATTACKER).await?;
        let mut garbage = 32u32.to_be_bytes().to_vec();
        garbage.extend_from_slice(&[0xff; 32]);
        io.write_all(&garbage).await?;
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), io.read_to_end(&mut rest)).await;
        Ok(())
    })
    .await;
    reset.len() + damaged.len() + bad.len()
}

/// The pipe test (part A): stdout and stderr pipes nobody reads, thousands of log lines.
async fn unread_output(row: &str, rust_log: &'static str, resets: usize, damaged: usize) {
    let mut victim = Victim::start(Setup {
        rust_log: Some(rust_log),
        stderr: Stderr::Unread,
        ..Setup::default()
    });
    let mut failures = Failures::default();
    let start = Instant::now();
    let bad_frames = 100;
    let done = log_flood(&victim, resets, damaged, bad_frames).await;
    eprintln!(
        "{row} | RUST_LOG={rust_log}: {done} of {} resets, damaged handshakes and bad frames in {:?}, output unread",
        resets + damaged + bad_frames,
        start.elapsed()
    );
    let legit = Legit::new(&victim).await;
    let outcome = legit.greet(LEGIT_LIMIT).await;
    failures.legit(row, "with its output unread", &outcome);
    legit.stop().await;
    let alive = victim.alive();
    failures.check(alive, || "the victim died".to_owned());
    if alive {
        let (said, exited) = victim.terminate_and_drain(Duration::from_secs(5));
        let lines = said.lines().count();
        let report = said.lines().rev().find(|l| l.contains("log lines dropped"));
        eprintln!(
            "{row} | on SIGTERM: exited {exited}; stderr held {lines} lines ({} KiB); last count: {}",
            said.len() >> 10,
            report.unwrap_or("none")
        );
        failures.check(exited, || "no exit within 5 s of SIGTERM".to_owned());
        failures.check(!said.contains("panicked"), || format!("a panic: {said}"));
    }
    failures.finish(row);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row10_500_connection_resets_with_warn_logs_nobody_reads() {
    unread_output("row 10", "warn", 500, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn part_a_thousands_of_debug_lines_into_pipes_nobody_reads() {
    unread_output("part A", "debug", 3_000, 3_000).await;
}

/// Deposits one member makes at most: more than its share of the at-most-once record holds.
const MAX_DEPOSITS: u64 = 150_000;

/// Compromised members filling the victim's record of at-most-once calls
/// (`cluster/src/server/record.rs`): each makes deposits with fresh call ids, as the library
/// gives every call, 64 at a time, on a 10-minute budget (so each is kept 10 minutes) and with
/// no retries, until the record refuses it (`Overloaded`, before the deposit runs) or
/// [`MAX_DEPOSITS`]. Then a legitimate deposit must run at once.
async fn fill_the_record(row: &str, members: &[&str]) {
    let (mut victim, baseline) = warmed(Setup {
        secure: true,
        bank: true,
        ..Setup::default()
    })
    .await;
    let mut failures = Failures::default();
    let start = Instant::now();
    let mut attacks = Vec::new();
    for (m, name) in members.iter().enumerate() {
        let member = Arc::new(Legit::named(&victim, name).await);
        attacks.push(tokio::spawn(async move {
            let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let refused = Arc::new(AtomicUsize::new(0));
            let workers: Vec<_> = (0..64)
                .map(|_| {
                    let (member, next, refused) = (member.clone(), next.clone(), refused.clone());
                    tokio::spawn(async move {
                        let mut ran = 0u64;
                        while refused.load(Ordering::Relaxed) < 64 {
                            let id = next.fetch_add(1, Ordering::Relaxed);
                            if id >= MAX_DEPOSITS {
                                break;
                            }
                            // Retries on, as a call id is given only to a call that may be
                            // retried; one the record refuses is retried until the test
                            // stops waiting for it.
                            let call = member
                                .bank()
                                .deposit((m as u64) << 32 | id)
                                .budget(Duration::from_secs(600));
                            match tokio::time::timeout(Duration::from_secs(3), call.into_future())
                                .await
                            {
                                Ok(Ok(_)) => ran += 1,
                                Ok(Err(e)) if e.to_string().contains("record of at-most-once") => {
                                    refused.fetch_add(1, Ordering::Relaxed);
                                }
                                Ok(Err(e)) => panic!("a deposit failed otherwise: {e}"),
                                Err(_) => {
                                    refused.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                        ran
                    })
                })
                .collect();
            let mut ran = 0;
            for worker in workers {
                ran += worker.await.unwrap();
            }
            Arc::into_inner(member)
                .expect("the workers are done")
                .stop()
                .await;
            (ran, refused.load(Ordering::Relaxed))
        }));
    }
    let mut kept = Vec::new();
    for attack in attacks {
        kept.push(attack.await.unwrap());
    }
    eprintln!(
        "{row} | {} member(s): deposits kept, refused: {kept:?}, run {} in all, in {:?}",
        members.len(),
        victim.deposits(),
        start.elapsed()
    );
    for (name, (ran, refused)) in members.iter().zip(&kept) {
        failures.check(*refused > 0, || {
            format!("{name}'s {ran} deposits never filled its share of the record")
        });
    }
    failures.memory(row, &victim, baseline);
    let growth = victim.peak_rss().saturating_sub(baseline);
    failures.check(growth <= RSS_GROWTH_LIMIT * members.len() as u64, || {
        format!(
            "RSS grew {:.1} MiB for {} member(s), over {:.0} MiB each",
            mib(growth),
            members.len(),
            mib(RSS_GROWTH_LIMIT)
        )
    });
    let legit = Legit::new(&victim).await;
    let started = Instant::now();
    let deposit = legit
        .bank()
        .deposit(u64::MAX)
        .timeout(LEGIT_LIMIT)
        .budget(LEGIT_LIMIT);
    let outcome = match tokio::time::timeout(LEGIT_LIMIT, deposit.into_future()).await {
        Ok(Ok(_)) => Ok(started.elapsed()),
        Ok(Err(e)) => Err(format!("failed after {:?}: {e}", started.elapsed())),
        Err(_) => Err(format!("no answer within {LEGIT_LIMIT:?}")),
    };
    failures.legit(row, "(a deposit, after the attack)", &outcome);
    legit.stop().await;
    failures.no_panic(&mut victim);
    failures.finish(row);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row11a_a_member_fills_the_at_most_once_record_with_fresh_call_ids() {
    fill_the_record("row 11a", &[abuse::victim::ATTACKER]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row11b_four_members_fill_the_at_most_once_record_at_once() {
    let mut members = vec![abuse::victim::ATTACKER];
    members.extend(abuse::victim::MORE_ATTACKERS);
    fill_the_record("row 11b", &members).await;
}
