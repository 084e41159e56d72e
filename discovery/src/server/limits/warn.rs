//! Warnings a client can provoke again and again (a bad request, a wrong credential, a bad
//! replication batch, a refused connection): each logged at most once per source and
//! interval, the next one saying how many were suppressed meanwhile. Written unthrottled, a
//! loop of bad requests would turn into a loop of log lines: disk, and a log reader that cannot
//! keep up.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How many (warning, source) pairs are remembered. Past it, the pairs quiet for an interval
/// are forgotten, and if that is not enough the new sources share one entry: the map a peer
/// can grow is bounded too.
const REMEMBERED: usize = 4_096;

/// Where a request came from: the peer's IP address, or none for an in-process call. Set as a
/// request extension by the accept loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Source(pub(crate) Option<IpAddr>);

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(ip) => ip.fmt(f),
            None => f.write_str("in-process"),
        }
    }
}

/// One warning per (kind, source) and interval.
#[derive(Debug)]
pub(crate) struct Throttle {
    interval: Duration,
    seen: Mutex<HashMap<(&'static str, String), Seen>>,
}

#[derive(Debug)]
struct Seen {
    logged_at: Instant,
    suppressed: u64,
}

impl Throttle {
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            interval,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// `Some(n)`: log this one, after `n` of its kind from `source` were suppressed; `None`:
    /// suppress it (counted, and said with the next one logged).
    pub(crate) fn admit(&self, kind: &'static str, source: &str) -> Option<u64> {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let mut key = (kind, source.to_owned());
        if seen.len() >= REMEMBERED && !seen.contains_key(&key) {
            seen.retain(|_, s| now.duration_since(s.logged_at) < self.interval);
            if seen.len() >= REMEMBERED {
                key.1 = "other sources".to_owned();
            }
        }
        match seen.get_mut(&key) {
            Some(s) if now.duration_since(s.logged_at) < self.interval => {
                s.suppressed = s.suppressed.saturating_add(1);
                None
            }
            Some(s) => {
                let suppressed = std::mem::take(&mut s.suppressed);
                s.logged_at = now;
                Some(suppressed)
            }
            None => {
                seen.insert(
                    key,
                    Seen {
                        logged_at: now,
                        suppressed: 0,
                    },
                );
                Some(0)
            }
        }
    }
}

/// `tracing::warn!` through a [`Throttle`]: `throttled_warn!(throttle, "kind", source, "…", …)`,
/// with the source and the count suppressed before it as fields.
macro_rules! throttled_warn {
    ($throttle:expr, $kind:literal, $source:expr, $($arg:tt)+) => {{
        let source = $source.to_string();
        if let Some(suppressed) = $throttle.admit($kind, &source) {
            tracing::warn!(%source, suppressed, $($arg)+);
        }
    }};
}
pub(crate) use throttled_warn;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_warning_per_source_and_interval_then_the_count_suppressed() {
        let t = Throttle::new(Duration::from_secs(10));
        assert_eq!(t.admit("bad", "10.0.0.1"), Some(0));
        for _ in 0..999 {
            assert_eq!(t.admit("bad", "10.0.0.1"), None);
        }
        assert_eq!(t.admit("bad", "10.0.0.2"), Some(0), "another source");
        assert_eq!(t.admit("auth", "10.0.0.1"), Some(0), "another kind");
        tokio::time::advance(Duration::from_millis(9_999)).await;
        assert_eq!(t.admit("bad", "10.0.0.1"), None);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(t.admit("bad", "10.0.0.1"), Some(1_000));
        assert_eq!(t.admit("bad", "10.0.0.1"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_sources_remembered_are_bounded() {
        let t = Throttle::new(Duration::from_secs(10));
        for k in 0..REMEMBERED {
            assert_eq!(t.admit("bad", &k.to_string()), Some(0));
        }
        assert_eq!(t.admit("bad", "new"), Some(0), "the first of the rest");
        assert_eq!(t.admit("bad", "newer"), None, "shares its entry");
        assert_eq!(t.seen.lock().unwrap().len(), REMEMBERED + 1);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(
            t.admit("bad", "newest"),
            Some(0),
            "the quiet ones forgotten"
        );
        assert_eq!(t.seen.lock().unwrap().len(), 1);
    }
}
