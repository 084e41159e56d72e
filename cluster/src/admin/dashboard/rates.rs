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

/// The counts of one function at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Counts {
    /// Calls this node ended, as a caller.
    pub(crate) calls: f64,
    /// Of those, the ones that did not end `ok`.
    pub(crate) call_errors: f64,
    /// Requests this node served or refused, as a provider.
    pub(crate) requests: f64,
    /// Of those, the ones not `answered` (or `recalled` from the at-most-once record).
    pub(crate) request_errors: f64,
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
        let Some((then, old)) = self.samples.front() else {
            return (Duration::ZERO, Vec::new());
        };
        let span = at.saturating_duration_since(*then);
        let seconds = span.as_secs_f64().max(1e-3);
        let rates = now
            .iter()
            // A function nobody has called or served: its series exist, at zero.
            .filter(|(_, counts)| counts.calls > 0.0 || counts.requests > 0.0)
            .map(|(function, counts)| {
                let was = old.get(function).copied().unwrap_or_default();
                // A counter that went down was reset (a restart): count from zero.
                let delta = |now: f64, was: f64| if now >= was { now - was } else { now };
                let calls = delta(counts.calls, was.calls);
                let call_errors = delta(counts.call_errors, was.call_errors);
                let requests = delta(counts.requests, was.requests);
                let request_errors = delta(counts.request_errors, was.request_errors);
                let share = |errors: f64, all: f64| (all > 0.0).then(|| errors / all);
                (
                    function.clone(),
                    Rates {
                        calls: calls / seconds,
                        call_errors: share(call_errors, calls),
                        requests: requests / seconds,
                        request_errors: share(request_errors, requests),
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
cluster_registry_nodes 3
"#;

    #[test]
    fn counts_are_read_per_function_with_escaped_labels() {
        let sample = parse(TEXT);
        let find = sample[&("search".to_owned(), "find".to_owned())];
        assert_eq!((find.calls, find.call_errors), (10.0, 3.0));
        let odd = sample[&("odd \"name\"".to_owned(), "f\\g".to_owned())];
        assert_eq!((odd.requests, odd.request_errors), (5.0, 1.0));
        assert_eq!(sample.len(), 2);
        assert!(parse("cluster_calls_total{service=\"x\" 1\n{{{\n").is_empty());
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
        // Past the window, the old sample is forgotten.
        history.keep(start + WINDOW + Duration::from_secs(1), later.clone());
        let (span, _) = history.rates(start + WINDOW + Duration::from_secs(2), &later);
        assert_eq!(span, Duration::from_secs(1));
    }
}
