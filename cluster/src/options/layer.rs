use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One layer of call options: every field is optional, and only the fields set here override the
/// layers below.
///
/// The layers, lowest first: the library default ([`CallOptions::library_default`]), the
/// provider's service-level options, the provider's function-level options, the client's defaults
/// ([`Client::with_options`](crate::Client::with_options)) and the per-call overrides on
/// [`Call`](crate::Call).
///
/// Whether a function is idempotent is not an option: only the provider declares it.
///
/// ```
/// use std::time::Duration;
/// let options = cluster::CallOptions::new()
///     .timeout(Duration::from_secs(2))
///     .retry_after(Duration::from_millis(100));
/// assert_eq!(options.timeout, Some(Duration::from_secs(2)));
/// assert_eq!(options.retry_budget, None); // left to the layers below
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CallOptions {
    /// The longest one attempt may take. Zero, from the client's defaults or a call, fails the
    /// call at once (`RpcErrorKind::InvalidOptions`); from a provider's layer it counts as unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// Whether failed attempts are retried at all (`retry = false` turns it off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_enabled: Option<bool>,
    /// The pause before the first retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<Duration>,
    /// The longest pause between attempts, however often it was multiplied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_max_after: Option<Duration>,
    /// The factor each pause is multiplied by for the next one (1.0: constant pauses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_factor: Option<f64>,
    /// Whether pauses get random jitter, so that many clients do not retry in step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_jitter: Option<bool>,
    /// The whole call's time, all attempts and pauses included, from the call's start. Zero is
    /// treated as a zero `timeout` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_budget: Option<Duration>,
    /// Route only to the newest compatible version, as the seed did. Read from the client's
    /// and the call's layers only: it decides which providers are candidates, before any
    /// provider's options are known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest_only: Option<bool>,
    /// How long a call that finds no provider able to serve it waits for one to register,
    /// counted from the call's start and within its budget. Zero (the default) fails at once
    /// with the reason (`NoService`, `NoVersion`, `NoFunction`), as gRPC does without
    /// wait-for-ready: a miss under load does not hold thousands of calls for the budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_provider: Option<Duration>,
    /// How many times a call refused as `Overloaded` is sent again, each time to another
    /// replica if there is one. One by default: a provider that sheds load is not answered
    /// with a storm of retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overloaded_retries: Option<u32>,
    /// Retry throttling: the most retries and hedges this node may add to its calls of the
    /// service, as a share of those calls over [`retry_window`](Self::retry_window) (0.2: a
    /// fifth), besides [`retry_floor`](Self::retry_floor) a second. Past it a call that
    /// would be retried fails at once (`RpcErrorKind::RetryThrottled`): a provider that fails
    /// every call then gets at most that much more load, not each client's attempts times over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_ratio: Option<f64>,
    /// The window [`retry_ratio`](Self::retry_ratio) counts calls and retries over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_window: Option<Duration>,
    /// Retries allowed whatever the ratio, for each second of the window (10 with a window of
    /// 10 s: 100 per window, which may be spent at once), so that a node that calls rarely may
    /// still retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_floor: Option<u32>,
    /// Hedging: how long an attempt of an idempotent function goes unanswered before another
    /// copy is sent to another provider (the first answer wins, the others are cancelled). At
    /// least 1 ms: less is taken as 1 ms (`MIN_HEDGE_AFTER`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hedge_after: Option<Duration>,
    /// The most copies sent besides the first (0: no hedging). Only idempotent functions are
    /// hedged, whatever a layer says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hedge_max: Option<u32>,
}

