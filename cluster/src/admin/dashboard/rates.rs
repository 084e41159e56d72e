//! Calls per second and error rates per function, for the dashboard, from the node's own
//! metrics text: counts now against counts sampled up to a minute ago.
//!
//! The counts come from the text the node's recorder renders (`cluster_calls_total`,
//! `cluster_call_outcomes_total`, `cluster_requests_total`): the recorder keeps no other
//! readable form, and the text is this crate's own, in Prometheus's format.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

/// A function, as the metrics label it: service, function.
pub(crate) type Function = (String, String);

/// A latency histogram's cumulative counts, by upper bound in seconds (`+Inf` last).
pub(crate) type Buckets = Vec<(f64, f64)>;

/// The counts of one function at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Counts {
    /// Calls this node ended, as a caller.
    pub(crate) calls: f64,
    /// Of those, the ones that did not end `ok`.
    pub(crate) call_errors: f64,
    /// Requests this node served or refused, as a provider.
    pub(crate) requests: f64,
    /// Of those, the ones not `answered` (or `recalled` from the at-most-once record).
    pub(crate) request_errors: f64,
    /// `cluster_call_duration_seconds`: calls, from start to end.
    pub(crate) call_latency: Buckets,
    /// `cluster_handler_duration_seconds`: handlers, on this node.
    pub(crate) handler_latency: Buckets,
}

/// Every function's counts at one moment.
pub(crate) type Sample = BTreeMap<Function, Counts>;

/// How far back rates look.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// The most samples kept: one per upkeep (5 s) over [`WINDOW`], and a little room.
const MAX_SAMPLES: usize = 16;

/// Samples of the last [`WINDOW`].
#[derive(Default)]
pub(crate) struct History {
    samples: VecDeque<(Instant, Sample)>,
}

impl History {
    /// Keeps `sample`, taken at `at`; forgets what is older than the window.
    pub(crate) fn keep(&mut self, at: Instant, sample: Sample) {
        while self
            .samples
            .front()
            .is_some_and(|(then, _)| at.saturating_duration_since(*then) > WINDOW)
        {
            self.samples.pop_front();
        }
        if self.samples.len() == MAX_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((at, sample));
    }

    /// Per function: calls and requests per second, and the share of each that failed, from
    /// the oldest sample kept to `now` (a function new since then counts from zero).
    pub(crate) fn rates(&self, at: Instant, now: &Sample) -> (Duration, Vec<(Function, Rates)>) {
        // The oldest sample still within the window of `at` (samples are kept at each upkeep,
        // and a page may be asked for up to an upkeep after the last).
        let Some((then, old)) = self
            .samples
            .iter()
            .find(|(then, _)| at.saturating_duration_since(*then) <= WINDOW)
        else {
            return (Duration::ZERO, Vec::new());
        };
        let span = at.saturating_duration_since(*then);
        let seconds = span.as_secs_f64().max(1e-3);
        let rates = now
            .iter()
            // A function nobody has called or served: its series exist, at zero.
            .filter(|(_, counts)| counts.calls > 0.0 || counts.requests > 0.0)
            .map(|(function, counts)| {
                let was = old.get(function).cloned().unwrap_or_default();
                // A counter that went down was reset (a restart): count from zero.
                let delta = |now: f64, was: f64| if now >= was { now - was } else { now };
                let calls = delta(counts.calls, was.calls);
                let call_errors = delta(counts.call_errors, was.call_errors);
                let requests = delta(counts.requests, was.requests);
                let request_errors = delta(counts.request_errors, was.request_errors);
                let share = |errors: f64, all: f64| (all > 0.0).then(|| errors / all);
                let calls_took = since(&counts.call_latency, &was.call_latency);
                let handlers_took = since(&counts.handler_latency, &was.handler_latency);
                (
                    function.clone(),
                    Rates {
                        calls: calls / seconds,
                        call_errors: share(call_errors, calls),
                        requests: requests / seconds,
                        request_errors: share(request_errors, requests),
                        call_latency: [quantile(&calls_took, 0.5), quantile(&calls_took, 0.99)],
                        handler_latency: [
                            quantile(&handlers_took, 0.5),
                            quantile(&handlers_took, 0.99),
                        ],
                    },
                )
            })
            .collect();
        (span, rates)
    }
}

