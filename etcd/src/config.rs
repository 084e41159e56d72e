//! How an [`EtcdRegistry`](crate::EtcdRegistry) reaches etcd, and how long a node outlives
//! its last keep-alive.

use std::time::Duration;

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};

/// Where etcd is, how to authenticate to it, and the registry's namespace and lease.
///
/// Secure by default: an endpoint is reached over TLS ([`tls`](Self::tls)) unless
/// [`plaintext`](Self::plaintext) is asked for by name. Every setting has a setter, which keeps
/// it within its bounds.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// etcd's client endpoints, `host:port` (a scheme is added).
    pub(crate) endpoints: Vec<String>,
    /// The root of the registry's keys: `/cluster` by default. Every cluster lives under
    /// `<prefix>/<cluster>/`.
    pub(crate) prefix: String,
    /// The cluster's name: `default`, or the one the node's certificate is for (a node with an
    /// identity tells it before it joins; another configured here is refused).
    pub(crate) cluster: Option<String>,
    /// How long a node's entries outlive its last keep-alive: 5 s. A crashed node is out of
    /// every lookup within this (plus etcd's expiry check, 500 ms). Keep-alives go every third.
    pub(crate) lease_ttl: Duration,
    /// How long a connection attempt and a write wait for etcd: 5 s.
    pub(crate) request_timeout: Duration,
    /// Keys read into the local copy at most: 100,000. Beyond it, entries are skipped with a
    /// warning (anyone who can write under the prefix could otherwise grow every node's copy).
    pub(crate) max_keys: usize,
    /// A key's value read at most: 1 MiB (etcd's own default request limit is 1.5 MiB).
    pub(crate) max_value: usize,
    pub(crate) tls: Option<Tls>,
    /// The name etcd's certificate is checked against, when not the endpoint's host.
    pub(crate) tls_domain: Option<String>,
    pub(crate) plaintext: bool,
    pub(crate) user: Option<(String, String)>,
}

#[derive(Clone)]
pub(crate) struct Tls {
    ca: Vec<u8>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("client_certificate", &self.client.is_some())
            .finish_non_exhaustive()
    }
}

impl EtcdConfig {
    /// etcd at these endpoints (`host:port`), over TLS once [`tls`](Self::tls) is given.
    pub fn new(endpoints: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: "/cluster".to_owned(),
            cluster: None,
            lease_ttl: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            max_keys: 100_000,
            max_value: 1 << 20,
            tls: None,
            tls_domain: None,
            plaintext: false,
            user: None,
        }
    }

    /// etcd's TLS: the CA (PEM) its server certificate chains to, and a client certificate
    /// and key (PEM) when etcd asks for one (`--client-cert-auth`).
    pub fn tls(mut self, ca_pem: impl Into<Vec<u8>>, client: Option<(Vec<u8>, Vec<u8>)>) -> Self {
        self.tls = Some(Tls {
            ca: ca_pem.into(),
            client,
        });
        self
    }

    /// The name etcd's certificate is checked against, when not the endpoint's host.
    pub fn tls_domain(mut self, domain: impl Into<String>) -> Self {
        self.tls_domain = Some(domain.into());
        self
    }

    /// etcd without TLS: anyone on the path reads and forges the registry. For loopback and
    /// tests; asked for by name.
    pub fn plaintext(mut self) -> Self {
        self.plaintext = true;
        self
    }

    /// etcd's own authentication (`etcdctl auth enable`): a user and password. Give the user a
    /// role with read-write on the prefix only.
    pub fn user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((name.into(), password.into()));
        self
    }

    /// The root of the registry's keys.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into().trim_end_matches('/').to_owned();
        self
    }

    /// The cluster's name (its keys' namespace under the prefix).
    pub fn cluster(mut self, cluster: impl Into<String>) -> Self {
        self.cluster = Some(cluster.into());
        self
    }

    /// How long a node's entries outlive its last keep-alive: 5 s by default, at least 2 s, at
    /// most a day, in whole seconds (rounded up: etcd's leases are in seconds).
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl.clamp(Duration::from_secs(2), Duration::from_secs(86_400));
        self
    }

    /// How long a connection attempt and each request wait for etcd: 5 s by default, at least
    /// 100 ms. A node's start fails after it when etcd does not answer.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout.max(Duration::from_millis(100));
        self
    }

    /// Keys read into the local copy at most: 100,000 by default.
    pub fn max_keys(mut self, keys: usize) -> Self {
        self.max_keys = keys.max(1);
        self
    }

    /// A key's value read at most: 1 MiB by default. Larger values are skipped with a warning.
    pub fn max_value(mut self, bytes: usize) -> Self {
        self.max_value = bytes;
        self
    }

    /// The endpoints with their scheme, and the connection's options; an error when neither
    /// TLS nor plaintext was chosen.
    pub(crate) fn connection(&self) -> Result<(Vec<String>, ConnectOptions), String> {
        if self.endpoints.is_empty() {
            return Err("no etcd endpoint configured".to_owned());
        }
        let scheme = match (&self.tls, self.plaintext) {
            (Some(_), _) => "https",
            (None, true) => "http",
            (None, false) => {
                return Err(
                    "etcd without TLS: give EtcdConfig::tls(ca, client), or ask for EtcdConfig::plaintext() by name"
                        .to_owned(),
                );
            }
        };
        let endpoints = self
            .endpoints
            .iter()
            .map(|e| match e.split_once("://") {
                Some((_, rest)) => format!("{scheme}://{rest}"),
                None => format!("{scheme}://{e}"),
            })
            .collect();
        // No HTTP/2 pings: a dead connection is found by the lease's keep-alive, which waits
        // at most `request_timeout` for each answer (`lease.rs`), on a clock the tests can hold.
        let mut options = ConnectOptions::new().with_connect_timeout(self.request_timeout);
        if let Some(tls) = &self.tls {
            let mut config = TlsOptions::new().ca_certificate(Certificate::from_pem(&tls.ca));
            if let Some((cert, key)) = &tls.client {
                config = config.identity(Identity::from_pem(cert, key));
            }
            if let Some(domain) = &self.tls_domain {
                config = config.domain_name(domain.clone());
            }
            options = options.with_tls(config);
        }
        if let Some((user, password)) = &self.user {
            // A token expires (`--auth-token-ttl`, 300 s) and does not survive an etcd restart:
            // the client authenticates again when etcd says it is invalid.
            options = options
                .with_user(user.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        Ok((endpoints, options))
    }

    /// Seconds of the lease etcd grants: the TTL rounded up (etcd's leases are in seconds).
    pub(crate) fn ttl_secs(&self) -> i64 {
        let secs = self.lease_ttl.as_secs() + u64::from(self.lease_ttl.subsec_nanos() > 0);
        i64::try_from(secs.max(2)).unwrap_or(i64::MAX)
    }
}
