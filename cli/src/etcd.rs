//! The options that put a node's registry on etcd instead of gossip (`docs/etcd.md`), shared by
//! `cluster` and `cluster-node`. The password is read from the environment only, never from a
//! flag: a flag shows in every process listing.
//!
//! etcd's client is built in with the `etcd` feature only. Without it the options are still
//! read, so that `--etcd` is refused with a message saying how to build it in rather than as an
//! unknown flag.

use std::path::PathBuf;

use clap::Args;
#[cfg(feature = "etcd")]
use cluster_etcd::EtcdConfig;
#[cfg(feature = "etcd")]
pub use cluster_etcd::EtcdRegistry;

/// What `--etcd` is refused with in a build without the `etcd` feature.
pub const NOT_BUILT_IN: &str = "this build has no etcd client: install one with it, `cargo install --locked cluster-cli --features etcd` (from a clone: `--path cli`; cluster-node: `--path examples --bin cluster-node --features etcd`)";

/// The variable the etcd user's password is read from.
pub const PASSWORD_VARIABLE: &str = "CLUSTER_ETCD_PASSWORD";

/// Where etcd is and how to reach it.
#[derive(Debug, Clone, Default, Args)]
pub struct EtcdArgs {
    /// The registry on etcd at these client endpoints instead of gossip (repeatable, or
    /// comma-separated)
    #[arg(
        long = "etcd",
        global = true,
        env = "CLUSTER_ETCD",
        value_delimiter = ',',
        value_name = "HOST:PORT"
    )]
    pub endpoints: Vec<String>,
    /// The CA (PEM) etcd's server certificate chains to: etcd over TLS
    #[arg(long = "etcd-ca", global = true, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// A client certificate (PEM), when etcd asks for one (needs --etcd-key)
    #[arg(
        long = "etcd-cert",
        global = true,
        value_name = "FILE",
        requires = "key"
    )]
    pub cert: Option<PathBuf>,
    /// The client certificate's key (PEM)
    #[arg(
        long = "etcd-key",
        global = true,
        value_name = "FILE",
        requires = "cert"
    )]
    pub key: Option<PathBuf>,
    /// etcd's user (its password from CLUSTER_ETCD_PASSWORD)
    #[arg(
        long = "etcd-user",
        global = true,
        env = "CLUSTER_ETCD_USER",
        value_name = "USER"
    )]
    pub user: Option<String>,
    /// etcd without TLS: anyone on the path reads and forges the registry
    #[arg(long = "etcd-plaintext", global = true)]
    pub plaintext: bool,
}

impl EtcdArgs {
    /// A registry on etcd when `--etcd` was given, for `cluster` (a plaintext cluster's
    /// `--cluster-id`; a node with a certificate is in its certificate's cluster); an error
    /// that says what is missing.
    pub fn registry(&self, cluster: Option<&str>) -> Result<Option<EtcdRegistry>, String> {
        if self.endpoints.is_empty() {
            if self.ca.is_some() || self.user.is_some() || self.plaintext {
                return Err("--etcd-* options without --etcd HOST:PORT".to_owned());
            }
            return Ok(None);
        }
        self.connect(cluster).map(Some)
    }

    #[cfg(not(feature = "etcd"))]
    fn connect(&self, _cluster: Option<&str>) -> Result<EtcdRegistry, String> {
        Err(NOT_BUILT_IN.to_owned())
    }

    #[cfg(feature = "etcd")]
    fn connect(&self, cluster: Option<&str>) -> Result<EtcdRegistry, String> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
        };
        let mut config = EtcdConfig::new(self.endpoints.iter().cloned());
        if let Some(cluster) = cluster {
            config = config.cluster(cluster);
        }
        config = match (&self.ca, self.plaintext) {
            (Some(ca), false) => {
                let client = match (&self.cert, &self.key) {
                    (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
                    _ => None,
                };
                config.tls(read(ca)?, client)
            }
            (None, true) => config.plaintext(),
            (Some(_), true) => return Err("--etcd-ca and --etcd-plaintext: choose one".to_owned()),
            (None, false) => {
                return Err(
                    "etcd without TLS: give --etcd-ca FILE, or --etcd-plaintext to ask for plaintext by name"
                        .to_owned(),
                );
            }
        };
        if let Some(user) = &self.user {
            let password = std::env::var(PASSWORD_VARIABLE).map_err(|_| {
                format!("--etcd-user {user} needs its password in {PASSWORD_VARIABLE}")
            })?;
            config = config.user(user.clone(), password);
        }
        Ok(EtcdRegistry::new(config))
    }
}

/// A registry on etcd, which a build without the `etcd` feature can never make: the callers'
/// code stays the same in both builds.
#[cfg(not(feature = "etcd"))]
#[derive(Debug, Clone)]
pub enum EtcdRegistry {}

#[cfg(not(feature = "etcd"))]
mod never {
    use cluster::registry::{
        LocalCopy, NodeInfo, Registry, RegistryError, RegistryFuture, ServiceEntry,
    };

    impl Registry for super::EtcdRegistry {
        fn register(&self, _: ServiceEntry) -> RegistryFuture<'_, Result<(), RegistryError>> {
            match *self {}
        }
        fn deregister(&self, _: &str, _: &str) -> RegistryFuture<'_, Result<(), RegistryError>> {
            match *self {}
        }
        fn join(&self, _: NodeInfo) -> RegistryFuture<'_, Result<(), RegistryError>> {
            match *self {}
        }
        fn leave(&self, _: &str) -> RegistryFuture<'_, Result<(), RegistryError>> {
            match *self {}
        }
        fn local_copy(&self) -> &LocalCopy {
            match *self {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(feature = "etcd"))]
    #[test]
    fn without_the_feature_etcd_is_refused_with_how_to_build_it_in() {
        let asked = EtcdArgs {
            endpoints: vec!["127.0.0.1:2379".into()],
            plaintext: true,
            ..EtcdArgs::default()
        };
        assert_eq!(asked.registry(None).unwrap_err(), NOT_BUILT_IN);
        assert!(EtcdArgs::default().registry(None).unwrap().is_none());
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn etcd_needs_tls_or_plaintext_by_name_and_no_option_without_endpoints() {
        let none = EtcdArgs::default();
        assert!(none.registry(None).unwrap().is_none());
        let stray = EtcdArgs {
            plaintext: true,
            ..EtcdArgs::default()
        };
        assert!(stray.registry(None).unwrap_err().contains("without --etcd"));
        let bare = EtcdArgs {
            endpoints: vec!["127.0.0.1:2379".into()],
            ..EtcdArgs::default()
        };
        assert!(
            bare.registry(None)
                .unwrap_err()
                .contains("--etcd-plaintext")
        );
        let plain = EtcdArgs {
            plaintext: true,
            ..bare.clone()
        };
        assert!(plain.registry(None).unwrap().is_some());
        let missing_ca = EtcdArgs {
            ca: Some("/nonexistent/ca.pem".into()),
            ..bare
        };
        assert!(
            missing_ca
                .registry(None)
                .unwrap_err()
                .contains("/nonexistent/ca.pem")
        );
    }
}
