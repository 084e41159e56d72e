use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use semver::Version;

use crate::options::Source;

/// What happened during a failed call, for the error's message and for code that wants details.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CallReport {
    /// The call, as `service.function/arity`.
    pub call: String,
    /// The requirement the client put on providers' versions.
    pub requirement: String,
    /// The provider of the last attempt, or the one resolved when the call failed before one.
    pub provider: Option<ProviderRef>,
    /// Every attempt, in order.
    pub attempts: Vec<AttemptRecord>,
    /// From the call's start to the error.
    pub elapsed: Duration,
    /// The call's budget (all attempts and pauses) and the layer it came from; `None` when
    /// retries were off and the call had one attempt.
    pub budget: Option<(Duration, Source)>,
    /// Whether retries were off for this call (`no_retry()`, `retry = false`); false for a call
    /// that failed before its attempts could start (nothing to send, a layer's refusal).
    pub retries_off: bool,
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

impl CallReport {
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
            self.attempts.len(),
            Human(self.elapsed)
        )?;
        match self.budget {
            Some((b, source)) => write!(f, " (budget {}, set by {source})", Human(b))?,
            None if self.retries_off => write!(f, " (retries off)")?,
            // A call that failed before its attempts could start had no budget.
            None => {}
        }
        for (i, a) in self.attempts.iter().enumerate() {
            write!(
                f,
                "\n  {}. at {:>7}  {} ({})  {} after {}",
                i + 1,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(Human(Duration::ZERO).to_string(), "0ms");
        assert_eq!(Human(Duration::from_millis(250)).to_string(), "250ms");
        assert_eq!(Human(Duration::from_secs(6)).to_string(), "6s");
        assert_eq!(Human(Duration::from_millis(6250)).to_string(), "6.25s");
    }
}
