//! One question, three answers: where does `service` run? [`Static`] (a list you wrote),
//! [`Dns`] (a name the platform resolves: the answer on Kubernetes, ECS or Nomad) and
//! [`Discovery`] (registry servers, cached so that the registry being down does not stop
//! traffic). Moving between them is configuration: [`ResolverConfig`].

mod config;
mod discovery;
mod dns;
mod fixed;

use std::fmt;
use std::future::Future;
use std::pin::Pin;

pub use config::{ConfigError, ResolverConfig};
pub use discovery::{Discovery, FIRST_READ_RETRY};
pub use dns::Dns;
pub use fixed::Static;

/// A boxed future, as [`Resolve::resolve`] returns it (the trait is used as `dyn Resolve`).
pub type ResolveFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<Endpoint>, ResolveError>> + Send + 'a>>;

/// Where a service's instances are.
pub trait Resolve: Send + Sync + 'static {
    /// The endpoints of `service`: never empty (nothing is [`ResolveError::NoService`]).
    fn resolve<'a>(&'a self, service: &'a str) -> ResolveFuture<'a>;
}

/// One instance's address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    /// Host name or IP address.
    pub host: String,
    /// Port.
    pub port: u16,
}

impl Endpoint {
    /// An endpoint.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        Self {
            host: host.into(),
            port,
        }
    }
}

/// Whether `s` can be an endpoint's host: an IP address, or a DNS name (letters, digits, `-`,
/// `_`, `.`, at most 253). Anything else (spaces, a CR LF, `@`, `/`) comes from a broken or
/// hostile registry, or a typo in a file, and would reach the log, the `Host` header and the
/// connect call: a registry's instance with such an `ipAddr` is not offered, and a static
/// endpoint with one is refused at start.
pub(crate) fn is_host(s: &str) -> bool {
    s.parse::<std::net::IpAddr>().is_ok()
        || (!s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A service could not be resolved. There is no fallback address: a caller gets this error,
/// never a request to a host nobody named.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The service resolves to nothing.
    #[error("no instance of service `{service}`")]
    NoService {
        /// The service.
        service: String,
    },
    /// The source could not be asked, and there is no earlier answer to fall back on.
    #[error("cannot resolve service `{service}`")]
    Unavailable {
        /// The service.
        service: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl ResolveError {
    /// Whether the service has no instance (as opposed to its source being unreachable).
    pub fn is_no_service(&self) -> bool {
        matches!(self, ResolveError::NoService { .. })
    }

    pub(crate) fn no_service(service: &str) -> Self {
        ResolveError::NoService {
            service: service.to_owned(),
        }
    }
}
