use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use semver::Version;

use crate::options::Source;

/// What happened during a call: for a failed call's error message, for code that wants details,
/// and from [`Call::reported`](crate::Call::reported) for one that succeeded.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct CallReport {
    /// The call, as `service.function/arity`.
    pub call: String,
    /// The requirement the client put on providers' versions.
    pub requirement: String,
    /// The provider of the last attempt, or the one resolved when the call failed before one.
    pub provider: Option<ProviderRef>,
    /// The attempts, in order: every one, or the first and the last
    /// [`MAX_RECORDED_ATTEMPTS`]` / 2` of a call that made more.
    pub attempts: Vec<AttemptRecord>,
    /// How many attempts between those were left out (a long budget of quick refusals).
    pub attempts_left_out: usize,
    /// From the call's start to the error.
    pub elapsed: Duration,
    /// The call's budget (all attempts and pauses) and the layer it came from; `None` when
    /// retries were off and the call had one attempt.
    pub budget: Option<(Duration, Source)>,
    /// Whether retries were off for this call (`no_retry()`, `retry = false`); false for a call
    /// that failed before its attempts could start (nothing to send, a layer's refusal).
    pub retries_off: bool,
    /// The call's own id, for an `at_most_once` function (its provider's record keeps the call
    /// under it, and its handler reads it as `Context::call_id`): what to reconcile with when
    /// a call fails as "may have run".
    pub call_id: Option<u128>,
    /// Whether the call failed because its budget left no time for another attempt (counted by
    /// the metrics as `cluster_call_budget_exhausted_total`).
    pub(crate) budget_exhausted: bool,
}

/// A provider, as a report names it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProviderRef {
    /// The node's name.
    pub node: String,
    /// The node's address.
    pub addr: SocketAddr,
    /// The provider's version.
    pub version: Version,
}

/// One attempt of a call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AttemptRecord {
    /// The provider it went to.
    pub provider: ProviderRef,
    /// When it started, from the call's start.
    pub started: Duration,
    /// How long it took.
    pub elapsed: Duration,
    /// How it ended, in a few words.
    pub outcome: String,
    /// Why it was sent: the first, a retry, a hedge.
    pub kind: AttemptKind,
    /// Whether the call's answer came from it.
    pub answered: bool,
    /// Whether that answer came from the provider's record of at-most-once calls: the
    /// function did not run again.
    pub recalled: bool,
}

/// Why an attempt was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttemptKind {
    /// The call's first attempt.
    First,
    /// A retry after an attempt failed.
    Retry,
    /// A retry of an `at_most_once` call after it may have run, to the same provider process,
    /// which answers from its record instead of running it again.
    SameProcess,
    /// A hedge: a copy sent while an earlier attempt had not answered.
    Hedge,
}

impl fmt::Display for AttemptKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AttemptKind::First => "first",
            AttemptKind::Retry => "retry",
            AttemptKind::SameProcess => "retry on the same process",
            AttemptKind::Hedge => "hedge",
        })
    }
}

impl fmt::Display for ProviderRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}), version {}", self.node, self.addr, self.version)
    }
}

/// Formats a duration for humans: `0ms`, `250ms`, `6s`, `6.25s`.
pub(crate) struct Human(pub Duration);

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms < 1000 {
            write!(f, "{ms}ms")
        } else if ms.is_multiple_of(1000) {
            write!(f, "{}s", ms / 1000)
        } else {
            let s = format!("{:.3}", self.0.as_secs_f64());
            write!(f, "{}s", s.trim_end_matches('0'))
        }
    }
}

/// The most attempts a report lists.
pub const MAX_RECORDED_ATTEMPTS: usize = 64;

impl CallReport {
    /// Records an attempt, in the order the attempts started (a hedge that answered first is
    /// recorded before the attempt it overtook); past [`MAX_RECORDED_ATTEMPTS`], the oldest of
    /// the latest half is left out (and counted), so a report stays small whatever the budget.
    pub(crate) fn record(
        attempts: &mut Vec<AttemptRecord>,
        left_out: &mut usize,
        a: AttemptRecord,
    ) {
        if attempts.len() >= MAX_RECORDED_ATTEMPTS {
            attempts.remove(MAX_RECORDED_ATTEMPTS / 2);
            *left_out += 1;
        }
        let at = attempts
            .iter()
            .rposition(|b| b.started <= a.started)
            .map_or(0, |i| i + 1);
        attempts.insert(at, a);
    }

