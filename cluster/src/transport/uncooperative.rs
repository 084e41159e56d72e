//! An IO that does not cooperate, for tests: a wrapper around any `AsyncRead + AsyncWrite` that
//! moves a few bytes at a time (down to one), answers `Pending` at random, stops for a while (a
//! peer that stops reading, a slow link), and breaks at a chosen byte (a reset, or the peer's
//! end of stream). Everything it does is drawn from a seed, so a failure replays from the seed
//! it prints (`docs/wire.md`, "Proving the loops").
//!
//! The transport's own tests run its caller and provider over it (`tcp/uncooperative_tests.rs`);
//! with the `uncooperative-io` feature and `CLUSTER_UNCOOPERATIVE_IO=SEED` set, every connection
//! a node opens or accepts goes through it (beneath TLS), so the whole call-path suite runs on
//! sockets that do not cooperate ([`from_env`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// What an [`Uncooperative`] IO does, each drawn from its seed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Faults {
    /// The most bytes one read or write moves: each moves 1 to this many (at least 1).
    pub(crate) max_chunk: usize,
    /// Of 1,000 reads or writes, how many answer `Pending` first (and wake at once).
    pub(crate) pending_per_mille: u32,
    /// Of 1,000 reads or writes, how many stop first for up to `max_pause`.
    pub(crate) pause_per_mille: u32,
    pub(crate) max_pause: Duration,
    /// How many pauses at most, so that a test's deadlines can be set beyond all of them.
    pub(crate) max_pauses: u32,
    /// After this many bytes have moved (read and written together), the connection breaks.
    pub(crate) break_at: Option<(u64, Break)>,
}

/// How a connection breaks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Break {
    /// Every read and write fails with `ConnectionReset`; the peer's side is dropped, so the
    /// peer sees its end too.
    Reset,
    /// Reads see the end of the stream; writes fail with `BrokenPipe`.
    Eof,
}

impl Faults {
    /// Short reads and writes, spurious `Pending`s and short pauses: a slow, choppy, but
    /// working network, on which every call must still get its own reply.
    pub(crate) fn choppy(rng: &mut fastrand::Rng) -> Self {
        Self {
            max_chunk: [1, 7, 64, 1500, 16 << 10][rng.usize(..5)],
            pending_per_mille: rng.u32(0..300),
            pause_per_mille: rng.u32(0..20),
            max_pause: Duration::from_millis(rng.u64(1..50)),
            max_pauses: 8,
            break_at: None,
        }
    }
}

/// `io`, uncooperative as `faults` say, drawn from `seed`.
pub(crate) struct Uncooperative<S> {
    /// `None` once broken by a reset: dropped, so the peer sees it.
    io: Option<S>,
    faults: Faults,
    rng: fastrand::Rng,
    moved: u64,
    broken: Option<Break>,
    pauses: u32,
    read_pause: Option<Pin<Box<Sleep>>>,
    write_pause: Option<Pin<Box<Sleep>>>,
    /// Where a short read lands before it is copied out: no `unsafe` to lend part of the
    /// caller's buffer.
    scratch: Vec<u8>,
}

impl<S> Uncooperative<S> {
    pub(crate) fn new(io: S, faults: Faults, seed: u64) -> Self {
        Self {
            io: Some(io),
            faults,
            rng: fastrand::Rng::with_seed(seed),
            moved: 0,
            broken: None,
            pauses: 0,
            read_pause: None,
            write_pause: None,
            scratch: Vec::new(),
        }
    }

    /// Bytes read and written so far.
    #[cfg(test)]
    pub(crate) fn moved(&self) -> u64 {
        self.moved
    }