/// One function's rates over the window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rates {
    pub(crate) calls: f64,
    /// The share of calls that failed; `None` without calls.
    pub(crate) call_errors: Option<f64>,
    pub(crate) requests: f64,
    pub(crate) request_errors: Option<f64>,
    /// p50 and p99 of the calls' durations, in seconds; `None` without calls.
    pub(crate) call_latency: [Option<f64>; 2],
    /// p50 and p99 of the handlers' durations here.
    pub(crate) handler_latency: [Option<f64>; 2],
}

/// The counts of `now` less those of `was`, bucket by bucket (a reset counts from zero).
fn since(now: &Buckets, was: &Buckets) -> Buckets {
    now.iter()
        .map(|&(le, count)| {
            let before = was
                .iter()
                .find(|(bound, _)| *bound == le)
                .map_or(0.0, |(_, c)| *c);
            (
                le,
                if count >= before {
                    count - before
                } else {
                    count
                },
            )
        })
        .collect()
}

/// The `q` quantile of a histogram, as Prometheus's `histogram_quantile` estimates it: linear
/// within the bucket it falls in; the largest finite bound when it falls in `+Inf`.
fn quantile(buckets: &Buckets, q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower.0);
            }
            let within = count - lower.1;
            let share = if within > 0.0 {
                (rank - lower.1) / within
            } else {
                1.0
            };
            return Some(lower.0 + (le - lower.0) * share);
        }
        lower = (le, count);
    }
    Some(lower.0)
}

/// The counts in a Prometheus text rendering.
pub(crate) fn parse(text: &str) -> Sample {
    let mut sample = Sample::new();
    for line in text.lines() {
        let Some((name, labels, value)) = metric(line) else {
            continue;
        };
        let label = |key: &str| {
            labels
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let (Some(service), Some(function)) = (label("service"), label("function")) else {
            continue;
        };
        let counts = sample
            .entry((service.to_owned(), function.to_owned()))
            .or_default();
        if let Some(le) = label("le") {
            let le: f64 = match le {
                "+Inf" => f64::INFINITY,
                le => match le.parse() {
                    Ok(le) => le,
                    Err(_) => continue,
                },
            };
            let buckets = match name {
                "cluster_call_duration_seconds_bucket" => &mut counts.call_latency,
                "cluster_handler_duration_seconds_bucket" => &mut counts.handler_latency,
                _ => continue,
            };
            buckets.push((le, value));
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            continue;
        }
        match (name, label("outcome")) {
            ("cluster_calls_total", _) => {}
            ("cluster_call_outcomes_total", Some("ok" | "dropped")) => counts.calls += value,
            ("cluster_call_outcomes_total", Some(_)) => {
                counts.calls += value;
                counts.call_errors += value;
            }
            ("cluster_requests_total", Some("answered" | "recalled")) => counts.requests += value,
            ("cluster_requests_total", Some(_)) => {
                counts.requests += value;
                counts.request_errors += value;
            }
            _ => {}
        }
    }
    sample
}

/// A sample line read: its metric's name, its labels (values unescaped), its value.
type Line<'a> = (&'a str, Vec<(String, String)>, f64);

/// A sample line: `name{key="value",…} number`.
fn metric(line: &str) -> Option<Line<'_>> {
    if line.starts_with('#') || line.is_empty() {
        return None;
    }
    match line.split_once('{') {
        Some((name, rest)) => labelled(name, rest),
        None => {
            let (name, value) = line.split_once(' ')?;
            Some((name, Vec::new(), value.trim().parse().ok()?))
        }
    }
}

