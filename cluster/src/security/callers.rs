//! Which callers a service admits: node-name patterns, checked against the caller's verified
//! name (its certificate's) before the handler runs. A refused caller gets
//! [`Reason::Unauthorized`](crate::Reason::Unauthorized), which is never retried.

use crate::server::{DispatchFuture, Provide};
use crate::service::ServiceDescription;

/// The callers a service admits: node names, where `*` stands for any run of characters and
/// `?` for one (`web-*`, `billing-?`, `*`).
///
/// ```
/// let callers = cluster::Callers::only(["web-*", "billing-1"]);
/// assert!(callers.admits("web-eu-3"));
/// assert!(!callers.admits("batch-1"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Callers {
    patterns: Vec<String>,
}

impl Callers {
    /// Only callers whose node name matches one of `patterns`.
    pub fn only<S: Into<String>>(patterns: impl IntoIterator<Item = S>) -> Self {
        Self {
            patterns: patterns.into_iter().map(Into::into).collect(),
        }
    }

    /// Whether a caller of this name is admitted.
    pub fn admits(&self, caller: &str) -> bool {
        self.patterns
            .iter()
            .any(|p| matches(p.as_bytes(), caller.as_bytes()))
    }

    /// The patterns, for messages.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// `provider`, admitting only these callers: serve the result with
    /// [`Node::serve`](crate::Node::serve) or [`Node::serve_with`](crate::Node::serve_with).
    pub fn may_call<P: Provide>(self, provider: P) -> Guarded<P> {
        Guarded {
            provider,
            callers: self,
        }
    }
}

/// A provider that admits only some callers ([`Callers::may_call`]).
#[derive(Debug)]
pub struct Guarded<P> {
    provider: P,
    callers: Callers,
}

impl<P: Provide> Provide for Guarded<P> {
    fn description(&self) -> &'static ServiceDescription {
        self.provider.description()
    }

    fn dispatch(&self, function: usize, args: &[u8]) -> DispatchFuture {
        self.provider.dispatch(function, args)
    }

    fn callers(&self) -> Option<&Callers> {
        Some(&self.callers)
    }
}

/// Glob matching with `*` and `?`, iterative (no recursion a long pattern could exhaust).
fn matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where the last `*` was, and the text position it has absorbed up to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        for (pattern, text, expected) in [
            ("web-*", "web-1", true),
            ("web-*", "web-", true),
            ("web-*", "api-1", false),
            ("*", "anything", true),
            ("web-?", "web-12", false),
            ("web-?", "web-1", true),
            ("*-eu-*", "web-eu-3", true),
            ("*-eu-*", "web-us-3", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("", "", true),
        ] {
            assert_eq!(
                matches(pattern.as_bytes(), text.as_bytes()),
                expected,
                "{pattern} ~ {text}"
            );
        }
    }
}
