//! How long a gossip datagram waited in this node's receive queue, and shedding those that
//! waited too long (CoDel's idea, on the sender's time stamp).
//!
//! A node that reads its gossip slower than it arrives (a starved CPU, a long pause) queues it:
//! the socket holds megabytes. Read in order, every datagram then says what was true seconds
//! ago, its heartbeats are older than those already known, and the failure detector sees live
//! nodes fall silent; the node spends its time on news that newer datagrams, queued behind,
//! make worthless, and falls further behind. Measured with 200 registries on 2 cores: queues of
//! 4.7 MB per socket, datagrams read 30 s after they were sent, and tens of thousands of live
//! nodes declared dead (`docs/benchmarks.md`).
//!
//! 1. **Is this node behind at all?** The transport says when it found the socket's queue empty
//!    ([`Lateness::idle`], `transport.rs`): every datagram read since arrived after that moment,
//!    so none of them can have waited longer than the time since. While that is under
//!    [`MAX_WAIT`] nothing is shed, whatever the datagrams' time stamps say: this bound comes
//!    from this node alone, and no sender, forger or clock can move it.
//! 2. **Which datagrams waited?** A sealed datagram carries the time its sender sealed it, by the
//!    sender's clock (`security/seal.rs`). Its *offset* is this node's time on reading it less
//!    that; this node's time is a wall-clock reading taken once, when the socket was opened, plus
//!    a monotonic clock's time since, so a step of this node's wall clock (NTP, a resumed VM)
//!    changes no offset.
//! 3. Clocks differ, so an offset alone says nothing; per source the *base* is the least offset
//!    seen lately, the clocks' difference plus the quickest trip. A datagram whose offset is more
//!    than [`MAX_WAIT`] past its source's base, read while this node has been behind for longer
//!    than that, waited that long somewhere, nearly always in this node's queue: it is dropped
//!    unread, and counted. Deltas it carried come again (gossip resends what a peer lacks).
//!
//! The base is kept honest against a sender's clock, a forger and a replayer:
//!
//! - **A datagram cannot have waited longer than this node has been busy.** Its offset less
//!   that time is at most the clocks' difference plus its own trip, so the base is raised to it
//!   if lower: a datagram never looks later than the time since the queue was last empty, and a
//!   sender whose clock stepped back is followed at its first datagram.
//! - **Looking early moves the base down only slowly.** A datagram whose offset is below its
//!   source's base lowers it by at most [`STEP`], and by at most [`STEP`] a second over all (one
//!   forged or replayed datagram dated seconds ahead cannot drag it down); only [`EARLY_RUN`]
//!   early datagrams in a row over at least [`EARLY_SPAN`], none of that source's others between
//!   them, re-base it to their least (a sender whose clock stepped forward).
//!
//! What that leaves an attacker who can send from a peer's address (UDP's source is not
//! authenticated), replay captured datagrams, or hold the key: while this node is not behind,
//! nothing is shed, whatever it sends. Datagrams dated ahead lower that peer's base by [`STEP`]
//! a second (or to anything, given [`EARLY_SPAN`] of that peer's silence); each of the peer's
//! own datagrams raises it back to at most what it can have waited. So only in a real backlog
//! of this node (busy for over [`MAX_WAIT`]) can the peer's datagrams be shed having waited
//! less than [`MAX_WAIT`], by at most what the attacker lowered the base since the peer's last
//! datagram. Datagrams dated back (or replayed late) raise the base: that peer's datagrams are
//! then shed later in a backlog, as before shedding existed, never dropped more.
//!
//! A plaintext datagram carries no time and is never shed. At most [`MAX_SOURCES`] sources are
//! followed; past that, a new one is not (its datagrams are read however late). No input
//! panics or overflows: a sender's time stamp is whatever it chose.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

/// Waited longer than this, a datagram is dropped unread: a node is declared dead after 2 s of
/// silence, so heartbeats a second old say little, and newer ones are queued behind.
pub(super) const MAX_WAIT: Duration = Duration::from_secs(1);
/// How far one early datagram may lower its source's base, and how far all may in a second.
const STEP: Duration = Duration::from_millis(50);
/// Early datagrams in a row, over at least [`EARLY_SPAN`], that re-base their source.
const EARLY_RUN: u32 = 8;
const EARLY_SPAN: Duration = Duration::from_secs(1);
/// A source not heard from for this long may be forgotten to make room for another.
const FORGET_AFTER: Duration = Duration::from_secs(60);
/// Sources followed at most.
const MAX_SOURCES: usize = 4096;

