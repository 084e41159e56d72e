//! Health that is checked: a startup probe that gates registration, a periodic check that takes
//! a failing service out of every lookup and puts it back when it passes again.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

type ProbeFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
pub(crate) type Probe = Arc<dyn Fn() -> ProbeFuture + Send + Sync>;

/// How a served service proves it works. Given to [`Node::serve_with`](crate::Node::serve_with).
///
/// | setting | default |
/// |---|---|
/// | `startup` | none: registered at once |
/// | `check` | none: never taken down |
/// | `every` | 5 s between checks |
/// | `down_after` | 3 failed checks in a row |
/// | `bound_to` | none: a task whose end withdraws the service |
///
/// The seed validated its startup probe and never ran it, and ran its health check once.
/// Here the probe is retried with backoff until it passes, and the check runs for as long as
/// the service is served.
#[must_use]
#[non_exhaustive]
pub struct Health {
    pub(crate) startup: Option<Probe>,
    pub(crate) check: Option<Probe>,
    pub(crate) every: Duration,
    pub(crate) down_after: u32,
    pub(crate) bound_to: Option<tokio::task::JoinHandle<()>>,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            startup: None,
            check: None,
            every: Duration::from_secs(5),
            down_after: 3,
            bound_to: None,
        }
    }
}

impl fmt::Debug for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Health")
            .field("startup", &self.startup.is_some())
            .field("check", &self.check.is_some())
            .field("every", &self.every)
            .field("down_after", &self.down_after)
            .field("bound_to", &self.bound_to.is_some())
            .finish()
    }
}

fn probe<F, Fut, E>(f: F) -> Probe
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: fmt::Display,
{
    Arc::new(move || {
        let run = f();
        Box::pin(async move { run.await.map_err(|e| e.to_string()) })
    })
}

impl Health {
    /// No probe, no check.
    pub fn new() -> Self {
        Self::default()
    }

    /// A probe that must pass before the service is registered; retried with backoff (100 ms
    /// doubling to 5 s) until it does, each failure logged with its reason.
    pub fn startup<F, Fut, E>(mut self, f: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display,
    {
        self.startup = Some(probe(f));
        self
    }

    /// A check run every [`every`](Self::every) while the service is served.
    pub fn check<F, Fut, E>(mut self, f: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display,
    {
        self.check = Some(probe(f));
        self
    }

    /// Time between checks (at least 1 ms); a check that takes longer counts as failed.
    pub fn every(mut self, interval: Duration) -> Self {
        self.every = interval.max(Duration::from_millis(1));
        self
    }

    /// Failed checks in a row that take the service down (at least 1).
    pub fn down_after(mut self, failures: u32) -> Self {
        self.down_after = failures.max(1);
        self
    }

    /// Ties the registration to a task (a worker loop the service depends on): when the task
    /// ends, for whatever reason, the service is withdrawn.
    pub fn bound_to(mut self, task: tokio::task::JoinHandle<()>) -> Self {
        self.bound_to = Some(task);
        self
    }
}

/// Where a served service stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServiceStatus {
    /// Waiting for its startup probe to pass: not registered.
    Starting,
    /// Registered: clients are routed to it.
    Up,
    /// Its health check failed: marked failing in the registry until it passes again, so
    /// that clients pass it over (unless more than their panic threshold's share of the
    /// service's replicas fail at once: `NodeBuilder::panic_threshold`).
    Down,
    /// Deregistered for good.
    Stopped,
}
