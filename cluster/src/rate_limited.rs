//! Log lines a peer can trigger at will (a bad frame, a reset, a bad datagram), at most one per
//! source per interval, with a count of those left out. A WARN per event would let any peer
//! fill the disk, or block a node whose log pipe is slow.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The interval between two lines about one source.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

/// Sources remembered at once; past it, those not heard of in an interval are forgotten, and
/// if none was, every new source shares one more line.
const MAX_SOURCES: usize = 4096;

#[derive(Debug, Default)]
pub(crate) struct RateLimited {
    sources: Mutex<HashMap<Option<IpAddr>, Seen>>,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    logged: Instant,
    left_out: u64,
}

impl RateLimited {
    /// Calls `log` with how many events from `source` were left out since its last line, if
    /// a line about `source` is due; counts the event otherwise.
    pub(crate) fn note(&self, source: IpAddr, log: impl FnOnce(u64)) {
        let now = Instant::now();
        let due = {
            let mut sources = self.sources.lock().unwrap_or_else(|p| p.into_inner());
            if sources.len() >= MAX_SOURCES && !sources.contains_key(&Some(source)) {
                sources.retain(|_, seen| now.duration_since(seen.logged) < LOG_EVERY);
            }
            let key = if sources.len() >= MAX_SOURCES && !sources.contains_key(&Some(source)) {
                None
            } else {
                Some(source)
            };
            match sources.get_mut(&key) {
                Some(seen) if now.duration_since(seen.logged) < LOG_EVERY => {
                    seen.left_out += 1;
                    None
                }
                Some(seen) => {
                    let left_out = std::mem::take(&mut seen.left_out);
                    seen.logged = now;
                    Some(left_out)
                }
                None => {
                    sources.insert(
                        key,
                        Seen {
                            logged: now,
                            left_out: 0,
                        },
                    );
                    Some(0)
                }
            }
        };
        if let Some(left_out) = due {
            log(left_out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_line_per_source_per_interval_with_the_count_left_out() {
        let limited = RateLimited::default();
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let mut lines = Vec::new();
        for _ in 0..5 {
            limited.note(a, |n| lines.push(("a", n)));
        }
        limited.note(b, |n| lines.push(("b", n)));
        tokio::time::advance(LOG_EVERY).await;
        limited.note(a, |n| lines.push(("a", n)));
        assert_eq!(lines, [("a", 0), ("b", 0), ("a", 4)]);
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_bound_on_sources_new_ones_share_a_line() {
        let limited = RateLimited::default();
        let mut lines = 0;
        for i in 0..MAX_SOURCES as u32 + 10 {
            limited.note(IpAddr::from(i.to_be_bytes()), |_| lines += 1);
        }
        assert_eq!(lines, MAX_SOURCES + 1, "the ten past the bound shared one");
        assert!(limited.sources.lock().unwrap().len() <= MAX_SOURCES + 1);
    }
}
