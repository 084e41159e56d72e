//! The registry's changes in the log: each at DEBUG, and at INFO a line that counts them, at
//! most one per [`EVERY`]. A rolling restart of hundreds of nodes is thousands of changes on
//! every node; a line each at INFO drowned everything else in the logs.
//!
//! The first change after a quiet [`EVERY`] is counted in a line at once; the changes that come
//! within [`EVERY`] of a line wait for the next one, which a timer writes when [`EVERY`] is up
//! (so the last changes of a burst are said too, not only when another comes).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::RegistryEvent;

/// The least time between two INFO lines.
pub(super) const EVERY: Duration = Duration::from_secs(10);

/// What changed since the last line.
#[derive(Debug, Default)]
struct Counts {
    services_up: u64,
    services_down: u64,
    nodes_up: u64,
    nodes_down: u64,
    /// When the last line was written.
    last: Option<Instant>,
    /// A timer will write the next line.
    timer: bool,
}

impl Counts {
    fn is_empty(&self) -> bool {
        self.services_up + self.services_down + self.nodes_up + self.nodes_down == 0
    }

    /// The line for what was counted, which is reset.
    fn take_line(&mut self, now: Instant) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let line = format!(
            "registry: {} node(s) up, {} down, {} service entr(ies) up, {} down{}",
            self.nodes_up,
            self.nodes_down,
            self.services_up,
            self.services_down,
            match self.last {
                Some(last) => format!(" in the last {:?}", now - last),
                None => String::new(),
            },
        );
        *self = Counts {
            last: Some(now),
            ..Counts::default()
        };
        Some(line)
    }
}

/// The summary of one registry copy.
#[derive(Debug, Default, Clone)]
pub(super) struct Summary {
    counts: Arc<Mutex<Counts>>,
}

impl Summary {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Logs `event` at DEBUG and counts it for the next INFO line.
    pub(super) fn note(&self, event: &RegistryEvent) {
        match event {
            RegistryEvent::ServiceUp(e) => tracing::debug!(
                "service {} {} became available on node {}",
                e.description.name,
                e.description.version,
                e.node
            ),
            RegistryEvent::ServiceDown(e) => tracing::debug!(
                "service {} {} went away from node {}",
                e.description.name,
                e.description.version,
                e.node
            ),
            RegistryEvent::NodeUp(n) => tracing::debug!("node {n} is up"),
            RegistryEvent::NodeDown(n) => tracing::debug!("node {n} is down"),
        }
        let mut counts = self.counts();
        match event {
            RegistryEvent::ServiceUp(_) => counts.services_up += 1,
            RegistryEvent::ServiceDown(_) => counts.services_down += 1,
            RegistryEvent::NodeUp(_) => counts.nodes_up += 1,
            RegistryEvent::NodeDown(_) => counts.nodes_down += 1,
        }
    }

    /// After a replacement's changes were noted: the INFO line if one is due, or a timer for it.
    pub(super) fn changed(&self) {
        if let Some(line) = self.due(Instant::now()) {
            tracing::info!("{line}");
        }
    }

    /// The line to write now, if one is due; otherwise sets the timer that writes it (without
    /// a runtime to run one, the line waits for the next change).
    fn due(&self, now: Instant) -> Option<String> {
        let mut counts = self.counts();
        let next = match counts.last {
            Some(last) if now < last + EVERY => last + EVERY,
            _ => return counts.take_line(now),
        };
        if !counts.timer && tokio::runtime::Handle::try_current().is_ok() {
            counts.timer = true;
            let summary = self.clone();
            crate::background::spawn(async move {
                tokio::time::sleep_until(next).await;
                let line = {
                    let mut counts = summary.counts();
                    counts.timer = false;
                    counts.take_line(Instant::now())
                };
                if let Some(line) = line {
                    tracing::info!("{line}");
                }
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::NodeInfo;

    fn node_up(summary: &Summary, name: &str) {
        let info = NodeInfo::new(name, "127.0.0.1:1".parse().unwrap(), 1);
        summary.note(&RegistryEvent::NodeUp(info));
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_changes_is_one_line_at_once_and_one_when_the_period_is_up() {
        let summary = Summary::default();
        node_up(&summary, "a");
        let first = summary
            .due(Instant::now())
            .expect("the first change is said at once");
        assert!(first.contains("1 node(s) up"), "{first}");
        for name in ["b", "c", "d"] {
            node_up(&summary, name);
            assert_eq!(
                summary.due(Instant::now()),
                None,
                "within the period: counted"
            );
        }
        assert!(summary.counts().timer, "a timer writes the rest");
        tokio::time::sleep(EVERY + Duration::from_millis(1)).await;
        // The timer has written the line for b, c and d: nothing is left to say.
        assert!(summary.counts().is_empty());
        assert!(!summary.counts().timer);
        // After a quiet period the next change is said at once again.
        tokio::time::sleep(EVERY).await;
        node_up(&summary, "e");
        let later = summary.due(Instant::now()).expect("said at once");
        assert!(later.contains("1 node(s) up"), "{later}");
    }
}
