//! Choosing a resolver by configuration: moving from `Static` to `Dns` or `Discovery` is a
//! change of configuration, not of code.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::{Discovery, Dns, Endpoint, Resolve, Static};
use crate::client::EurekaClient;

/// Which resolver, and its settings; deserializable (`kind` = `static`, `dns`, `discovery`).
///
/// ```
/// use cluster_discovery::resolve::ResolverConfig;
/// let c: ResolverConfig = serde_json::from_str(
///     r#"{"kind": "dns", "name": "{service}.default.svc.cluster.local", "port": 8080}"#,
/// ).unwrap();
/// let resolver = c.build().unwrap();
/// # let _ = resolver;
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
#[non_exhaustive]
pub enum ResolverConfig {
    /// A list per service, `host:port` strings.
    Static {
        /// Service name → endpoints.
        services: HashMap<String, Vec<String>>,
    },
    /// A name template (with `{service}`) and a port.
    Dns {
        /// E.g. `{service}.default.svc.cluster.local`.
        name: String,
        /// The port every address is called on.
        port: u16,
    },
    /// Registry servers, by base URL.
    Discovery {
        /// E.g. `["http://10.0.0.1:8761/eureka/"]`.
        servers: Vec<String>,
        /// Seconds between reads of the registry (default 30).
        #[serde(default)]
        refresh_secs: Option<u64>,
    },
}

/// A configuration that does not describe a resolver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A static endpoint that is not `host:port`.
    #[error("`{0}` is not host:port")]
    BadEndpoint(String),
    /// `Discovery` without servers.
    #[error("discovery needs at least one registry server")]
    NoServers,
}

fn endpoint(s: &str) -> Result<Endpoint, ConfigError> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| ConfigError::BadEndpoint(s.to_owned()))?;
    let port = port
        .parse()
        .map_err(|_| ConfigError::BadEndpoint(s.to_owned()))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(ConfigError::BadEndpoint(s.to_owned()));
    }
    Ok(Endpoint::new(host, port))
}

impl ResolverConfig {
    /// The resolver this configuration describes.
    pub fn build(&self) -> Result<Arc<dyn Resolve>, ConfigError> {
        Ok(match self {
            ResolverConfig::Static { services } => {
                let mut s = Static::new();
                for (name, list) in services {
                    let eps = list
                        .iter()
                        .map(|e| endpoint(e))
                        .collect::<Result<Vec<_>, _>>()?;
                    s = s.service(name, eps);
                }
                Arc::new(s)
            }
            ResolverConfig::Dns { name, port } => Arc::new(Dns::new(name.clone(), *port)),
            ResolverConfig::Discovery {
                servers,
                refresh_secs,
            } => {
                if servers.is_empty() {
                    return Err(ConfigError::NoServers);
                }
                let d = Discovery::new(EurekaClient::new(servers.clone()));
                Arc::new(match refresh_secs {
                    Some(s) => d.refresh(Duration::from_secs(*s)),
                    None => d,
                })
            }
        })
    }
}
