//! Function routes in the gateway's file (`[[functions]]`), and the gateway's own cluster node
//! (`[node]`) that makes their calls. API keys are never written in the file: each names the
//! environment variable that holds it (`key_env`), read at start.
//!
//! ```toml
//! [node]
//! name = "gateway-1"
//! identity_dir = "/etc/cluster"                   # ca.pem, gateway-1.pem, gateway-1.key
//! eureka = ["http://10.0.0.5:8761/eureka/"]       # the registry the cluster's members use
//!
//! [[functions]]
//! path = "/api/*"
//! default_timeout_ms = 30000
//! max_timeout_ms = 300000
//!
//! [[functions.keys]]
//! name = "shop-web"
//! key_env = "SHOP_WEB_KEY"
//! allow = ["inventory.*", "shop.order"]
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use axum::http::HeaderName;
use serde::Deserialize;

use super::{EdgeCallers, FunctionRoute, edge};

/// One function route in a file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct FunctionsConfig {
    /// The path pattern, e.g. `/api/*`.
    pub path: String,
    /// API keys, each naming a caller and what it may call.
    #[serde(default)]
    pub keys: Vec<KeyConfig>,
    /// Callers known by a TLS client certificate (the node name it carries), each with its
    /// `service.function` patterns; needs `[tls] client_ca`.
    #[serde(default)]
    pub certificates: BTreeMap<String, Vec<String>>,
    /// Callers named by a header a proxy in front sets.
    #[serde(default)]
    pub trusted_header: Option<TrustedHeaderConfig>,
    /// Anyone may call every function (default `false`).
    #[serde(default)]
    pub open_to_anyone: bool,
    /// A version requirement on providers (`^1`), by default none.
    #[serde(default)]
    pub require: Option<String>,
    /// The budget of a request that asks for none, in milliseconds (default 30,000).
    #[serde(default)]
    pub default_timeout_ms: Option<u64>,
    /// The longest budget a request may ask for, in milliseconds (default 300,000).
    #[serde(default)]
    pub max_timeout_ms: Option<u64>,
    /// The largest JSON body (default 1 MiB).
    #[serde(default)]
    pub max_body_bytes: Option<usize>,
}

/// An API key: its caller's name, the variable that holds it, the functions it may call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct KeyConfig {
    /// The edge caller's name (in the call's metadata as `edge-caller`).
    pub name: String,
    /// The environment variable that holds the key (at least 16 bytes).
    pub key_env: String,
    /// `service.function` patterns, with `*` and `?`.
    pub allow: Vec<String>,
}

/// Callers named by a header a proxy in front sets once it has authenticated them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TrustedHeaderConfig {
    /// The header's name.
    pub header: String,
    /// Each name the proxy may set, and its `service.function` patterns.
    pub callers: BTreeMap<String, Vec<String>>,
}

/// The gateway's own member of the cluster, for its function routes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct NodeConfig {
    /// Its node name: its certificate's, and what providers' allow-lists name.
    pub name: String,
    /// The directory `cluster init` and `cluster issue` wrote: `ca.pem`, `<name>.pem`,
    /// `<name>.key`.
    pub identity_dir: PathBuf,
    /// The Eureka servers the cluster's registry is on.
    pub eureka: Vec<String>,
}

const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

