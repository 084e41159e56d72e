//! Routes: a path prefix to a named service, through a balancer, with what is rewritten on
//! the way (the prefix stripped, the `Host` header).

use std::sync::Arc;
use std::time::Duration;

use super::functions::FunctionRoute;
use crate::balance::Balancer;

/// What the `Host` header says to the instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Host {
    /// The instance's own `host:port` (the default, as nginx's `proxy_pass` and Spring Cloud
    /// Gateway do): virtual hosting on the instance sees the name it is known by.
    #[default]
    Instance,
    /// The client's `Host`, unchanged (Spring's `PreserveHostHeader`).
    Preserve,
    /// This name.
    Fixed(String),
}

/// Where a route's requests go: a service by name, chosen among its instances by a balancer.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub(crate) service: String,
    pub(crate) balancer: Arc<Balancer>,
    pub(crate) strip: Option<String>,
    pub(crate) host: Host,
    pub(crate) timeout: Duration,
    pub(crate) attempts: usize,
}

/// The default time an instance has to answer a route's request, all attempts included: 30 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The default attempts per request, the first included: 3 (at most 5, gRPC's cap).
pub const DEFAULT_ATTEMPTS: usize = 3;

impl Upstream {
    /// The instances of `service`, as `balancer` chooses them.
    pub fn service(service: impl Into<String>, balancer: Arc<Balancer>) -> Self {
        Self {
            service: service.into(),
            balancer,
            strip: None,
            host: Host::Instance,
            timeout: DEFAULT_TIMEOUT,
            attempts: DEFAULT_ATTEMPTS,
        }
    }

    /// Removes `prefix` from the start of the path before forwarding (`StripPrefix`):
    /// `/api/orders/7` with `strip("/api")` reaches the instance as `/orders/7`.
    pub fn strip(mut self, prefix: impl Into<String>) -> Self {
        let p: String = prefix.into();
        self.strip = Some(p.trim_end_matches('/').to_owned()).filter(|p| !p.is_empty());
        self
    }

    /// What the `Host` header says to the instance ([`Host::Instance`] by default).
    pub fn host(mut self, host: Host) -> Self {
        self.host = host;
        self
    }

    /// How long an instance has to answer (its response's head), all attempts together
    /// (30 s by default, as Envoy's route timeout): past it, `504`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The most attempts per request, the first included (3 by default; 1 to 5).
    pub fn attempts(mut self, attempts: usize) -> Self {
        self.attempts = attempts.clamp(1, 5);
        self
    }

    /// The prefix [`Upstream::rewrite`] removes from `path`, if it removes one.
    pub(crate) fn stripped(&self, path: &str) -> Option<&str> {
        self.strip.as_deref().filter(|p| under(path, p).is_some())
    }

    /// The path the instance sees.
    pub(crate) fn rewrite<'a>(&self, path: &'a str) -> std::borrow::Cow<'a, str> {
        match self.strip.as_deref().and_then(|p| under(path, p)) {
            Some("") => "/".into(),
            Some(rest) => rest.into(),
            None => path.into(),
        }
    }
}

/// The rest of `path` after `prefix`, if `prefix` is whole segments of it.
pub(crate) fn under<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(prefix)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// A path pattern: `/api/orders/*` (the prefix `/api/orders`, and everything under it) or an
/// exact path.
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    prefix: String,
    exact: bool,
}

