//! TLS for the server (rustls on ring): the certificate and key it presents, and the CA its
//! replication client trusts for `https://` peers. The handshakes run in the accept loop
//! (`serve.rs`), each in its connection's task, within the header timeout.

use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// What the server presents: a certificate chain and its key, from PEM.
#[derive(Clone)]
pub struct ServerTls {
    config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerTls { .. }")
    }
}

fn invalid(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("{what}: {e}"))
}

// Deprecated from rustls 0.23.48 (ring has no post-quantum key exchange); as in
// `cluster/src/security/tls.rs`, ring is kept so that no C build needs cmake.
#[allow(deprecated)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl ServerTls {
    /// From PEM text: the certificate chain (end entity first) and its private key (PKCS#8,
    /// PKCS#1 or SEC1).
    pub fn from_pem(cert: &[u8], key: &[u8]) -> io::Result<Self> {
        Self::build(cert, key, None)
    }

    /// As [`ServerTls::from_pem`], and asks clients for a certificate issued by `client_ca`
    /// (PEM): one that presents none still connects (an API key may name it), one whose
    /// certificate that CA did not issue does not. The gateway's function routes admit
    /// clients by the node name their certificate carries (`EdgeCallers::certificates`).
    pub fn from_pem_with_client_ca(cert: &[u8], key: &[u8], client_ca: &[u8]) -> io::Result<Self> {
        Self::build(cert, key, Some(client_ca))
    }

    fn build(cert: &[u8], key: &[u8], client_ca: Option<&[u8]>) -> io::Result<Self> {
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid("the TLS certificate", e))?;
        if chain.is_empty() {
            return Err(invalid("the TLS certificate", "no certificate in the PEM"));
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| invalid("the TLS key", e))?;
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid("TLS", e))?;
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(pem) => {
                let mut roots = rustls::RootCertStore::empty();
                for ca in CertificateDer::pem_slice_iter(pem) {
                    let ca = ca.map_err(|e| invalid("the client CA", e))?;
                    roots.add(ca).map_err(|e| invalid("the client CA", e))?;
                }
                if roots.is_empty() {
                    return Err(invalid("the client CA", "no certificate in the PEM"));
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider(),
                )
                .allow_unauthenticated()
                .build()
                .map_err(|e| invalid("the client CA", e))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| invalid("the TLS certificate and key", e))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            config: Arc::new(config),
        })
    }

    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config.clone())
    }

    /// From PEM files (`--tls-cert`, `--tls-key`).
    pub fn from_pem_files(cert: impl AsRef<Path>, key: impl AsRef<Path>) -> io::Result<Self> {
        let read = |p: &Path, what: &str| {
            std::fs::read(p).map_err(|e| invalid(&format!("{what} {}", p.display()), e))
        };
        Self::from_pem(
            &read(cert.as_ref(), "the TLS certificate")?,
            &read(key.as_ref(), "the TLS key")?,
        )
    }
}

/// A CA certificate (PEM) the replication client trusts, besides the usual web roots.
pub(crate) fn ca_certificates(pem: &[u8]) -> io::Result<Vec<reqwest::Certificate>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid("the CA certificate", e))?;
    if certs.is_empty() {
        return Err(invalid("the CA certificate", "no certificate in the PEM"));
    }
    certs
        .iter()
        .map(|c| reqwest::Certificate::from_der(c).map_err(|e| invalid("the CA certificate", e)))
        .collect()
}
