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
//! 1. A sealed datagram carries the time its sender sealed it, by the sender's clock
//!    (`security/seal.rs`). Its *offset* is this node's time on reading it less that.
//! 2. Clocks differ, so an offset alone says nothing; per source, the least offset seen lately
//!    ([`PERIOD`], the lesser of this period's and the last's) is the clocks' difference plus
//!    the quickest trip: the *base*.
//! 3. A datagram whose offset is more than [`MAX_WAIT`] past its source's base waited that long
//!    somewhere, nearly always in this node's queue: it is dropped unread, and counted. Deltas
//!    it carried come again (gossip resends what a peer lacks).
//!
//! A plaintext datagram carries no time and is never shed. At most [`MAX_SOURCES`] sources are
//! followed; past that, a new one is not (its datagrams are read however late).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

/// Waited longer than this, a datagram is dropped unread: a node is declared dead after 2 s of
/// silence, so heartbeats a second old say little, and newer ones are queued behind.
pub(super) const MAX_WAIT: Duration = Duration::from_secs(1);
/// How long a least offset stands for its source's base.
const PERIOD: Duration = Duration::from_secs(30);
/// Sources followed at most.
const MAX_SOURCES: usize = 4096;

#[derive(Debug, Default)]
pub(super) struct Lateness {
    sources: HashMap<SocketAddr, Base>,
}

#[derive(Debug, Clone, Copy)]
struct Base {
    since: Instant,
    /// The least offsets of this period and the last, in µs.
    least: i64,
    before: i64,
}

impl Lateness {
    /// How much longer than its source's quickest a datagram sealed at `sent` and read at `now`
    /// (both µs since 1970) took, if that is more than [`MAX_WAIT`].
    pub(super) fn late(&mut self, from: SocketAddr, sent: u64, now: u64) -> Option<Duration> {
        let offset = i64::try_from(i128::from(now) - i128::from(sent)).ok()?;
        let at = Instant::now();
        if !self.sources.contains_key(&from) && self.sources.len() >= MAX_SOURCES {
            self.sources
                .retain(|_, base| at.duration_since(base.since) < PERIOD * 2);
            if self.sources.len() >= MAX_SOURCES {
                return None;
            }
        }
        let base = self.sources.entry(from).or_insert(Base {
            since: at,
            least: offset,
            before: offset,
        });
        if at.duration_since(base.since) >= PERIOD {
            base.before = base.least;
            base.least = offset;
            base.since = at;
        }
        base.least = base.least.min(offset);
        let waited = offset.saturating_sub(base.least.min(base.before));
        let waited = Duration::from_micros(u64::try_from(waited).unwrap_or(0));
        (waited > MAX_WAIT).then_some(waited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000;

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    #[tokio::test(start_paused = true)]
    async fn a_datagram_that_waited_past_a_second_is_late_whatever_the_clocks() {
        let mut lateness = Lateness::default();
        // The sender's clock is 5 s ahead of this node's; trips take 1 ms.
        let ahead = 5_000 * MS;
        for t in 0..100 {
            let now = 1_000_000_000 * MS + t * 10 * MS;
            assert_eq!(lateness.late(peer(1), now + ahead - MS, now), None);
        }
        let now = 1_000_000_000 * MS + 2_000 * MS;
        // Sealed 1.5 s before it was read: it waited 1.5 s longer than its source's quickest.
        let waited = lateness.late(peer(1), now + ahead - 1_500 * MS, now);
        assert_eq!(waited, Some(Duration::from_millis(1_499)));
        // Another source, its clock behind, 800 ms late: still read.
        assert_eq!(lateness.late(peer(2), now - 3_000 * MS, now), None);
        assert_eq!(lateness.late(peer(2), now - 3_800 * MS, now), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_base_follows_a_clock_that_was_stepped() {
        let mut lateness = Lateness::default();
        let now = 1_000_000_000 * MS;
        assert_eq!(lateness.late(peer(1), now - MS, now), None);
        // The sender's clock is stepped 10 s back: its datagrams look 10 s late until the
        // period that saw the old clock has gone by, then read again.
        assert!(lateness.late(peer(1), now - 10_000 * MS, now).is_some());
        tokio::time::advance(PERIOD).await;
        assert!(lateness.late(peer(1), now - 10_000 * MS, now).is_some());
        tokio::time::advance(PERIOD).await;
        assert_eq!(lateness.late(peer(1), now - 10_000 * MS, now), None);
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_so_many_sources_are_followed() {
        let mut lateness = Lateness::default();
        let now = 1_000_000_000 * MS;
        for port in 0..MAX_SOURCES as u16 {
            lateness.late(peer(port), now, now);
        }
        assert_eq!(lateness.late(peer(u16::MAX), now - 60_000 * MS, now), None);
        assert_eq!(lateness.sources.len(), MAX_SOURCES);
        tokio::time::advance(PERIOD * 2).await;
        lateness.late(peer(u16::MAX), now, now);
        assert_eq!(lateness.sources.len(), 1, "the stale ones forgotten");
    }
}
