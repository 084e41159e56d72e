use std::fmt;

use semver::Version;

use super::CallReport;

/// Why the service could not serve a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// No node provides a service of this name.
    NoService,
    /// Providers exist, none in a version the client accepts.
    NoVersion,
    /// Providers in a compatible version exist, none with this function and signature.
    NoFunction,
    /// The provider's function panicked.
    Panicked,
    /// The provider could not read the arguments.
    BadArguments,
    /// The provider was shutting down and refused the call before running it.
    Draining,
    /// The provider was at its limit of concurrent calls and refused the call before running it.
    Overloaded,
    /// The provider speaks no version of the framework's wire protocol this node speaks.
    WireVersion,
    /// A layer (the caller's or the provider's) refused the call before it ran; not retried.
    Rejected,
    /// The provider does not admit this caller ([`Callers`](crate::Callers)); it did not run
    /// and is not retried.
    Unauthorized,
}

impl Reason {
    /// The reason in a few words.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NoService => "no service",
            Reason::NoVersion => "no compatible version",
            Reason::NoFunction => "no such function",
            Reason::Panicked => "the provider panicked",
            Reason::BadArguments => "bad arguments",
            Reason::Draining => "the provider is draining",
            Reason::Overloaded => "the provider is overloaded",
            Reason::WireVersion => "wire protocol mismatch",
            Reason::Rejected => "rejected",
            Reason::Unauthorized => "unauthorized",
        }
    }

    fn explanation(self) -> &'static str {
        match self {
            Reason::NoService => {
                "no node provides this service: its providers are down, not started yet, or registered under another name"
            }
            Reason::NoVersion => "providers exist, but none in a version this client accepts",
            Reason::NoFunction => {
                "providers in a compatible version exist, but none has this function in a shape this client can call"
            }
            Reason::Panicked => {
                "the provider's function panicked; the provider logged it and keeps serving"
            }
            Reason::BadArguments => {
                "the provider could not read the arguments: client and provider disagree on the argument types"
            }
            Reason::Draining => {
                "every provider tried was shutting down and refused the call before running it"
            }
            Reason::Overloaded => {
                "every provider tried refused the call as overloaded before running it (at its limit of concurrent calls, or a provider layer shedding load)"
            }
            Reason::WireVersion => {
                "no provider tried speaks a version of the framework's wire protocol this node speaks"
            }
            Reason::Rejected => {
                "a layer refused the call before it ran (the caller's or the provider's); it was not retried"
            }
            Reason::Unauthorized => {
                "the provider does not admit this caller (its allow-list names other nodes); the function did not run and the call was not retried"
            }
        }
    }

    /// Whether the provider refused before running the function, so another attempt is safe.
    pub(crate) fn never_ran(self) -> bool {
        !matches!(self, Reason::Panicked)
    }

    /// Wire code of a provider's refusal: stable numbers, so peers of other builds agree.
    pub(crate) fn code(self) -> u16 {
        match self {
            Reason::NoService => 1,
            Reason::NoVersion => 2,
            Reason::NoFunction => 3,
            Reason::Panicked => 4,
            Reason::BadArguments => 5,
            Reason::Draining => 6,
            Reason::Overloaded => 7,
            Reason::WireVersion => 8,
            Reason::Rejected => 9,
            Reason::Unauthorized => 10,
        }
    }

    /// The reason of a wire code; `None` for a code a newer peer invented.
    pub(crate) fn from_code(code: u16) -> Option<Self> {
        Some(match code {
            1 => Reason::NoService,
            2 => Reason::NoVersion,
            3 => Reason::NoFunction,
            4 => Reason::Panicked,
            5 => Reason::BadArguments,
            6 => Reason::Draining,
            7 => Reason::Overloaded,
            8 => Reason::WireVersion,
            9 => Reason::Rejected,
            10 => Reason::Unauthorized,
            _ => return None,
        })
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The service could not be found, or could not run the call.
#[derive(Debug, Clone)]
pub struct ServiceError {
    reason: Reason,
    detail: String,
    available: Vec<Version>,
    hint: Option<String>,
    report: Box<CallReport>,
}

impl ServiceError {
    pub(crate) fn new(
        reason: Reason,
        detail: String,
        available: Vec<Version>,
        report: CallReport,
    ) -> Self {
        Self {
            reason,
            detail,
            available,
            hint: None,
            report: Box::new(report),
        }
    }

    /// The error with `hint`, its own line after the detail.
    pub(crate) fn with_hint(mut self, hint: Option<String>) -> Self {
        self.hint = hint;
        self
    }

    /// Why.
    pub fn reason(&self) -> Reason {
        self.reason
    }

    /// The detail: the panic message, the codec's complaint, what the lookup saw.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// For [`Reason::NoVersion`]: the versions that are registered.
    pub fn available_versions(&self) -> &[Version] {
        &self.available
    }

    /// What the message suggests, if anything: for [`Reason::NoService`], the known service
    /// name nearest to the one called (`did you mean "inventory"?`).
    pub fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    /// The call's report: attempts, providers, timings.
    pub fn report(&self) -> &CallReport {
        &self.report
    }

    /// Whether calling again later may succeed (providers may appear, drain, or free up).
    pub fn is_transient(&self) -> bool {
        matches!(
            self.reason,
            Reason::NoService
                | Reason::NoVersion
                | Reason::NoFunction
                | Reason::Draining
                | Reason::Overloaded
        )
    }
}

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "The call {} failed: {}", self.report.call, self.reason)?;
        writeln!(f)?;
        writeln!(f, "The reason was:")?;
        write!(f, "  {}", self.reason.explanation())?;
        if !self.available.is_empty() {
            let list: Vec<String> = self.available.iter().map(ToString::to_string).collect();
            write!(f, "\n  registered versions: {}", list.join(", "))?;
        }
        if !self.detail.is_empty() {
            write!(f, "\n  {}", self.detail)?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "\n  {hint}")?;
        }
        writeln!(f)?;
        self.report.write_body(f)
    }
}

impl std::error::Error for ServiceError {}