#[derive(Debug)]
pub(super) struct Lateness {
    /// This node's clock: the wall clock when made (µs since 1970), then monotonic time.
    wall: i64,
    start: Instant,
    /// When the transport last found the socket's queue empty.
    idle: Instant,
    sources: HashMap<SocketAddr, Source>,
}

#[derive(Debug, Clone, Copy)]
struct Source {
    /// Offsets more than [`MAX_WAIT`] past it are late, µs.
    base: i64,
    /// How far early datagrams may still lower the base (µs, at most [`STEP`]), and when that
    /// was last topped up.
    allowance: i64,
    topped: Instant,
    /// Early datagrams in a row: the first's time, how many, their least offset.
    early: Option<(Instant, u32, i64)>,
    seen: Instant,
}

impl Default for Lateness {
    fn default() -> Self {
        Self::starting_at(crate::security::seal::now_micros())
    }
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

impl Lateness {
    /// Lateness with this node's clock reading `wall` (µs since 1970) now.
    pub(super) fn starting_at(wall: u64) -> Self {
        let now = Instant::now();
        Self {
            wall: i64::try_from(wall).unwrap_or(i64::MAX),
            start: now,
            idle: now,
            sources: HashMap::new(),
        }
    }

    /// The socket's queue is empty now: whatever is read next arrived after this.
    pub(super) fn idle(&mut self) {
        self.idle = Instant::now();
    }

