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
        /// Seconds between reads of the registry (default 30; at least 1).
        #[serde(default)]
        refresh_secs: Option<u64>,
        /// Seconds each request to a registry server may take (default 5; 1 to 300).
        #[serde(default)]
        timeout_secs: Option<u64>,
        /// The largest registry answer read, in bytes (default 32 MiB; at least 1 KiB).
        #[serde(default)]
        max_answer_bytes: Option<usize>,
    },
}

/// A configuration that does not describe a resolver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A static endpoint that is not `host:port`.
    #[error("`{0}` is not host:port")]
    BadEndpoint(String),
    /// A static service with no endpoint: every request to it would be refused.
    #[error("static service `{0}` lists no endpoint")]
    NoEndpoints(String),
    /// `Discovery` without servers.
    #[error("discovery needs at least one registry server")]
    NoServers,
    /// A registry server that is not an `http://` or `https://` URL with a host.
    #[error("`{0}` is not a registry server's URL (http://host:port/eureka/)")]
    BadServer(String),
    /// A setting outside its range.
    #[error("`{setting}` {why}")]
    Setting {
        /// The setting's name.
        setting: &'static str,
        /// Its range.
        why: &'static str,
    },
}

fn server(s: &str) -> Result<(), ConfigError> {
    match reqwest::Url::parse(s) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(()),
        _ => Err(ConfigError::BadServer(
            crate::client::redacted(s).into_owned(),
        )),
    }
}

fn endpoint(s: &str) -> Result<Endpoint, ConfigError> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| ConfigError::BadEndpoint(s.to_owned()))?;
    let port = port
        .parse()
        .map_err(|_| ConfigError::BadEndpoint(s.to_owned()))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if !super::is_host(host) {
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
                    if list.is_empty() {
                        return Err(ConfigError::NoEndpoints(name.clone()));
                    }
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
                timeout_secs,
                max_answer_bytes,
            } => {
                if servers.is_empty() {
                    return Err(ConfigError::NoServers);
                }
                servers.iter().try_for_each(|s| server(s))?;
                if *refresh_secs == Some(0) {
                    return Err(ConfigError::Setting {
                        setting: "refresh_secs",
                        why: "is at least 1: 0 would read the registry for every request",
                    });
                }
                if timeout_secs.is_some_and(|t| !(1..=300).contains(&t)) {
                    return Err(ConfigError::Setting {
                        setting: "timeout_secs",
                        why: "is 1 to 300 seconds",
                    });
                }
                if max_answer_bytes.is_some_and(|n| n < 1024) {
                    return Err(ConfigError::Setting {
                        setting: "max_answer_bytes",
                        why: "is at least 1 KiB",
                    });
                }
                let mut client = EurekaClient::new(servers.clone());
                if let Some(n) = max_answer_bytes {
                    client = client.max_answer_bytes(*n);
                }
                if let Some(t) = timeout_secs {
                    client = client.timeout(Duration::from_secs(*t));
                }
                let d = Discovery::new(client);
                Arc::new(match refresh_secs {
                    Some(s) => d.refresh(Duration::from_secs(*s)),
                    None => d,
                })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(json: &str) -> Result<Arc<dyn Resolve>, ConfigError> {
        serde_json::from_str::<ResolverConfig>(json)
            .unwrap()
            .build()
    }

    #[test]
    fn discovery_settings_that_cannot_work_are_refused() {
        for (json, said) in [
            (
                r#"{"kind":"discovery","servers":["not a url"]}"#,
                "not a registry",
            ),
            (
                r#"{"kind":"discovery","servers":["ftp://h/eureka/"]}"#,
                "not a registry",
            ),
            (
                r#"{"kind":"discovery","servers":["10.0.0.1:8761"]}"#,
                "not a registry",
            ),
            (r#"{"kind":"discovery","servers":[]}"#, "at least one"),
            (
                r#"{"kind":"discovery","servers":["http://h:8761/eureka/"],"refresh_secs":0}"#,
                "refresh_secs",
            ),
            (
                r#"{"kind":"discovery","servers":["http://h:8761/eureka/"],"timeout_secs":0}"#,
                "timeout_secs",
            ),
            (
                r#"{"kind":"discovery","servers":["http://h:8761/eureka/"],"timeout_secs":301}"#,
                "timeout_secs",
            ),
        ] {
            let e = build(json).err().expect(json).to_string();
            assert!(e.contains(said), "{json}: {e}");
        }
        build(r#"{"kind":"discovery","servers":["https://h/eureka/"],"timeout_secs":2}"#).unwrap();
        let e = build(r#"{"kind":"discovery","servers":["http://app:S3CRET@h:99999/eureka/"]}"#)
            .err()
            .unwrap()
            .to_string();
        assert!(!e.contains("S3CRET") && e.contains("app:***@"), "{e}");
    }

    #[test]
    fn static_endpoints_that_cannot_be_reached_are_refused() {
        for json in [
            r#"{"kind":"static","services":{"a":["a b:80"]}}"#,
            r#"{"kind":"static","services":{"a":["x@y:80"]}}"#,
            r#"{"kind":"static","services":{"a":[":80"]}}"#,
            r#"{"kind":"static","services":{"a":[]}}"#,
        ] {
            assert!(build(json).is_err(), "{json}");
        }
        build(r#"{"kind":"static","services":{"a":["[::1]:80","orders_1.local:8080"]}}"#).unwrap();
    }
}