    /// `Pending` if this read or write stops now (a pause begun or going on, or a spurious
    /// `Pending`); else how many bytes it may move.
    fn turn(
        &mut self,
        cx: &mut Context<'_>,
        writing: bool,
        wanted: usize,
    ) -> Poll<io::Result<usize>> {
        if let Some(broken) = self.broken {
            return Poll::Ready(Err(broken.error(writing)));
        }
        let pause = if writing {
            &mut self.write_pause
        } else {
            &mut self.read_pause
        };
        if let Some(sleep) = pause {
            ready!(sleep.as_mut().poll(cx));
            *pause = None;
        } else if self.pauses < self.faults.max_pauses
            && self.rng.u32(0..1000) < self.faults.pause_per_mille
        {
            self.pauses += 1;
            let length = self.faults.max_pause.mul_f64(self.rng.f64());
            let mut sleep = Box::pin(tokio::time::sleep(length));
            if sleep.as_mut().poll(cx).is_pending() {
                *pause = Some(sleep);
                return Poll::Pending;
            }
        } else if self.rng.u32(0..1000) < self.faults.pending_per_mille {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let mut most = wanted.min(self.rng.usize(1..=self.faults.max_chunk.max(1)));
        if let Some((at, how)) = self.faults.break_at {
            let left = at.saturating_sub(self.moved);
            if left == 0 {
                self.broken = Some(how);
                if how == Break::Reset {
                    self.io = None;
                }
                return Poll::Ready(Err(how.error(writing)));
            }
            most = most.min(usize::try_from(left).unwrap_or(usize::MAX));
        }
        Poll::Ready(Ok(most))
    }
}

impl Break {
    fn error(self, writing: bool) -> io::Error {
        match (self, writing) {
            (Break::Reset, _) => io::ErrorKind::ConnectionReset.into(),
            (Break::Eof, true) => io::ErrorKind::BrokenPipe.into(),
            // Reads see the end of the stream instead (`poll_read`).
            (Break::Eof, false) => io::ErrorKind::UnexpectedEof.into(),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Uncooperative<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let most = match ready!(this.turn(cx, false, buf.remaining())) {
            Ok(most) => most,
            Err(_) if this.broken == Some(Break::Eof) => return Poll::Ready(Ok(())),
            Err(e) => return Poll::Ready(Err(e)),
        };
        let Some(io) = this.io.as_mut() else {
            return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
        };
        this.scratch.resize(most, 0);
        let mut short = ReadBuf::new(&mut this.scratch);
        ready!(Pin::new(io).poll_read(cx, &mut short))?;
        let got = short.filled().len();
        buf.put_slice(short.filled());
        this.moved += got as u64;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Uncooperative<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let most = ready!(this.turn(cx, true, buf.len()))?;
        let Some(io) = this.io.as_mut() else {
            return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
        };
        let wrote = ready!(Pin::new(io).poll_write(cx, &buf[..most]))?;
        this.moved += wrote as u64;
        Poll::Ready(Ok(wrote))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(broken) = self.broken {
            return Poll::Ready(Err(broken.error(true)));
        }
        match self.io.as_mut() {
            Some(io) => Pin::new(io).poll_flush(cx),
            None => Poll::Ready(Err(io::ErrorKind::ConnectionReset.into())),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.io.as_mut() {
            Some(io) => Pin::new(io).poll_shutdown(cx),
            None => Poll::Ready(Ok(())),
        }
    }
}

/// With `CLUSTER_UNCOOPERATIVE_IO=SEED` set, every connection of this process goes through an
/// [`Uncooperative`] IO with [`Faults::choppy`] faults, each connection's drawn from the seed
/// and its number (connections open in an order the scheduler decides, so a whole suite's run
/// replays its faults, not always its interleaving). Unset, `io` as it is.
#[cfg(feature = "uncooperative-io")]
pub(crate) fn from_env<S>(io: S) -> Uncooperative<S> {
    use std::sync::LazyLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: LazyLock<Option<u64>> = LazyLock::new(|| {
        let seed = std::env::var("CLUSTER_UNCOOPERATIVE_IO").ok()?;
        let seed = seed
            .trim()
            .parse()
            .expect("CLUSTER_UNCOOPERATIVE_IO: a seed, a whole number");
        eprintln!("every connection uncooperative, CLUSTER_UNCOOPERATIVE_IO={seed}");
        Some(seed)
    });
    static CONNECTIONS: AtomicU64 = AtomicU64::new(0);
    let Some(seed) = *SEED else {
        return Uncooperative::new(io, Faults::cooperative(), 0);
    };
    let seed = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(CONNECTIONS.fetch_add(1, Ordering::Relaxed));
    let mut rng = fastrand::Rng::with_seed(seed);
    // No pauses: the suite's tests of timing (a slow replica gets fewer calls) would measure
    // them. Short moves and spurious `Pending`s change no timing a test can see.
    let faults = Faults {
        pause_per_mille: 0,
        ..Faults::choppy(&mut rng)
    };
    Uncooperative::new(io, faults, seed)
}

#[cfg(feature = "uncooperative-io")]
impl Faults {
    /// Nothing uncooperative: every read and write as the IO beneath does it.
    fn cooperative() -> Self {
        Self {
            max_chunk: usize::MAX,
            pending_per_mille: 0,
            pause_per_mille: 0,
            max_pause: Duration::ZERO,
            max_pauses: 0,
            break_at: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn faults(max_chunk: usize) -> Faults {
        Faults {
            max_chunk,
            pending_per_mille: 300,
            pause_per_mille: 50,
            max_pause: Duration::from_millis(20),
            max_pauses: 4,
            break_at: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_arrive_whole_and_in_order_however_they_are_cut() {
        let (a, b) = tokio::io::duplex(64);
        let mut a = Uncooperative::new(a, faults(3), 1);
        let mut b = Uncooperative::new(b, faults(5), 2);
        let sent: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let writing = async {
            a.write_all(&sent).await.unwrap();
            a.shutdown().await.unwrap();
        };
        let mut got = Vec::new();
        let (_, read) = tokio::join!(writing, b.read_to_end(&mut got));
        read.unwrap();
        assert_eq!(got, sent);
    }

    #[tokio::test(start_paused = true)]
    async fn the_same_seed_cuts_the_same_way() {
        let cuts = |seed| async move {
            let (a, mut b) = tokio::io::duplex(1 << 16);
            let mut a = Uncooperative::new(a, faults(9), seed);
            let mut sizes = Vec::new();
            for _ in 0..50 {
                sizes.push(a.write(&[0; 100]).await.unwrap());
            }
            drop(b.read(&mut [0; 1 << 16]).await);
            sizes
        };
        assert_eq!(cuts(7).await, cuts(7).await);
        assert_ne!(cuts(7).await, cuts(8).await);
    }

    #[tokio::test]
    async fn a_reset_at_a_byte_breaks_both_sides_there() {
        let (a, mut b) = tokio::io::duplex(1 << 16);
        let mut a = Uncooperative::new(
            a,
            Faults {
                break_at: Some((100, Break::Reset)),
                ..faults(1 << 10)
            },
            3,
        );
        let err = a.write_all(&[1; 1000]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
        assert_eq!(a.moved(), 100);
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert_eq!(
            got.len(),
            100,
            "the peer sees exactly the bytes before the break, then its end"
        );
    }

    #[tokio::test]
    async fn an_eof_at_a_byte_ends_reads_there() {
        let (mut a, b) = tokio::io::duplex(1 << 16);
        let mut b = Uncooperative::new(
            b,
            Faults {
                break_at: Some((10, Break::Eof)),
                ..faults(4)
            },
            4,
        );
        a.write_all(&[2; 100]).await.unwrap();
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, vec![2; 10]);
    }
}