    /// How much longer than its source's quickest a datagram sealed at `sent` (µs since 1970,
    /// by its sender's clock) and read now took, if that is more than [`MAX_WAIT`] and this
    /// node has been behind for longer than that.
    pub(super) fn late(&mut self, from: SocketAddr, sent: u64) -> Option<Duration> {
        let at = Instant::now();
        let now = self
            .wall
            .saturating_add(micros(at.duration_since(self.start)));
        let offset = i64::try_from(i128::from(now) - i128::from(sent)).ok()?;
        // No datagram read now waited longer than this.
        let busy = at.duration_since(self.idle);
        if !self.sources.contains_key(&from) && self.sources.len() >= MAX_SOURCES {
            self.sources
                .retain(|_, source| at.duration_since(source.seen) < FORGET_AFTER);
            if self.sources.len() >= MAX_SOURCES {
                return None;
            }
        }
        let source = self.sources.entry(from).or_insert(Source {
            base: offset,
            allowance: micros(STEP),
            topped: at,
            early: None,
            seen: at,
        });
        source.seen = at;
        source.base = source.base.max(offset.saturating_sub(micros(busy)));
        if offset < source.base {
            let top_up = micros(at.duration_since(source.topped)).saturating_mul(micros(STEP))
                / micros(Duration::from_secs(1));
            source.allowance = source.allowance.saturating_add(top_up).min(micros(STEP));
            source.topped = at;
            let lower = source.base.saturating_sub(offset).min(source.allowance);
            source.base -= lower;
            source.allowance -= lower;
        }
        if offset < source.base {
            let (first, count, least) = source.early.get_or_insert((at, 0, offset));
            *count += 1;
            *least = (*least).min(offset);
            if *count >= EARLY_RUN && at.duration_since(*first) >= EARLY_SPAN {
                source.base = *least;
                source.early = None;
            }
            return None;
        }
        source.early = None;
        let waited = Duration::from_micros(u64::try_from(offset - source.base).unwrap_or(0));
        (busy > MAX_WAIT && waited > MAX_WAIT).then_some(waited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000;
    /// This node's wall clock when its `Lateness` is made, in these tests.
    const START: u64 = 1_000_000_000 * MS;

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    /// This node's time (µs since 1970) by `lateness`'s clock: what a peer whose clock agrees
    /// stamps on a datagram it seals now.
    fn now(lateness: &Lateness) -> u64 {
        START + lateness.start.elapsed().as_micros() as u64
    }

    async fn advance(ms: u64) {
        tokio::time::advance(Duration::from_millis(ms)).await;
    }

    /// A source's datagrams, one every 10 ms for a second with trips of 1 ms, read as they come
    /// (the queue empty before each), by a sender whose clock is `ahead` µs ahead.
    async fn keep_up(lateness: &mut Lateness, port: u16, ahead: u64) {
        for _ in 0..100 {
            advance(10).await;
            lateness.idle();
            assert_eq!(lateness.late(peer(port), now(lateness) + ahead - MS), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn in_a_backlog_a_datagram_that_waited_past_a_second_is_dropped_whatever_the_clocks() {
        let mut lateness = Lateness::starting_at(START);
        // The sender's clock is 5 s ahead of this node's.
        let ahead = 5_000 * MS;
        keep_up(&mut lateness, 1, ahead).await;
        // Another source, its clock 3 s behind.
        for _ in 0..10 {
            lateness.idle();
            assert_eq!(lateness.late(peer(2), now(&lateness) - 3_000 * MS), None);
        }
        // Then this node falls behind: 2 s without its queue ever empty.
        advance(2_000).await;
        // Sealed 1.5 s before it was read: it waited 1.5 s longer than its source's quickest.
        let waited = lateness.late(peer(1), now(&lateness) + ahead - 1_500 * MS);
        assert_eq!(waited, Some(Duration::from_millis(1_499)));
        // 800 ms in the queue: read.
        assert_eq!(
            lateness.late(peer(1), now(&lateness) + ahead - 800 * MS),
            None
        );
        assert_eq!(lateness.late(peer(2), now(&lateness) - 3_800 * MS), None);
        // 1.2 s: dropped, whichever the clock.
        assert!(
            lateness
                .late(peer(2), now(&lateness) - 4_200 * MS)
                .is_some()
        );
        // A backlog drained in a burst, 50 datagrams that waited 1.9 s down to 1.1 s: every
        // one dropped.
        for i in 0..50 {
            let waited = (1_900 - 16 * i) * MS;
            assert!(
                lateness
                    .late(peer(1), now(&lateness) + ahead - waited)
                    .is_some()
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_dropped_while_this_node_keeps_up_whatever_the_time_stamps() {
        let mut lateness = Lateness::starting_at(START);
        keep_up(&mut lateness, 1, 0).await;
        // The queue emptied 900 ms ago: nothing read now waited longer, however it is dated.
        lateness.idle();
        advance(900).await;
        for sent in [0, START - 30_000 * MS, now(&lateness) - 10_000 * MS] {
            assert_eq!(lateness.late(peer(1), sent), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_datagram_dated_ahead_from_a_peers_address_cannot_silence_that_peer() {
        let mut lateness = Lateness::starting_at(START);
        keep_up(&mut lateness, 1, 0).await;
        // Forged (by a holder of the key) or replayed (of a member whose clock is ahead), sent
        // from the peer's address: dated 25 s ahead, twenty of them at once.
        for _ in 0..20 {
            assert_eq!(lateness.late(peer(1), now(&lateness) + 25_000 * MS), None);
        }
        // The peer's honest datagrams after it, 1 ms trips: read while this node keeps up...
        let mut dropped = 0;
        for _ in 0..500 {
            advance(100).await;
            lateness.idle();
            dropped += usize::from(lateness.late(peer(1), now(&lateness) - MS).is_some());
        }
        assert_eq!(
            dropped, 0,
            "{dropped} of the peer's next 500 datagrams dropped"
        );
        // ... and while it is behind (no empty queue for 3 s), forgeries still coming.
        for _ in 0..30 {
            advance(100).await;
            assert_eq!(lateness.late(peer(1), now(&lateness) + 25_000 * MS), None);
            assert_eq!(lateness.late(peer(1), now(&lateness) - MS), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn datagrams_dated_ahead_among_a_peers_own_lower_its_base_by_a_step_a_second_at_most() {
        let mut lateness = Lateness::starting_at(START);
        keep_up(&mut lateness, 1, 0).await;
        // 3 s of this node behind: the peer's datagrams arrive fresh every 100 ms, and between
        // each two, two forged ones dated 3 s ahead.
        for _ in 0..30 {
            advance(100).await;
            for _ in 0..2 {
                assert_eq!(lateness.late(peer(1), now(&lateness) + 3_000 * MS), None);
            }
            assert_eq!(lateness.late(peer(1), now(&lateness) - MS), None);
        }
        let base = lateness.sources[&peer(1)].base;
        let honest = i64::try_from(MS).unwrap();
        let lowered = Duration::from_micros((honest - base) as u64);
        assert!(lowered <= STEP * 4, "lowered by {lowered:?} in 3 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_of_this_nodes_wall_clock_changes_nothing() {
        // This node's time is its wall clock when the socket opened, then a monotonic clock:
        // a later step of its wall clock (NTP, a resumed VM) is never read. Here its wall clock
        // stepped 3 s forward between two sockets: both judge the same datagrams alike.
        let mut before = Lateness::starting_at(START);
        let mut after = Lateness::starting_at(START + 3_000 * MS);
        for _ in 0..100 {
            advance(100).await;
            for port in 1..=5 {
                // Peers' clocks agree with this node's before the step.
                let sent = now(&before) - MS;
                assert_eq!(before.late(peer(port), sent), None);
                assert_eq!(after.late(peer(port), sent), None);
            }
        }
        // 10 s without the queue empty: datagrams that waited 1 ms are still read.
        assert_eq!(before.late(peer(1), now(&before) - MS), None);
        assert_eq!(after.late(peer(1), now(&before) - MS), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_base_follows_a_senders_clock_stepped_back_at_once() {
        let mut lateness = Lateness::starting_at(START);
        keep_up(&mut lateness, 1, 0).await;
        // The sender's clock is stepped 10 s back: its datagrams look 10 s late, yet none can
        // have waited more than since the queue was last empty.
        for _ in 0..20 {
            advance(100).await;
            lateness.idle();
            advance(10).await;
            assert_eq!(lateness.late(peer(1), now(&lateness) - 10_000 * MS), None);
        }
        // And a backlog is still shed: 2 s behind, 1.5 s waited.
        advance(2_000).await;
        let waited = lateness.late(peer(1), now(&lateness) - 11_500 * MS);
        assert!(waited.is_some_and(|w| w > MAX_WAIT), "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_base_follows_a_senders_clock_stepped_forward_within_seconds() {
        let mut lateness = Lateness::starting_at(START);
        keep_up(&mut lateness, 1, 0).await;
        // The sender's clock is stepped 10 s forward: its datagrams look early, and are read.
        keep_up(&mut lateness, 1, 10_000 * MS).await;
        advance(100).await;
        lateness.idle();
        assert_eq!(
            lateness.late(peer(1), now(&lateness) + 10_000 * MS - MS),
            None
        );
        // A second of them is enough: a backlog of its datagrams is shed again.
        advance(2_000).await;
        let waited = lateness.late(peer(1), now(&lateness) + 10_000 * MS - 1_500 * MS);
        assert!(waited.is_some_and(|w| w > MAX_WAIT), "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn hostile_time_stamps_neither_panic_nor_overflow() {
        let mut lateness = Lateness::starting_at(u64::MAX);
        for sent in [
            0,
            1,
            u64::MAX,
            u64::MAX / 2,
            i64::MAX as u64,
            i64::MAX as u64 + 1,
        ] {
            lateness.late(peer(1), sent);
            advance(2_000).await;
            lateness.late(peer(1), sent);
            lateness.late(peer(2), sent);
        }
        let mut lateness = Lateness::starting_at(0);
        for sent in [u64::MAX, 0, i64::MAX as u64, 1 << 63, 5] {
            advance(1_500).await;
            lateness.late(peer(1), sent);
            lateness.late(peer(3), sent);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_so_many_sources_are_followed() {
        let mut lateness = Lateness::starting_at(START);
        let sent = now(&lateness);
        for port in 0..MAX_SOURCES as u16 {
            lateness.late(peer(port), sent);
        }
        advance(2_000).await;
        assert_eq!(lateness.late(peer(u16::MAX), sent - 60_000 * MS), None);
        assert_eq!(lateness.sources.len(), MAX_SOURCES);
        advance(FORGET_AFTER.as_millis() as u64).await;
        lateness.late(peer(u16::MAX), now(&lateness));
        assert_eq!(lateness.sources.len(), 1, "the stale ones forgotten");
    }
}
