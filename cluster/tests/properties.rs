//! Properties of the call options, for any values a layer may hold (a provider's registry
//! entry comes from another node, so any duration or factor may arrive): merging never panics,
//! every field comes from the highest layer that sets it (a zero timeout from a provider's layer
//! counts as unset), the pause factor is clamped and pauses are at least `MIN_RETRY_PAUSE`.

use std::time::Duration;

use cluster::CallOptions;
use cluster::options::{MIN_RETRY_PAUSE, ResolvedOptions, Source};
use proptest::prelude::*;

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        // "26280h": three years, past the one-year clamp of a deadline handed to tarpc.
        Just(Duration::from_secs(26_280 * 3600)),
        (any::<u64>(), 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
        (0..100_000u64).prop_map(Duration::from_millis),
    ]
}

fn factor() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        -1e3..1e3f64,
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
    ]
}

prop_compose! {
    fn layer()(
        timeout in proptest::option::of(duration()),
        enabled in proptest::option::of(any::<bool>()),
        after in proptest::option::of(duration()),
        max_after in proptest::option::of(duration()),
        factor in proptest::option::of(factor()),
        jitter in proptest::option::of(any::<bool>()),
        budget in proptest::option::of(duration()),
    ) -> CallOptions {
        let mut o = CallOptions::new();
        if let Some(t) = timeout { o = o.timeout(t); }
        if let Some(e) = enabled { o = o.retry_enabled(e); }
        if let Some(a) = after { o = o.retry_after(a); }
        if let Some(m) = max_after { o = o.retry_max_after(m); }
        if let Some(f) = factor { o = o.retry_factor(f); }
        if let Some(j) = jitter { o = o.retry_jitter(j); }
        if let Some(b) = budget { o = o.retry_budget(b); }
        o
    }
}

const SOURCES: [Source; 4] = [
    Source::ProviderService,
    Source::ProviderFunction,
    Source::Client,
    Source::Call,
];

proptest! {
    #[test]
    fn merging_any_layers_takes_each_field_from_the_highest_and_clamps_the_factor(
        layers in proptest::collection::vec(layer(), 0..=4)
    ) {
        let layers: Vec<(Source, &CallOptions)> = SOURCES.iter().copied().zip(&layers).collect();
        let merged = ResolvedOptions::merge(&layers);
        let f = merged.retry.factor;
        prop_assert!((1.0..=100.0).contains(&f), "factor {}", f);
        let set: Option<f64> = layers.iter().rev().find_map(|(_, l)| l.retry_factor);
        match set {
            Some(x) if x.is_finite() => prop_assert_eq!(f, x.clamp(1.0, 100.0)),
            Some(_) => prop_assert_eq!(f, 1.0),
            None => {}
        }
        // A zero from a layer other than the caller's own is taken as unset.
        let callers = |source: &Source| matches!(source, Source::Client | Source::Call);
        let timeout = layers
            .iter()
            .rev()
            .find(|(s, l)| l.timeout.is_some_and(|t| !t.is_zero() || callers(s)));
        match timeout {
            Some((source, l)) => {
                prop_assert_eq!(Some(merged.timeout), l.timeout);
                prop_assert_eq!(merged.timeout_source(), *source);
            }
            None => prop_assert_eq!(merged.timeout_source(), Source::Library),
        }
        // Pauses are at least MIN_RETRY_PAUSE, whatever a layer says.
        let after = layers.iter().rev().find_map(|(_, l)| l.retry_after);
        if let Some(after) = after {
            prop_assert_eq!(merged.retry.after, after.max(MIN_RETRY_PAUSE));
        }
        prop_assert!(merged.retry.after >= MIN_RETRY_PAUSE);
        prop_assert!(merged.retry.max_after >= MIN_RETRY_PAUSE);
        // A budget is never shorter than a timeout set by a more specific layer.
        if merged.timeout_source() > merged.budget_source() {
            prop_assert!(merged.retry.budget >= merged.timeout);
        }
        // And every value can be shown, however large.
        for (_, l) in &layers {
            let _ = l.to_string();
        }
        let _ = format!("{merged:?}");
    }
}