    /// Writes the multi-line body shared by both error types, after their first two sections.
    pub(crate) fn write_body(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f)?;
        writeln!(f, "The service:")?;
        write!(f, "  requirement: {}", self.requirement)?;
        match &self.provider {
            Some(p) => write!(f, "\n  provider: {p}")?,
            None => write!(f, "\n  provider: none found")?,
        }
        writeln!(f)?;
        writeln!(f)?;
        write!(
            f,
            "Attempts: {} in {}",
            self.attempts.len() + self.attempts_left_out,
            Human(self.elapsed)
        )?;
        match self.budget {
            Some((b, source)) => write!(f, " (budget {}, set by {source})", Human(b))?,
            None if self.retries_off => write!(f, " (retries off)")?,
            // A call that failed before its attempts could start had no budget.
            None => {}
        }
        let half = MAX_RECORDED_ATTEMPTS / 2;
        for (i, a) in self.attempts.iter().enumerate() {
            if i == half && self.attempts_left_out > 0 {
                write!(f, "\n  … {} attempts left out …", self.attempts_left_out)?;
            }
            let number = if i >= half {
                i + 1 + self.attempts_left_out
            } else {
                i + 1
            };
            let kind = match a.kind {
                AttemptKind::First | AttemptKind::Retry => String::new(),
                other => format!("[{other}] "),
            };
            write!(
                f,
                "\n  {}. at {:>7}  {kind}{} ({})  {} after {}",
                number,
                Human(a.started).to_string(),
                a.provider.node,
                a.provider.addr,
                a.outcome,
                Human(a.elapsed)
            )?;
        }
        Ok(())
    }
}

/// The report on its own, as an error shows it: the call, its provider, its attempts.
impl fmt::Display for CallReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "The call {}", self.call)?;
        if let Some(id) = self.call_id {
            write!(f, " (call id {id:032x})")?;
        }
        writeln!(f)?;
        self.write_body(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_of_many_attempts_reports_the_first_and_the_last_and_counts_the_rest() {
        let record = |i: u64| AttemptRecord {
            provider: ProviderRef {
                node: "n".into(),
                addr: ([127, 0, 0, 1], 1).into(),
                version: Version::new(1, 0, 0),
            },
            started: Duration::from_millis(i),
            elapsed: Duration::ZERO,
            outcome: format!("refused {i}"),
            kind: AttemptKind::Retry,
            answered: false,
            recalled: false,
        };
        let (mut attempts, mut left_out) = (Vec::new(), 0);
        for i in 0..10_000 {
            CallReport::record(&mut attempts, &mut left_out, record(i));
        }
        assert_eq!(attempts.len(), MAX_RECORDED_ATTEMPTS);
        assert_eq!(left_out, 10_000 - MAX_RECORDED_ATTEMPTS);
        assert_eq!(attempts[0].outcome, "refused 0");
        assert_eq!(attempts[MAX_RECORDED_ATTEMPTS - 1].outcome, "refused 9999");
        let report = CallReport {
            call: "s.f/0".into(),
            requirement: "^1".into(),
            provider: None,
            attempts,
            attempts_left_out: left_out,
            elapsed: Duration::from_secs(10),
            budget: None,
            retries_off: false,
            call_id: None,
            budget_exhausted: false,
        };
        struct Body<'a>(&'a CallReport);
        impl fmt::Display for Body<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.write_body(f)
            }
        }
        let text = Body(&report).to_string();
        assert!(text.contains("Attempts: 10000 in"), "{text}");
        assert!(text.contains("9936 attempts left out"), "{text}");
        assert!(text.contains("10000. at"), "{text}");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(Human(Duration::ZERO).to_string(), "0ms");
        assert_eq!(Human(Duration::from_millis(250)).to_string(), "250ms");
        assert_eq!(Human(Duration::from_secs(6)).to_string(), "6s");
        assert_eq!(Human(Duration::from_millis(6250)).to_string(), "6.25s");
    }
}
