use std::fmt;
use std::time::Duration;

use super::CallOptions;

/// The layer a resolved option came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Source {
    /// [`CallOptions::library_default`].
    Library,
    /// The provider's `#[service(...)]` attribute.
    ProviderService,
    /// The provider's `#[call(...)]` attribute on the function.
    ProviderFunction,
    /// The service-level options of the trait this client was built from: used, with
    /// [`DeclaredFunction`](Self::DeclaredFunction), while no provider is known, so that a
    /// call that waits for one runs on the budget its service declares, not the library's.
    DeclaredService,
    /// The function-level options of the trait this client was built from.
    DeclaredFunction,
    /// The client's defaults (`with_options`).
    Client,
    /// The override on this one call.
    Call,
    /// The deadline of the handler the call was made in (`docs/calls.md`, a call inside a
    /// call), when it ends sooner than the call's own budget.
    Caller,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Library => "the library default",
            Source::ProviderService => "the provider's service options",
            Source::ProviderFunction => "the provider's function options",
            Source::DeclaredService => "the service's options in this client's build",
            Source::DeclaredFunction => "the function's options in this client's build",
            Source::Client => "the client's defaults",
            Source::Call => "this call",
            Source::Caller => "the calling handler's deadline",
        })
    }
}

/// How failed attempts are retried, fully resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Whether to retry at all.
    pub enabled: bool,
    /// The first pause.
    pub after: Duration,
    /// The longest pause.
    pub max_after: Duration,
    /// Growth factor of the pauses, at least 1.0.
    pub factor: f64,
    /// Random jitter on the pauses.
    pub jitter: bool,
    /// The whole call's budget, from its start.
    pub budget: Duration,
    /// How often an `Overloaded` refusal is sent again.
    pub overloaded: u32,
    /// Retry throttling: the share of calls retries and hedges may add, over `window`.
    pub ratio: f64,
    /// The window `ratio` counts over.
    pub window: Duration,
    /// Retries a second allowed whatever the ratio.
    pub floor: u32,
}

/// Hedging, fully resolved: `max` copies besides the first, one every `after` without an
/// answer. Off when `max` is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HedgePolicy {
    /// How long an attempt goes unanswered before the next copy: at least
    /// [`MIN_HEDGE_AFTER`], whatever a layer says.
    pub after: Duration,
    /// The most copies besides the first.
    pub max: u32,
}

/// Call options after the merge: every field set, each with the layer it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct ResolvedOptions {
    /// Per-attempt timeout.
    pub timeout: Duration,
    /// The retry policy.
    pub retry: RetryPolicy,
    /// How long a call that finds no provider waits for one, from its start.
    pub wait_for_provider: Duration,
    /// Hedging (idempotent functions only).
    pub hedge: HedgePolicy,
    /// Where each field came from, in the order of [`CallOptions`]' fields: timeout,
    /// retry_enabled, retry_after, retry_max_after, retry_factor, retry_jitter, retry_budget,
    /// wait_for_provider, overloaded_retries, retry_ratio, retry_window, retry_floor,
    /// hedge_after, hedge_max.
    pub sources: [Source; 14],
}

// A pause factor outside this range is treated as a misconfiguration (it may come from another
// node's registry entry) and clamped: below 1 pauses would shrink towards zero, above it they
// overflow the budget after a step or two anyway.
const FACTOR_RANGE: (f64, f64) = (1.0, 100.0);

/// Retry throttling's ratio, window and floor are clamped to these (a remote entry may say
/// anything): past a ratio of 10 there is no throttling to speak of, and the window's slots
/// hold a minute (`client/throttle.rs`).
const RATIO_RANGE: (f64, f64) = (0.0, 10.0);
const WINDOW_RANGE: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));
const MAX_FLOOR: u32 = 100_000;
/// The most hedges of one call: each is a whole attempt in flight.
pub const MAX_HEDGES: u32 = 8;

/// The shortest wait before a hedge. An `after` of zero (which a provider's registry entry or a
/// call's `hedge(...)` may say; `#[service]` refuses it) would send every copy at once, spending
/// the retry allowance of the whole window on one call.
pub const MIN_HEDGE_AFTER: Duration = Duration::from_millis(1);

