//! The server's idea of "now", injectable so that lease expiry and self-preservation are tested
//! without waiting.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock milliseconds since the epoch, from the system, from tokio's (pausable) clock, or
/// set by hand.
#[derive(Debug, Clone)]
pub struct Clock(Kind);

#[derive(Debug, Clone)]
enum Kind {
    System,
    Tokio {
        epoch_ms: u64,
        start: tokio::time::Instant,
    },
    Manual(Arc<AtomicU64>),
}

fn system_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, super::limits::numbers::millis)
}

impl Default for Clock {
    fn default() -> Self {
        Self::system()
    }
}

impl Clock {
    /// The system's clock (the default).
    pub fn system() -> Self {
        Self(Kind::System)
    }

    /// The system's time now, advancing with tokio's clock: with `tokio::time::pause()` time
    /// moves only as the test advances it.
    pub fn tokio() -> Self {
        Self(Kind::Tokio {
            epoch_ms: system_ms(),
            start: tokio::time::Instant::now(),
        })
    }

    /// A clock that only moves when [`Clock::advance`] or [`Clock::set`] says so.
    pub fn manual(start_ms: u64) -> Self {
        Self(Kind::Manual(Arc::new(AtomicU64::new(start_ms))))
    }

    /// Milliseconds since the epoch.
    pub fn now_ms(&self) -> u64 {
        match &self.0 {
            Kind::System => system_ms(),
            Kind::Tokio { epoch_ms, start } => {
                epoch_ms.saturating_add(super::limits::numbers::millis(start.elapsed()))
            }
            Kind::Manual(t) => t.load(Ordering::SeqCst),
        }
    }

    /// Moves a manual clock forward (no effect on the others).
    pub fn advance(&self, by: std::time::Duration) {
        if let Kind::Manual(t) = &self.0 {
            let by = super::limits::numbers::millis(by);
            let _ = t.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |ms| {
                Some(ms.saturating_add(by))
            });
        }
    }

    /// Sets a manual clock (no effect on the others).
    pub fn set(&self, ms: u64) {
        if let Kind::Manual(t) = &self.0 {
            t.store(ms, Ordering::SeqCst);
        }
    }
}