/// Only the fields set: `timeout 5s, retry after 200ms, budget 30s`; `(none)` for an empty layer.
impl std::fmt::Display for CallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::error::report::Human;
        let mut parts = Vec::new();
        if let Some(t) = self.timeout {
            parts.push(format!("timeout {}", Human(t)));
        }
        if let Some(on) = self.retry_enabled {
            parts.push(if on {
                "retry on".to_owned()
            } else {
                "retry off".to_owned()
            });
        }
        if let Some(d) = self.retry_after {
            parts.push(format!("retry after {}", Human(d)));
        }
        if let Some(d) = self.retry_max_after {
            parts.push(format!("at most {}", Human(d)));
        }
        if let Some(x) = self.retry_factor {
            parts.push(format!("factor {x}"));
        }
        if let Some(j) = self.retry_jitter {
            parts.push(if j {
                "jitter".to_owned()
            } else {
                "no jitter".to_owned()
            });
        }
        if let Some(d) = self.retry_budget {
            parts.push(format!("budget {}", Human(d)));
        }
        if let Some(true) = self.newest_only {
            parts.push("newest version only".to_owned());
        }
        if let Some(d) = self.wait_for_provider {
            parts.push(format!("wait {} for a provider", Human(d)));
        }
        if let Some(n) = self.overloaded_retries {
            parts.push(format!("{n} retries when overloaded"));
        }
        if let Some(r) = self.retry_ratio {
            parts.push(format!("retries at most {}% of calls", r * 100.0));
        }
        if let Some(w) = self.retry_window {
            parts.push(format!("over {}", Human(w)));
        }
        if let Some(n) = self.retry_floor {
            parts.push(format!("{n} retries a second at least"));
        }
        if let Some(d) = self.hedge_after {
            parts.push(format!("hedge after {}", Human(d)));
        }
        if let Some(n) = self.hedge_max {
            parts.push(format!("at most {n} hedges"));
        }
        if parts.is_empty() {
            f.write_str("(none)")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

impl CallOptions {
    /// An empty layer: overrides nothing.
    pub const fn new() -> Self {
        Self {
            timeout: None,
            retry_enabled: None,
            retry_after: None,
            retry_max_after: None,
            retry_factor: None,
            retry_jitter: None,
            retry_budget: None,
            newest_only: None,
            wait_for_provider: None,
            overloaded_retries: None,
            retry_ratio: None,
            retry_window: None,
            retry_floor: None,
            hedge_after: None,
            hedge_max: None,
        }
    }

    /// The library's defaults, the lowest layer; every field set.
    ///
    /// | field | default |
    /// |---|---|
    /// | `timeout` | 10 s per attempt |
    /// | `retry_enabled` | true |
    /// | `retry_after` | 100 ms: the first pause is at most this |
    /// | `retry_max_after` | 5 s |
    /// | `retry_factor` | 2.0: each pause's ceiling doubles |
    /// | `retry_jitter` | true: full jitter, each pause drawn between 10 ms and its ceiling, so that clients that failed together do not retry together |
    /// | `retry_budget` | 30 s for the whole call |
    /// | `newest_only` | false: every compatible version gets calls, so a rolling deploy does not pile them onto the first upgraded node |
    /// | `wait_for_provider` | 0: a call that finds no provider fails at once |
    /// | `overloaded_retries` | 1: an `Overloaded` refusal is retried once, elsewhere |
    /// | `retry_ratio` | 0.2: retries and hedges add at most a fifth to a node's calls of a service (Finagle's `RetryBudget`) |
    /// | `retry_window` | 10 s |
    /// | `retry_floor` | 10 retries a second |
    /// | `hedge_after` | 0, taken as 1 ms, the least (with `hedge_max` 0: no hedging) |
    /// | `hedge_max` | 0: no hedging |
    pub const fn library_default() -> Self {
        Self {
            timeout: Some(Duration::from_secs(10)),
            retry_enabled: Some(true),
            retry_after: Some(Duration::from_millis(100)),
            retry_max_after: Some(Duration::from_secs(5)),
            retry_factor: Some(2.0),
            retry_jitter: Some(true),
            retry_budget: Some(Duration::from_secs(30)),
            newest_only: Some(false),
            wait_for_provider: Some(Duration::ZERO),
            overloaded_retries: Some(1),
            retry_ratio: Some(0.2),
            retry_window: Some(Duration::from_secs(10)),
            retry_floor: Some(10),
            hedge_after: Some(Duration::ZERO),
            hedge_max: Some(0),
        }
    }

    /// Sets the per-attempt timeout.
    pub const fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Turns retries on or off.
    pub const fn retry_enabled(mut self, enabled: bool) -> Self {
        self.retry_enabled = Some(enabled);
        self
    }

    /// Turns retries off: one attempt, whatever happens.
    pub const fn no_retry(self) -> Self {
        self.retry_enabled(false)
    }

    /// Sets the pause before the first retry.
    pub const fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// Sets the longest pause between attempts.
    pub const fn retry_max_after(mut self, max: Duration) -> Self {
        self.retry_max_after = Some(max);
        self
    }

    /// Sets the factor pauses grow by (1.0 keeps them constant).
    pub const fn retry_factor(mut self, factor: f64) -> Self {
        self.retry_factor = Some(factor);
        self
    }

    /// Turns random jitter of pauses on or off.
    pub const fn retry_jitter(mut self, jitter: bool) -> Self {
        self.retry_jitter = Some(jitter);
        self
    }

    /// Sets the budget of the whole call, counted from its start.
    pub const fn retry_budget(mut self, budget: Duration) -> Self {
        self.retry_budget = Some(budget);
        self
    }

    /// Routes only to the newest compatible version (or to any compatible one).
    pub const fn newest_only(mut self, newest_only: bool) -> Self {
        self.newest_only = Some(newest_only);
        self
    }

    /// Sets how long a call that finds no provider waits for one to register.
    pub const fn wait_for_provider(mut self, wait: Duration) -> Self {
        self.wait_for_provider = Some(wait);
        self
    }

    /// Sets how often a call refused as `Overloaded` is sent again.
    pub const fn overloaded_retries(mut self, retries: u32) -> Self {
        self.overloaded_retries = Some(retries);
        self
    }

    /// Sets retry throttling's ratio: retries and hedges may add at most this share of the
    /// calls made over [`retry_window`](Self::retry_window) (0.2: a fifth).
    pub const fn retry_ratio(mut self, ratio: f64) -> Self {
        self.retry_ratio = Some(ratio);
        self
    }

    /// Sets the window retry throttling counts over (1 s to 60 s).
    pub const fn retry_window(mut self, window: Duration) -> Self {
        self.retry_window = Some(window);
        self
    }

    /// Sets the retries allowed whatever the ratio, for each second of the window.
    pub const fn retry_floor(mut self, floor: u32) -> Self {
        self.retry_floor = Some(floor);
        self
    }

    /// Sets hedging: after `after` without an answer, another copy to another provider, at
    /// most `max` copies besides the first (0 turns hedging off). Idempotent functions only.
    /// An `after` below 1 ms is taken as 1 ms.
    pub const fn hedge(mut self, after: Duration, max: u32) -> Self {
        self.hedge_after = Some(after);
        self.hedge_max = Some(max);
        self
    }

    /// Whether no field is set.
    pub(crate) fn is_empty(&self) -> bool {
        *self == Self::new()
    }

    /// This layer with every field that `over` sets replaced by `over`'s value.
    pub fn overlay(self, over: &CallOptions) -> Self {
        Self {
            timeout: over.timeout.or(self.timeout),
            retry_enabled: over.retry_enabled.or(self.retry_enabled),
            retry_after: over.retry_after.or(self.retry_after),
            retry_max_after: over.retry_max_after.or(self.retry_max_after),
            retry_factor: over.retry_factor.or(self.retry_factor),
            retry_jitter: over.retry_jitter.or(self.retry_jitter),
            retry_budget: over.retry_budget.or(self.retry_budget),
            newest_only: over.newest_only.or(self.newest_only),
            wait_for_provider: over.wait_for_provider.or(self.wait_for_provider),
            overloaded_retries: over.overloaded_retries.or(self.overloaded_retries),
            retry_ratio: over.retry_ratio.or(self.retry_ratio),
            retry_window: over.retry_window.or(self.retry_window),
            retry_floor: over.retry_floor.or(self.retry_floor),
            hedge_after: over.hedge_after.or(self.hedge_after),
            hedge_max: over.hedge_max.or(self.hedge_max),
        }
    }
}
