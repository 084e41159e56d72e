//! The node's side: one `GET` over mutual TLS per browser request, under the operator's
//! identity, checking the node's certificate against the cluster's CA and the node's name as
//! Prometheus does (`docs/operations.md`, "Scraping with Prometheus").

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cluster::Identity;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;

use crate::Failure;

/// The time a fetch has, from the connection to the last byte of the node's answer.
pub(super) const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest answer passed on: the node's page stays under 400 KB at the registry's limits.
pub(super) const MAX_ANSWER: usize = 4 << 20;

/// A node's metrics endpoint, and how to reach it.
pub(super) struct Upstream {
    node: String,
    addr: String,
    name: ServerName<'static>,
    connector: TlsConnector,
    /// The last failure said on stderr, so that a page reloading every 5 s says it once.
    said: Mutex<Option<String>>,
    /// Where ca.pem is, to name it in a failure.
    ca: String,
}

impl Upstream {
    /// The operator `operator`'s identity in `dir`, towards `node` at `addr` (HOST:PORT).
    pub(super) fn new(dir: &Path, operator: &str, node: &str, addr: &str) -> Result<Self, Failure> {
        // The library's checks first: the files are there, the certificate chains to the CA
        // and the key is its key, each said plainly.
        Identity::from_dir(dir, operator).map_err(|e| {
            Failure::Usage(format!(
                "the identity of `{operator}` in {}: {e}",
                dir.display()
            ))
        })?;
        let name = ServerName::try_from(node.to_owned()).map_err(|_| {
            Failure::Usage(format!(
                "`{node}` is not a node's name (its certificate's DNS name)"
            ))
        })?;
        let pem = |file: String| {
            let path = dir.join(file);
            std::fs::read(&path)
                .map_err(|e| Failure::Usage(format!("cannot read {}: {e}", path.display())))
        };
        let unreadable = |what: &str, e: rustls::pki_types::pem::Error| {
            Failure::Usage(format!("{what} in {}: {e}", dir.display()))
        };
        let ca = pem("ca.pem".to_owned())?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&ca) {
            roots
                .add(cert.map_err(|e| unreadable("ca.pem", e))?)
                .map_err(|e| Failure::Usage(format!("ca.pem in {}: {e}", dir.display())))?;
        }
        let chain = CertificateDer::pem_slice_iter(&pem(format!("{operator}.pem"))?)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| unreadable(&format!("{operator}.pem"), e))?;
        let key = PrivateKeyDer::from_pem_slice(&pem(format!("{operator}.key"))?)
            .map_err(|e| unreadable(&format!("{operator}.key"), e))?;
        let tls = |e: rustls::Error| Failure::Usage(format!("TLS: {e}"));
        let config = rustls::ClientConfig::builder_with_provider(provider())
            // The node speaks TLS 1.3 only.
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(tls)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(tls)?;
        Ok(Self {
            node: node.to_owned(),
            addr: addr.to_owned(),
            name,
            connector: TlsConnector::from(Arc::new(config)),
            said: Mutex::new(None),
            ca: dir.join("ca.pem").display().to_string(),
        })
    }

    /// The node's whole answer to `GET path` (its status line, headers and body, as sent), or
    /// why there is none; a failure is said on stderr once until it changes.
    pub(super) async fn fetch(&self, path: &str) -> Result<Vec<u8>, String> {
        let fetched = match tokio::time::timeout(FETCH_TIMEOUT, self.get(path)).await {
            Ok(fetched) => fetched,
            Err(_) => Err(format!(
                "{} at {} did not answer within {FETCH_TIMEOUT:?}",
                self.node, self.addr
            )),
        };
        let mut said = self.said.lock().unwrap_or_else(|p| p.into_inner());
        match &fetched {
            Ok(_) => *said = None,
            Err(why) if said.as_deref() != Some(why) => {
                eprintln!("cluster: {}", crate::out::shown_lines(why));
                *said = Some(why.clone());
            }
            Err(_) => {}
        }
        fetched
    }

    async fn get(&self, path: &str) -> Result<Vec<u8>, String> {
        let tcp = tokio::net::TcpStream::connect(&self.addr)
            .await
            .map_err(|e| format!("cannot reach {} at {}: {e}", self.node, self.addr))?;
        let mut stream = self
            .connector
            .connect(self.name.clone(), tcp)
            .await
            .map_err(|e| self.tls_failure(&e))?;
        // Only the path goes on: nothing of the browser's request (its cookies, its headers).
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.node
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| self.tls_failure(&e))?;
        let mut answer = Vec::new();
        (&mut stream)
            .take(MAX_ANSWER as u64 + 1)
            .read_to_end(&mut answer)
            .await
            .map_err(|e| self.tls_failure(&e))?;
        if answer.len() > MAX_ANSWER {
            return Err(format!(
                "{}'s answer is over {} MiB",
                self.node,
                MAX_ANSWER >> 20
            ));
        }
        if !answer.starts_with(b"HTTP/1.") {
            return Err(format!(
                "{} at {} sent no HTTP answer",
                self.node, self.addr
            ));
        }
        Ok(answer)
    }

    /// A TLS failure, named: the two an operator meets are a node of another CA and a node
    /// that is not the one named.
    fn tls_failure(&self, e: &std::io::Error) -> String {
        use rustls::{CertificateError, Error};
        let (node, addr) = (&self.node, &self.addr);
        match e.get_ref().and_then(|e| e.downcast_ref::<Error>()) {
            Some(Error::InvalidCertificate(CertificateError::UnknownIssuer)) => format!(
                "TLS: the certificate at {addr} is not of the CA in {} (a node of another \
                 cluster?)",
                self.ca
            ),
            Some(Error::InvalidCertificate(
                why @ (CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. }),
            )) => format!(
                "TLS: the certificate at {addr} does not name `{node}` (another node at this \
                 address?): {why}"
            ),
            Some(Error::AlertReceived(alert)) => {
                format!("TLS: {node} at {addr} refused this operator's certificate ({alert:?})")
            }
            Some(other) => format!("TLS with {node} at {addr}: {other}"),
            None => format!("{node} at {addr}: {e}"),
        }
    }
}

// ring's provider, as the rest of the workspace (cluster/src/security/tls.rs says why the
// deprecation of rustls 0.23.48 is allowed).
#[allow(deprecated)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
