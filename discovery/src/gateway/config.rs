//! The gateway from a file, so that an operator runs it without writing Rust
//! (`cluster-discovery gateway --config FILE`). TOML; unknown keys are refused, so that a typo
//! is an error at start, not a default silently taken.
//!
//! ```
//! use cluster_discovery::gateway::GatewayConfig;
//! let config = GatewayConfig::from_toml(r#"
//!     listen = "127.0.0.1:8080"
//!
//!     [resolvers.eureka]
//!     kind = "discovery"
//!     servers = ["http://127.0.0.1:8761/eureka/"]
//!     refresh_secs = 5
//!
//!     [[routes]]
//!     path = "/api/orders/*"
//!     service = "orders"
//!     resolver = "eureka"
//!     strip = "/api"
//!     timeout_ms = 5000
//! "#).unwrap();
//! let gateway = config.gateway().unwrap(); // then gateway.start(config.listen)
//! # let _ = gateway;
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::functions::{FunctionsConfig, NodeConfig};
use super::{Gateway, GatewayLimits, Host, Upstream};
use crate::balance::Balancer;
use crate::resolve::ResolverConfig;
use crate::server::ServerTls;

/// A gateway's file: where it listens, its resolvers by name, its routes, limits and TLS.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct GatewayConfig {
    /// Where to listen (default `127.0.0.1:8080`).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Resolvers by name, each as [`ResolverConfig`] (`kind` = `static`, `dns`, `discovery`).
    #[serde(default)]
    pub resolvers: HashMap<String, ResolverConfig>,
    /// The routes to instances.
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
    /// The routes to the cluster's functions (`docs/gateway-calls.md`); they need `node`.
    #[serde(default)]
    pub functions: Vec<FunctionsConfig>,
    /// The gateway's own member of the cluster, which makes the function routes' calls.
    #[serde(default)]
    pub node: Option<NodeConfig>,
    /// How long an instance whose connection failed is passed over first, in milliseconds
    /// (default 2,000).
    #[serde(default)]
    pub cool_down_ms: Option<u64>,
    /// Threads that serve, each accepting connections and serving them whole (default: one per
    /// core; see [`Gateway::workers`]).
    #[serde(default)]
    pub workers: Option<usize>,
    /// Keep the client's `X-Forwarded-For` and `Forwarded` and append to them (default
    /// `false`: replace them; see [`Gateway::trust_forwarded`]).
    #[serde(default)]
    pub trust_forwarded: bool,
    /// Limits; each unset one takes its default ([`GatewayLimits`]).
    #[serde(default)]
    pub limits: LimitsConfig,
    /// HTTPS on the listener: `{ cert = "FILE", key = "FILE" }` (PEM).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
}

/// One route.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RouteConfig {
    /// The path pattern, e.g. `/api/orders/*`.
    pub path: String,
    /// The service's name, as the resolver knows it.
    pub service: String,
    /// The resolver's name in `resolvers`.
    pub resolver: String,
    /// A prefix removed from the path before forwarding.
    #[serde(default)]
    pub strip: Option<String>,
    /// `instance` (default), `preserve`, or a host name to send.
    #[serde(default)]
    pub host: Option<String>,
    /// The route's timeout in milliseconds, all attempts together (default 30,000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Attempts per request, the first included (default 3, at most 5).
    #[serde(default)]
    pub attempts: Option<usize>,
}

/// [`GatewayLimits`] in a file; unset fields keep their defaults.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
#[allow(missing_docs)]
pub struct LimitsConfig {
    pub max_connections: Option<usize>,
    pub header_read_timeout_secs: Option<u64>,
    pub max_header_bytes: Option<usize>,
    pub max_headers: Option<usize>,
    pub max_body_bytes: Option<usize>,
    pub max_replay_bytes: Option<usize>,
    pub write_timeout_secs: Option<u64>,
    pub connect_timeout_ms: Option<u64>,
    pub max_idle_per_instance: Option<usize>,
    pub drain_timeout_secs: Option<u64>,
    pub tunnel_idle_timeout_secs: Option<u64>,
}

/// The listener's certificate and key, PEM files.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TlsConfig {
    /// The certificate chain.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The CA whose client certificates the listener asks for and verifies (PEM): what
    /// `[[functions]] certificates` names callers by. None by default.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
}