fn clamp_finite(value: f64, (low, high): (f64, f64)) -> f64 {
    if value.is_finite() {
        value.clamp(low, high)
    } else {
        low
    }
}

/// The shortest pause between attempts. A pause of zero (which a provider's registry entry may
/// set) would retry an instant refusal as fast as the CPU allows for the whole budget.
pub const MIN_RETRY_PAUSE: Duration = Duration::from_millis(10);

impl Source {
    /// Whether the layer is the caller's own code's: the client's defaults or the call's.
    fn is_callers(self) -> bool {
        matches!(self, Source::Client | Source::Call)
    }
}

/// Why a call under `layers` (lowest first) would allow no attempt, if it would: the timeout
/// or the budget the caller's own layers (the client's defaults, the call's overrides) leave
/// it is zero. What the call path refuses at once, as `RpcErrorKind::InvalidOptions`. The
/// other layers' zeros are taken as unset by [`ResolvedOptions::merge`].
pub(crate) fn refused(layers: &[(Source, &CallOptions)]) -> Option<String> {
    let callers = || layers.iter().rev().filter(|(s, _)| s.is_callers());
    let timeout = callers().find_map(|(source, l)| Some((source, l.timeout?)));
    let budget = callers().find_map(|(source, l)| Some((source, l.retry_budget?)));
    for (name, given) in [("timeout", timeout), ("budget", budget)] {
        if let Some((source, Duration::ZERO)) = given {
            return Some(format!(
                "{name} is 0s, set by {source}; give a positive duration"
            ));
        }
    }
    None
}

impl ResolvedOptions {
    /// Merges `layers` (lowest first) over the library default, field by field. A zero
    /// timeout or budget from a layer other than [`Source::Client`] and [`Source::Call`] is
    /// taken as unset, as a nonsense factor is clamped: it may come from another node.
    pub fn merge(layers: &[(Source, &CallOptions)]) -> Self {
        let base = CallOptions::library_default();
        let mut sources = [Source::Library; 14];
        let mut merged = base;
        for (source, layer) in layers {
            // A zero timeout or budget would allow no attempt. From the caller's own layers the
            // call path refuses it (`refused`); from any other (a provider's registry entry,
            // which another node wrote, or a description built by hand) it is taken as unset,
            // and the layer below decides: a provider cannot make its callers spin.
            let cleaned;
            let layer = if !source.is_callers()
                && (layer.timeout == Some(Duration::ZERO)
                    || layer.retry_budget == Some(Duration::ZERO))
            {
                cleaned = CallOptions {
                    timeout: layer.timeout.filter(|t| !t.is_zero()),
                    retry_budget: layer.retry_budget.filter(|b| !b.is_zero()),
                    ..**layer
                };
                &cleaned
            } else {
                *layer
            };
            let set = [
                layer.timeout.is_some(),
                layer.retry_enabled.is_some(),
                layer.retry_after.is_some(),
                layer.retry_max_after.is_some(),
                layer.retry_factor.is_some(),
                layer.retry_jitter.is_some(),
                layer.retry_budget.is_some(),
                layer.wait_for_provider.is_some(),
                layer.overloaded_retries.is_some(),
                layer.retry_ratio.is_some(),
                layer.retry_window.is_some(),
                layer.retry_floor.is_some(),
                layer.hedge_after.is_some(),
                layer.hedge_max.is_some(),
            ];
            for (slot, is_set) in sources.iter_mut().zip(set) {
                if is_set {
                    *slot = *source;
                }
            }
            merged = merged.overlay(layer);
        }
        // `library_default` sets every field, so each unwrap_or below is only a formality.
        let factor = merged.retry_factor.unwrap_or(1.0);
        let factor = if factor.is_finite() {
            factor.clamp(FACTOR_RANGE.0, FACTOR_RANGE.1)
        } else {
            1.0
        };
        let timeout = merged.timeout.unwrap_or(Duration::from_secs(10));
        let mut budget = merged.retry_budget.unwrap_or_default();
        // A timeout longer than the budget, set by a more specific layer than the budget (a
        // function's `timeout = "60s"` under its service's 30 s budget, a call's
        // `.timeout(120s)`), is meant: the budget grows to one full attempt. A budget set by
        // the more specific layer (a call's `.budget(3s)`) cuts the attempt instead.
        if timeout > budget && sources[0] > sources[6] {
            budget = timeout;
            sources[6] = sources[0];
        }
        Self {
            timeout,
            retry: RetryPolicy {
                enabled: merged.retry_enabled.unwrap_or(true),
                after: merged.retry_after.unwrap_or_default().max(MIN_RETRY_PAUSE),
                max_after: merged
                    .retry_max_after
                    .unwrap_or(Duration::MAX)
                    .max(MIN_RETRY_PAUSE),
                factor,
                jitter: merged.retry_jitter.unwrap_or(false),
                budget,
                overloaded: merged.overloaded_retries.unwrap_or(1),
                ratio: clamp_finite(merged.retry_ratio.unwrap_or(0.2), RATIO_RANGE),
                window: merged
                    .retry_window
                    .unwrap_or(Duration::from_secs(10))
                    .clamp(WINDOW_RANGE.0, WINDOW_RANGE.1),
                floor: merged.retry_floor.unwrap_or(10).min(MAX_FLOOR),
            },
            wait_for_provider: merged.wait_for_provider.unwrap_or_default(),
            hedge: HedgePolicy {
                after: merged
                    .hedge_after
                    .unwrap_or(MIN_HEDGE_AFTER)
                    .max(MIN_HEDGE_AFTER),
                max: merged.hedge_max.unwrap_or(0).min(MAX_HEDGES),
            },
            sources,
        }
    }