impl FunctionsConfig {
    /// What is wrong with it, said at start, before the node its calls need is started; `env`
    /// reads a variable (`std::env::var`, in the binary).
    pub fn check(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
        super::super::route::Pattern::check(&self.path).map_err(str::to_owned)?;
        if self.keys.is_empty()
            && self.certificates.is_empty()
            && self.trusted_header.is_none()
            && !self.open_to_anyone
        {
            return Err(
                "no `keys`, no `certificates`, no `trusted_header` and not `open_to_anyone`: \
                 it would admit nobody"
                    .to_owned(),
            );
        }
        for name in self.certificates.keys() {
            edge::check_name(name).map_err(|why| format!("certificate `{name}`: {why}"))?;
        }
        for key in &self.keys {
            edge::check_name(&key.name).map_err(|why| format!("key `{}`: {why}", key.name))?;
            match env(&key.key_env) {
                Some(k) if k.len() >= 16 => {}
                Some(_) => return Err(format!("`{}` holds fewer than 16 bytes", key.key_env)),
                None => return Err(format!("`{}` is not set", key.key_env)),
            }
        }
        if let Some(h) = &self.trusted_header {
            HeaderName::try_from(h.header.as_str())
                .map_err(|_| format!("`{}` is not a header name", h.header))?;
            for name in h.callers.keys() {
                edge::check_name(name).map_err(|why| format!("caller `{name}`: {why}"))?;
            }
        }
        if let Some(r) = &self.require {
            semver::VersionReq::parse(r).map_err(|e| format!("`require`: {e}"))?;
        }
        for (name, ms) in [
            ("default_timeout_ms", self.default_timeout_ms),
            ("max_timeout_ms", self.max_timeout_ms),
        ] {
            if ms.is_some_and(|ms| ms == 0 || Duration::from_millis(ms) > LONGEST) {
                return Err(format!("`{name}` is more than zero and at most a year"));
            }
        }
        Ok(())
    }

    /// The route, through `node`; `env` reads a variable. Checked first ([`Self::check`]).
    pub(crate) fn route(
        &self,
        node: &cluster::Node,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<FunctionRoute, String> {
        self.check(env)?;
        let mut edge = if self.open_to_anyone {
            EdgeCallers::open_to_anyone()
        } else {
            EdgeCallers::new()
        };
        for key in &self.keys {
            let secret = env(&key.key_env).unwrap_or_default();
            edge = edge.key(&key.name, &secret, key.allow.iter().cloned());
        }
        if !self.certificates.is_empty() {
            edge = edge.certificates(
                self.certificates
                    .iter()
                    .map(|(name, allow)| (name.clone(), allow.clone())),
            );
        }
        if let Some(h) = &self.trusted_header
            && let Ok(header) = HeaderName::try_from(h.header.as_str())
        {
            edge = edge.trusted_header(
                header,
                h.callers
                    .iter()
                    .map(|(name, allow)| (name.clone(), allow.clone())),
            );
        }
        let mut route = FunctionRoute::new(node, edge);
        if let Some(r) = self.require.as_deref().and_then(|r| r.parse().ok()) {
            route = route.require(r);
        }
        let ms = |v: Option<u64>, default: Duration| v.map_or(default, Duration::from_millis);
        route = route.budgets(
            ms(self.default_timeout_ms, super::DEFAULT_CALL_BUDGET),
            ms(self.max_timeout_ms, super::DEFAULT_MAX_CALL_BUDGET),
        );
        if let Some(n) = self.max_body_bytes {
            route = route.max_body_bytes(n);
        }
        Ok(route)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> FunctionsConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_route_that_admits_nobody_or_lacks_its_key_is_refused_at_start() {
        let env = |name: &str| (name == "KEY").then(|| "k".repeat(20));
        let nobody = parse("path = \"/api/*\"");
        assert!(nobody.check(&env).unwrap_err().contains("admit nobody"));
        let keyed = |var: &str| {
            parse(&format!(
                "path = \"/api/*\"\n[[keys]]\nname = \"shop\"\nkey_env = \"{var}\"\nallow = [\"a.*\"]"
            ))
        };
        assert_eq!(keyed("KEY").check(&env), Ok(()));
        assert!(keyed("OTHER").check(&env).unwrap_err().contains("not set"));
        let short = |_: &str| Some("short".to_owned());
        assert!(keyed("KEY").check(&short).unwrap_err().contains("16 bytes"));
        let zero = parse("path = \"/api/*\"\nopen_to_anyone = true\nmax_timeout_ms = 0");
        assert!(zero.check(&env).unwrap_err().contains("max_timeout_ms"));
        let typo = toml::from_str::<FunctionsConfig>("path = \"/a/*\"\nopen = true");
        assert!(typo.is_err());
    }
}