/// A file that does not describe a gateway.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Not TOML, or not this shape.
    #[error("the configuration does not parse")]
    Parse(#[source] toml::de::Error),
    /// A route names a resolver that is not defined.
    #[error("route `{route}` names resolver `{resolver}`, which is not defined")]
    UnknownResolver {
        /// The route's path.
        route: String,
        /// The name.
        resolver: String,
    },
    /// A resolver's settings are wrong.
    #[error("resolver `{name}`")]
    Resolver {
        /// Its name.
        name: String,
        /// Why.
        #[source]
        source: crate::resolve::ConfigError,
    },
    /// No routes: the gateway would answer 404 to everything.
    #[error("no routes")]
    NoRoutes,
    /// Function routes without the `[node]` that would make their calls.
    #[error("`[[functions]]` routes need a `[node]`: the gateway's own member of the cluster")]
    NoNode,
    /// The TLS files cannot be used.
    #[error("TLS")]
    Tls(#[source] std::io::Error),
    /// A setting outside its range.
    #[error("`{setting}` {why}")]
    Setting {
        /// The setting's name.
        setting: &'static str,
        /// Its range.
        why: &'static str,
    },
    /// A route's settings cannot work: said at start, not as every request failing.
    #[error("route `{route}`: {why}")]
    Route {
        /// The route's path.
        route: String,
        /// What is wrong.
        why: String,
    },
}

fn default_listen() -> SocketAddr {
    ([127, 0, 0, 1], 8080).into()
}

impl GatewayConfig {
    /// Parses a TOML configuration.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let config: Self = toml::from_str(text).map_err(ConfigError::Parse)?;
        if config.routes.is_empty() && config.functions.is_empty() {
            return Err(ConfigError::NoRoutes);
        }
        if !config.functions.is_empty() && config.node.is_none() {
            return Err(ConfigError::NoNode);
        }
        let client_ca = config.tls.as_ref().is_some_and(|t| t.client_ca.is_some());
        let mut paths = std::collections::HashSet::new();
        for f in &config.functions {
            if !f.certificates.is_empty() && !client_ca {
                return Err(ConfigError::Route {
                    route: f.path.clone(),
                    why: "`certificates` need `[tls] client_ca`, the CA that issues them"
                        .to_owned(),
                });
            }
            if !paths.insert(f.path.as_str()) || config.routes.iter().any(|r| r.path == f.path) {
                return Err(ConfigError::Route {
                    route: f.path.clone(),
                    why: "a second route with the same path (the first would win)".to_owned(),
                });
            }
        }
        if config
            .workers
            .is_some_and(|n| !(1..=super::MAX_WORKERS).contains(&n))
        {
            return Err(ConfigError::Setting {
                setting: "workers",
                why: "is 1 to 1024 threads",
            });
        }
        if let Err((setting, why)) = config.limits.limits().check() {
            return Err(ConfigError::Setting { setting, why });
        }
        let mut seen = std::collections::HashSet::new();
        for route in &config.routes {
            let bad = |why: &str| ConfigError::Route {
                route: route.path.clone(),
                why: why.to_owned(),
            };
            if let Err(why) = super::route::Pattern::check(&route.path) {
                return Err(bad(why));
            }
            if !seen.insert(route.path.as_str()) {
                return Err(bad(
                    "a second route with the same path (the first would win)",
                ));
            }
            let prefix = route.path.trim_end_matches('*').trim_end_matches('/');
            if let Some(strip) = &route.strip
                && super::route::under(prefix, strip.trim_end_matches('/')).is_none()
            {
                return Err(bad(
                    "`strip` is not whole segments at the start of the path: nothing would be \
                     stripped",
                ));
            }
            if let Some(host) = &route.host
                && !matches!(host.as_str(), "instance" | "preserve")
                && !super::proxy::is_authority(host.as_bytes())
            {
                return Err(bad(
                    "`host` is `instance`, `preserve`, or a host name (with a port if need be)",
                ));
            }
            if route.service.trim().is_empty() {
                return Err(bad("`service` names a service"));
            }
            if let Some(ResolverConfig::Static { services }) = config.resolvers.get(&route.resolver)
                && !services.contains_key(&route.service)
            {
                return Err(bad(&format!(
                    "static resolver `{}` lists no service `{}`: every request would be 503",
                    route.resolver, route.service
                )));
            }
            if route.timeout_ms == Some(0) {
                return Err(bad("`timeout_ms = 0` would answer every request 504"));
            }
            if let Some(n) = route.attempts
                && !(1..=5).contains(&n)
            {
                return Err(bad("`attempts` is 1 to 5"));
            }
        }
        Ok(config)
    }

    /// The gateway it describes: one balancer per resolver, shared by its routes. A file with
    /// function routes needs their node: [`GatewayConfig::gateway_with`].
    pub fn gateway(&self) -> Result<Gateway, ConfigError> {
        if !self.functions.is_empty() {
            return Err(ConfigError::NoNode);
        }
        self.build(None, &|_| None)
    }

    /// The gateway it describes, its function routes calling through `node` (started from
    /// [`GatewayConfig::node`]), their API keys read from the environment.
    pub fn gateway_with(&self, node: &cluster::Node) -> Result<Gateway, ConfigError> {
        self.gateway_with_env(node, &|name| std::env::var(name).ok())
    }

    /// [`GatewayConfig::gateway_with`], the keys' variables read by `env` instead of from the
    /// process's environment.
    pub fn gateway_with_env(
        &self,
        node: &cluster::Node,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Gateway, ConfigError> {
        self.build(Some(node), env)
    }

    fn build(
        &self,
        node: Option<&cluster::Node>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Gateway, ConfigError> {
        let mut balancers: HashMap<&str, Arc<Balancer>> = HashMap::new();
        let mut gateway = Gateway::new()
            .limits(self.limits.limits())
            .trust_forwarded(self.trust_forwarded);
        if let Some(n) = self.workers {
            gateway = gateway.workers(n);
        }
        for route in &self.routes {
            let name = route.resolver.as_str();
            let balancer = match balancers.get(name) {
                Some(b) => b.clone(),
                None => {
                    let config =
                        self.resolvers
                            .get(name)
                            .ok_or_else(|| ConfigError::UnknownResolver {
                                route: route.path.clone(),
                                resolver: name.to_owned(),
                            })?;
                    let resolver = config.build().map_err(|source| ConfigError::Resolver {
                        name: name.to_owned(),
                        source,
                    })?;
                    let mut b = Balancer::from_arc(resolver);
                    if let Some(ms) = self.cool_down_ms {
                        b = b.cool_down(Duration::from_millis(ms));
                    }
                    let b = Arc::new(b);
                    balancers.insert(name, b.clone());
                    b
                }
            };
            let mut up = Upstream::service(route.service.clone(), balancer);
            if let Some(p) = &route.strip {
                up = up.strip(p.clone());
            }
            if let Some(h) = &route.host {
                up = up.host(match h.as_str() {
                    "instance" => Host::Instance,
                    "preserve" => Host::Preserve,
                    name => Host::Fixed(name.to_owned()),
                });
            }
            if let Some(ms) = route.timeout_ms {
                up = up.timeout(Duration::from_millis(ms));
            }
            if let Some(n) = route.attempts {
                up = up.attempts(n);
            }
            gateway = gateway.route(&route.path, up);
        }
        for functions in &self.functions {
            let Some(node) = node else {
                return Err(ConfigError::NoNode);
            };
            let route = functions
                .route(node, env)
                .map_err(|why| ConfigError::Route {
                    route: functions.path.clone(),
                    why,
                })?;
            gateway = gateway.functions(&functions.path, route);
        }
        if let Some(tls) = &self.tls {
            let server = match &tls.client_ca {
                None => ServerTls::from_pem_files(&tls.cert, &tls.key),
                Some(ca) => {
                    let read = |p: &PathBuf| {
                        std::fs::read(p).map_err(|e| {
                            std::io::Error::new(e.kind(), format!("{}: {e}", p.display()))
                        })
                    };
                    (|| {
                        ServerTls::from_pem_with_client_ca(
                            &read(&tls.cert)?,
                            &read(&tls.key)?,
                            &read(ca)?,
                        )
                    })()
                }
            };
            gateway = gateway.tls(server.map_err(ConfigError::Tls)?);
        }
        Ok(gateway)
    }
}

impl LimitsConfig {
    fn limits(&self) -> GatewayLimits {
        let mut l = GatewayLimits::default();
        let secs = Duration::from_secs;
        macro_rules! set {
            ($field:ident, $from:ident) => {
                if let Some(v) = self.$from {
                    l.$field = v;
                }
            };
            ($field:ident, $from:ident, $conv:expr) => {
                if let Some(v) = self.$from {
                    l.$field = $conv(v);
                }
            };
        }
        set!(max_connections, max_connections);
        set!(header_read_timeout, header_read_timeout_secs, secs);
        set!(max_header_bytes, max_header_bytes);
        set!(max_headers, max_headers);
        set!(max_body_bytes, max_body_bytes);
        set!(max_replay_bytes, max_replay_bytes);
        set!(write_timeout, write_timeout_secs, secs);
        set!(connect_timeout, connect_timeout_ms, Duration::from_millis);
        set!(max_idle_per_instance, max_idle_per_instance);
        set!(drain_timeout, drain_timeout_secs, secs);
        set!(tunnel_idle_timeout, tunnel_idle_timeout_secs, secs);
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTE: &str = "[[routes]]\npath = \"/a/*\"\nservice = \"a\"\nresolver = \"r\"\n";

    #[test]
    fn a_route_naming_an_undefined_resolver_is_refused() {
        let c = GatewayConfig::from_toml(&format!("[resolvers]\n{ROUTE}")).unwrap();
        assert!(matches!(
            c.gateway(),
            Err(ConfigError::UnknownResolver { .. })
        ));
    }

    /// The file in `docs/gateway-calls.md` is one this build reads.
    #[test]
    fn the_documented_file_parses() {
        let doc = include_str!("../../../docs/gateway-calls.md");
        let toml = doc
            .split("```toml\n")
            .skip(1)
            .filter_map(|rest| rest.split("```").next())
            .find(|block| block.contains("[[functions]]"))
            .expect("the doc shows a gateway file");
        let config = GatewayConfig::from_toml(toml).unwrap();
        assert_eq!(config.functions[0].keys[0].key_env, "SHOP_WEB_KEY");
        assert!(config.functions[0].certificates.contains_key("billing-app"));
    }

    #[test]
    fn function_routes_need_a_node_and_certificates_a_client_ca() {
        let node = "[node]\nname = \"g\"\nidentity_dir = \"/x\"\neureka = []\n";
        let open = "[[functions]]\npath = \"/api/*\"\nopen_to_anyone = true\n";
        assert!(GatewayConfig::from_toml(&format!("{node}{open}")).is_ok());
        assert!(matches!(
            GatewayConfig::from_toml(open),
            Err(ConfigError::NoNode)
        ));
        let certs = "[[functions]]\npath = \"/api/*\"\ncertificates = { app = [\"*\"] }\n";
        let refused = GatewayConfig::from_toml(&format!("{node}{certs}")).unwrap_err();
        assert!(refused.to_string().contains("client_ca"), "{refused}");
    }

    #[test]
    fn typos_and_empty_route_lists_are_refused() {
        let typo = format!(
            "[resolvers.r]\nkind = \"static\"\nservices = {{ a = [\"127.0.0.1:1\"] }}\n{ROUTE}stirp = \"/a\"\n"
        );
        assert!(matches!(
            GatewayConfig::from_toml(&typo),
            Err(ConfigError::Parse(_))
        ));
        let none = "routes = []\n[resolvers.r]\nkind = \"static\"\nservices = {}\n";
        assert!(matches!(
            GatewayConfig::from_toml(none),
            Err(ConfigError::NoRoutes)
        ));
    }

    #[test]
    fn routes_that_cannot_work_are_refused_at_start() {
        let with = |extra: &str| {
            format!(
                "[resolvers.r]\nkind = \"static\"\nservices = {{ a = [\"127.0.0.1:1\"] }}\n[[routes]]\nservice = \"a\"\nresolver = \"r\"\n{extra}"
            )
        };
        for (extra, said) in [
            ("path = \"a/*\"", "starts with"),
            ("path = \"/a/*\"\ntimeout_ms = 0", "timeout_ms"),
            ("path = \"/a/*\"\nattempts = 9", "attempts"),
            ("path = \"/a/*\"\nstrip = \"/b\"", "strip"),
            ("path = \"/api/*\"\nstrip = \"/ap\"", "whole segments"),
            ("path = \"/a/*/b\"", "`*`"),
            ("path = \"/a*\"", "`*`"),
            ("path = \"/a/*\"\nhost = \"a b\"", "host"),
            ("path = \"/a/*\"\nhost = \"u@h\"", "host"),
            ("path = \"/a/*\"\nhost = \"x,y\"", "host"),
            ("path = \"/a/*\"\nhost = \"x:abc\"", "host"),
            ("path = \"/a//b/*\"", "`//`"),
            ("path = \"/a/%2e%2e/*\"", "`..`"),
            ("path = \"/a?x=1\"", "`?`"),
            ("path = \"/a b/*\"", "space"),
            ("path = \"/a/../b/*\"", "`..`"),
        ] {
            let e = GatewayConfig::from_toml(&with(extra)).unwrap_err();
            assert!(e.to_string().contains(said), "{extra}: {e}");
        }
        let twice = format!(
            "{}\n{}",
            with("path = \"/a/*\""),
            "[[routes]]\npath = \"/a/*\"\nservice = \"b\"\nresolver = \"r\""
        );
        assert!(
            GatewayConfig::from_toml(&twice)
                .unwrap_err()
                .to_string()
                .contains("same path")
        );
    }

    #[test]
    fn a_route_to_a_service_its_static_resolver_does_not_list_is_refused() {
        let text = "[resolvers.r]\nkind = \"static\"\nservices = { orders = [\"127.0.0.1:1\"] }\n\
                    [[routes]]\npath = \"/p/*\"\nservice = \"payments\"\nresolver = \"r\"\n";
        let e = GatewayConfig::from_toml(text).unwrap_err().to_string();
        assert!(e.contains("lists no service `payments`"), "{e}");
        let empty = text.replace("\"payments\"", "\" \"");
        let e = GatewayConfig::from_toml(&empty).unwrap_err().to_string();
        assert!(e.contains("`service`"), "{e}");
    }

    #[test]
    fn workers_are_one_to_1024() {
        let with = |n: usize| {
            format!(
                "workers = {n}\n[resolvers.r]\nkind = \"static\"\nservices = {{ a = [\"127.0.0.1:1\"] }}\n{ROUTE}"
            )
        };
        for n in [0, 1025] {
            let e = GatewayConfig::from_toml(&with(n)).unwrap_err();
            assert!(e.to_string().contains("workers"), "{n}: {e}");
        }
        let c = GatewayConfig::from_toml(&with(3)).unwrap();
        assert_eq!(c.workers, Some(3));
        let _ = c.gateway().unwrap();
    }

    #[test]
    fn limits_outside_their_range_are_refused_at_start() {
        for (line, said) in [
            ("max_headers = 18446744073709551615", "max_headers"),
            ("max_headers = 0", "max_headers"),
            ("max_connections = 0", "max_connections"),
            ("header_read_timeout_secs = 0", "header_read_timeout"),
            (
                "header_read_timeout_secs = 18446744073709551615",
                "header_read_timeout",
            ),
            ("write_timeout_secs = 0", "write_timeout"),
            ("connect_timeout_ms = 0", "connect_timeout"),
            ("max_header_bytes = 0", "max_header_bytes"),
            ("max_idle_per_instance = 1000000", "max_idle_per_instance"),
            ("drain_timeout_secs = 18446744073709551615", "drain_timeout"),
        ] {
            let text = format!(
                "[resolvers.r]\nkind = \"static\"\nservices = {{ a = [\"127.0.0.1:1\"] }}\n[limits]\n{line}\n{ROUTE}"
            );
            let e = GatewayConfig::from_toml(&text).unwrap_err().to_string();
            assert!(e.contains(said), "{line}: {e}");
        }
    }

    #[test]
    fn limits_left_out_keep_their_defaults() {
        let text = format!(
            "[resolvers.r]\nkind = \"static\"\nservices = {{ a = [\"127.0.0.1:1\"] }}\n\
             [limits]\nmax_connections = 7\nconnect_timeout_ms = 250\n{ROUTE}"
        );
        let c = GatewayConfig::from_toml(&text).unwrap();
        let l = c.limits.limits();
        assert_eq!(l.max_connections, 7);
        assert_eq!(l.connect_timeout, Duration::from_millis(250));
        assert_eq!(l.max_body_bytes, GatewayLimits::default().max_body_bytes);
        let _ = c.gateway().unwrap();
    }
}