/// The labels and the value after a metric's name: `key="value",…} number`.
fn labelled<'a>(name: &'a str, mut rest: &str) -> Option<Line<'a>> {
    let mut labels = Vec::new();
    loop {
        let eq = rest.find('=')?;
        let key = rest[..eq].to_owned();
        let body = rest[eq + 1..].strip_prefix('"')?;
        let mut value = String::new();
        let mut escaped = false;
        let mut end = None;
        for (i, c) in body.char_indices() {
            match (escaped, c) {
                (true, 'n') => {
                    value.push('\n');
                    escaped = false;
                }
                (true, c) => {
                    value.push(c);
                    escaped = false;
                }
                (false, '\\') => escaped = true,
                (false, '"') => {
                    end = Some(i + 1);
                    break;
                }
                (false, c) => value.push(c),
            }
        }
        labels.push((key, value));
        rest = &body[end?..];
        if let Some(tail) = rest.strip_prefix('}') {
            return Some((name, labels, tail.trim().parse().ok()?));
        }
        rest = rest.strip_prefix(',')?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP cluster_calls_total Calls started.
# TYPE cluster_calls_total counter
cluster_calls_total{service="search",function="find"} 10
cluster_call_outcomes_total{service="search",function="find",outcome="ok"} 7
cluster_call_outcomes_total{service="search",function="find",outcome="timeout"} 3
cluster_requests_total{service="odd \"name\"",function="f\\g",outcome="answered"} 4
cluster_requests_total{service="odd \"name\"",function="f\\g",outcome="panicked"} 1
cluster_call_duration_seconds_bucket{service="search",function="find",le="0.1"} 9
cluster_call_duration_seconds_bucket{service="search",function="find",le="0.01"} 6
cluster_call_duration_seconds_bucket{service="search",function="find",le="+Inf"} 10
cluster_registry_nodes 3
"#;

    #[test]
    fn counts_are_read_per_function_with_escaped_labels() {
        let sample = parse(TEXT);
        let find = &sample[&("search".to_owned(), "find".to_owned())];
        assert_eq!((find.calls, find.call_errors), (10.0, 3.0));
        let odd = &sample[&("odd \"name\"".to_owned(), "f\\g".to_owned())];
        assert_eq!((odd.requests, odd.request_errors), (5.0, 1.0));
        assert_eq!(sample.len(), 2);
        assert_eq!(
            find.call_latency,
            vec![(0.01, 6.0), (0.1, 9.0), (f64::INFINITY, 10.0)]
        );
        assert!(parse("cluster_calls_total{service=\"x\" 1\n{{{\n").is_empty());
    }

    #[test]
    fn quantiles_are_interpolated_within_their_bucket() {
        let buckets = vec![(0.01, 6.0), (0.1, 9.0), (f64::INFINITY, 10.0)];
        // The 5th of 10 falls in the first bucket, 5/6 of the way up.
        let p50 = quantile(&buckets, 0.5).unwrap();
        assert!((p50 - 0.01 * 5.0 / 6.0).abs() < 1e-12, "{p50}");
        // The 7.5th: half way into the second bucket.
        let p75 = quantile(&buckets, 0.75).unwrap();
        assert!((p75 - 0.055).abs() < 1e-12, "{p75}");
        // In +Inf: the largest finite bound.
        assert_eq!(quantile(&buckets, 0.99), Some(0.1));
        assert_eq!(quantile(&vec![(0.1, 0.0), (f64::INFINITY, 0.0)], 0.5), None);
        let was = vec![(0.01, 6.0), (0.1, 6.0), (f64::INFINITY, 6.0)];
        assert_eq!(
            since(&buckets, &was),
            vec![(0.01, 0.0), (0.1, 3.0), (f64::INFINITY, 4.0)]
        );
    }

    #[test]
    fn rates_are_over_the_oldest_sample_in_the_window() {
        let start = Instant::now();
        let mut history = History::default();
        history.keep(start, parse(TEXT));
        let mut later = parse(TEXT);
        let find = later
            .get_mut(&("search".to_owned(), "find".to_owned()))
            .unwrap();
        find.calls += 20.0;
        find.call_errors += 5.0;
        let (span, rates) = history.rates(start + Duration::from_secs(10), &later);
        assert_eq!(span, Duration::from_secs(10));
        let (_, find) = rates.iter().find(|(f, _)| f.1 == "find").unwrap();
        assert_eq!(find.calls, 2.0);
        assert_eq!(find.call_errors, Some(0.25));
        assert_eq!(find.requests, 0.0);
        assert_eq!(find.request_errors, None);
        // Past the window, the old sample is not used, and forgotten once another is kept.
        let (span, _) = history.rates(start + WINDOW + Duration::from_secs(3), &later);
        assert_eq!(span, Duration::ZERO, "no sample within the window");
        history.keep(start + WINDOW - Duration::from_secs(2), later.clone());
        let (span, _) = history.rates(start + WINDOW + Duration::from_secs(3), &later);
        assert_eq!(span, Duration::from_secs(5));
    }
}