    /// The layer the retry budget came from.
    pub fn budget_source(&self) -> Source {
        self.sources[6]
    }

    /// The layer the timeout came from.
    pub fn timeout_source(&self) -> Source {
        self.sources[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn each_field_comes_from_the_highest_layer_that_sets_it() {
        let service = CallOptions::new()
            .timeout(5 * S)
            .retry_after(2 * S)
            .retry_budget(30 * S);
        let function = CallOptions::new().timeout(20 * S);
        let call = CallOptions::new().retry_after(Duration::from_millis(100));
        let r = ResolvedOptions::merge(&[
            (Source::ProviderService, &service),
            (Source::ProviderFunction, &function),
            (Source::Call, &call),
        ]);
        assert_eq!(r.timeout, 20 * S);
        assert_eq!(r.timeout_source(), Source::ProviderFunction);
        assert_eq!(r.retry.after, Duration::from_millis(100));
        // The seed's trap: a per-call retry(after) kept none of the provider's retry list and
        // filled the budget from the client's compiled-in default. Here the budget stays.
        assert_eq!(r.retry.budget, 30 * S);
        assert_eq!(r.budget_source(), Source::ProviderService);
        assert_eq!(r.retry.factor, 2.0);
        assert_eq!(r.sources[4], Source::Library);
    }

    #[test]
    fn a_longer_timeout_from_a_more_specific_layer_makes_room_for_one_attempt() {
        let service = CallOptions::new().retry_budget(30 * S);
        let function = CallOptions::new().timeout(60 * S);
        let r = ResolvedOptions::merge(&[
            (Source::ProviderService, &service),
            (Source::ProviderFunction, &function),
        ]);
        assert_eq!(
            (r.timeout, r.retry.budget, r.budget_source()),
            (60 * S, 60 * S, Source::ProviderFunction)
        );

        let call = CallOptions::new().retry_budget(3 * S);
        let r =
            ResolvedOptions::merge(&[(Source::ProviderFunction, &function), (Source::Call, &call)]);
        assert_eq!(
            (r.timeout, r.retry.budget),
            (60 * S, 3 * S),
            "the call's own budget cuts the attempt"
        );

        let call = CallOptions::new().timeout(120 * S);
        let r =
            ResolvedOptions::merge(&[(Source::ProviderService, &service), (Source::Call, &call)]);
        assert_eq!(r.retry.budget, 120 * S);
    }

    #[test]
    fn a_layer_can_turn_retry_off_and_a_higher_one_on_again() {
        let service = CallOptions::new().no_retry();
        let off = ResolvedOptions::merge(&[(Source::ProviderService, &service)]);
        assert!(!off.retry.enabled);
        let client = CallOptions::new().retry_enabled(true);
        let on = ResolvedOptions::merge(&[
            (Source::ProviderService, &service),
            (Source::Client, &client),
        ]);
        assert!(on.retry.enabled);
    }

    #[test]
    fn a_nonsense_factor_from_a_remote_entry_is_clamped() {
        for (given, expected) in [
            (f64::NAN, 1.0),
            (0.1, 1.0),
            (-3.0, 1.0),
            (1e9, 100.0),
            (2.0, 2.0),
        ] {
            let layer = CallOptions::new().retry_factor(given);
            let r = ResolvedOptions::merge(&[(Source::ProviderService, &layer)]);
            assert_eq!(r.retry.factor, expected, "factor {given}");
        }
    }

    #[test]
    fn a_zero_timeout_or_budget_from_another_nodes_layer_is_taken_as_unset() {
        let service = CallOptions::new()
            .timeout(5 * S)
            .retry_budget(Duration::ZERO);
        let function = CallOptions::new().timeout(Duration::ZERO);
        let r = ResolvedOptions::merge(&[
            (Source::ProviderService, &service),
            (Source::ProviderFunction, &function),
        ]);
        assert_eq!(
            (r.timeout, r.timeout_source()),
            (5 * S, Source::ProviderService)
        );
        assert_eq!(
            (r.retry.budget, r.budget_source()),
            (30 * S, Source::Library)
        );
        let declared = CallOptions::new().timeout(Duration::ZERO);
        let r = ResolvedOptions::merge(&[(Source::DeclaredFunction, &declared)]);
        assert_eq!((r.timeout, r.timeout_source()), (10 * S, Source::Library));
        assert_eq!(
            refused(&[(Source::ProviderFunction, &function)]),
            None,
            "not the caller's to fix"
        );
    }

    #[test]
    fn the_callers_zero_timeout_or_budget_is_refused_naming_its_layer() {
        let zero = CallOptions::new().timeout(Duration::ZERO);
        let fine = CallOptions::new().timeout(S);
        assert_eq!(
            refused(&[(Source::Client, &CallOptions::new()), (Source::Call, &zero)]).as_deref(),
            Some("timeout is 0s, set by this call; give a positive duration")
        );
        assert_eq!(
            refused(&[(Source::Client, &zero), (Source::Call, &fine)]),
            None,
            "the call's own timeout overrides the client's zero"
        );
        let budget = CallOptions::new().retry_budget(Duration::ZERO);
        assert_eq!(
            refused(&[
                (Source::Client, &budget),
                (Source::Call, &CallOptions::new())
            ])
            .as_deref(),
            Some("budget is 0s, set by the client's defaults; give a positive duration")
        );
        assert_eq!(
            refused(&[(Source::Client, &fine), (Source::Call, &fine)]),
            None
        );
    }

    #[test]
    fn a_hedge_after_below_a_millisecond_is_taken_as_one() {
        let provider = CallOptions::new().hedge(Duration::ZERO, 2);
        let r = ResolvedOptions::merge(&[(Source::ProviderFunction, &provider)]);
        assert_eq!((r.hedge.after, r.hedge.max), (MIN_HEDGE_AFTER, 2));
        let call = CallOptions::new().hedge(Duration::from_nanos(10), 1);
        let r =
            ResolvedOptions::merge(&[(Source::ProviderFunction, &provider), (Source::Call, &call)]);
        assert_eq!(r.hedge.after, MIN_HEDGE_AFTER);
        let call = CallOptions::new().hedge(Duration::from_millis(20), 1);
        let r = ResolvedOptions::merge(&[(Source::Call, &call)]);
        assert_eq!(r.hedge.after, Duration::from_millis(20));
    }
}
