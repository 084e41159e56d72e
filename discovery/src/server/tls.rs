//! TLS for the server (rustls on ring): the certificate and key it presents, a listener that
//! hands axum connections already through the handshake, and the CA its replication client
//! trusts for `https://` peers.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a connection has to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl ServerTls {
    /// From PEM text: the certificate chain (end entity first) and its private key (PKCS#8,
    /// PKCS#1 or SEC1).
    pub fn from_pem(cert: &[u8], key: &[u8]) -> io::Result<Self> {
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid("the TLS certificate", e))?;
        if chain.is_empty() {
            return Err(invalid("the TLS certificate", "no certificate in the PEM"));
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| invalid("the TLS key", e))?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid("TLS", e))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| invalid("the TLS certificate and key", e))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            config: Arc::new(config),
        })
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

/// Accepts TCP connections and hands on those whose TLS handshake succeeded. Handshakes run
/// in their own tasks, so that a slow or silent client does not hold up the others; a
/// plaintext request fails its handshake and is closed.
pub(crate) struct TlsListener {
    addr: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    pub(crate) fn new(listener: TcpListener, tls: &ServerTls) -> io::Result<Self> {
        let addr = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(tls.config.clone());
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = tx.closed() => return,
                    a = listener.accept() => a,
                };
                let (tcp, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors, say: wait rather than spin.
                        tracing::warn!("accepting a connection: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!("TLS handshake with {peer} failed: {e}"),
                        Err(_) => tracing::debug!("TLS handshake with {peer} timed out"),
                    }
                });
            }
        });
        Ok(Self { addr, ready })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accepting task ended (it only does when this listener is dropped).
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