impl Pattern {
    /// Why `pattern` cannot work as written, if it cannot: `*` stands for whole segments, and
    /// only at the end (`/api/*`); a path starts with `/`.
    pub(crate) fn check(pattern: &str) -> Result<(), &'static str> {
        if !pattern.starts_with('/') {
            return Err("a path starts with `/`: this one would never match");
        }
        if pattern
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control() || b == b'?' || b == b'#')
        {
            return Err(
                "a path has no space, control character, `?` or `#` (a query is not routed \
                 on): this one would never match",
            );
        }
        if super::proxy::unsafe_path(pattern).is_some() {
            return Err(
                "a `.` or `..` segment (raw or encoded), an encoded slash or an empty segment \
                 (`//`): such requests are refused, so it would never match",
            );
        }
        match pattern.find('*') {
            Some(at) if at + 1 != pattern.len() || !pattern[..at].ends_with('/') => Err(
                "`*` stands for whole segments, and only as the last one (`/api/*`): this \
                 pattern would not match what it seems to",
            ),
            _ => Ok(()),
        }
    }

    pub(crate) fn parse(pattern: &str) -> Self {
        match pattern.strip_suffix("/*").or(pattern.strip_suffix('*')) {
            Some(prefix) => Self {
                prefix: prefix.trim_end_matches('/').to_owned(),
                exact: false,
            },
            None => Self {
                prefix: pattern.to_owned(),
                exact: true,
            },
        }
    }

    fn matches(&self, path: &str) -> bool {
        if self.exact {
            path == self.prefix
        } else {
            under(path, &self.prefix).is_some()
        }
    }
}

/// What a route leads to: instances over HTTP, or the cluster's functions.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    Proxy(Arc<Upstream>),
    Functions(Arc<FunctionRoute>),
}

/// The routes, the longest prefix first, so that `/api/orders/*` wins over `/api/*`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Routes {
    routes: Vec<(Pattern, Target)>,
}

impl Routes {
    pub(crate) fn add(&mut self, pattern: &str, upstream: Upstream) {
        self.push(pattern, Target::Proxy(Arc::new(upstream)));
    }

    pub(crate) fn add_functions(&mut self, pattern: &str, route: FunctionRoute) {
        self.push(pattern, Target::Functions(Arc::new(route)));
    }

    fn push(&mut self, pattern: &str, target: Target) {
        self.routes.push((Pattern::parse(pattern), target));
        // Exact paths first, then by prefix length: the most specific match wins.
        self.routes
            .sort_by_key(|(p, _)| (!p.exact, std::cmp::Reverse(p.prefix.len())));
    }

    /// The route of `path`, and its pattern's prefix.
    pub(crate) fn find(&self, path: &str) -> Option<(&str, &Target)> {
        self.routes
            .iter()
            .find(|(p, _)| p.matches(path))
            .map(|(p, t)| (p.prefix.as_str(), t))
    }

    /// The function routes.
    pub(crate) fn functions(&self) -> impl Iterator<Item = &FunctionRoute> {
        self.routes.iter().filter_map(|(_, t)| match t {
            Target::Functions(f) => Some(&**f),
            Target::Proxy(_) => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::Static;

    fn up(name: &str) -> Upstream {
        Upstream::service(name, Arc::new(Balancer::new(Static::new())))
    }

    #[test]
    fn the_most_specific_route_wins_and_prefixes_are_whole_segments() {
        let mut r = Routes::default();
        r.add("/api/*", up("api"));
        r.add("/api/orders/*", up("orders"));
        r.add("/health", up("health"));
        let to = |p: &str| match r.find(p) {
            Some((_, Target::Proxy(u))) => Some(u.service.clone()),
            _ => None,
        };
        assert_eq!(to("/api/orders/7").as_deref(), Some("orders"));
        assert_eq!(to("/api/orders").as_deref(), Some("orders"));
        assert_eq!(to("/api/ordersx").as_deref(), Some("api"));
        assert_eq!(to("/api/billing").as_deref(), Some("api"));
        assert_eq!(to("/health").as_deref(), Some("health"));
        assert_eq!(to("/health/x"), None);
        assert_eq!(to("/other"), None);
    }

    #[test]
    fn strip_removes_whole_segments_only() {
        let u = up("orders").strip("/api/");
        assert_eq!(u.rewrite("/api/orders/7"), "/orders/7");
        assert_eq!(u.rewrite("/api"), "/");
        assert_eq!(u.rewrite("/apix/orders"), "/apix/orders");
        assert_eq!(up("o").rewrite("/api/orders"), "/api/orders");
    }
}
