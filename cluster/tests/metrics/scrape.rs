//! A scraper as Prometheus is one: HTTP/1.1 `GET /metrics` over TLS, checking the node's
//! certificate against the cluster's CA and its name, with a client certificate of its own.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::authority;

/// What a scrape got: the status and the body.
pub type Scraped = std::io::Result<(u16, String)>;

/// A TLS client trusting the tests' CA; with a certificate of it naming `client`, if given.
pub fn client_config(client: Option<&str>) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(authority().cert_pem().as_bytes()).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        Some(name) => {
            let (cert, key) = authority().issue_pem(name, 1).unwrap();
            let chain = vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()];
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

/// `GET /metrics` from `node` (its certificate's name) at `addr`, over TLS.
pub async fn tls(addr: SocketAddr, node: &str, config: Arc<rustls::ClientConfig>) -> Scraped {
    tls_get(addr, node, config, "/metrics").await
}

/// `GET path` from `node` at `addr`, over TLS.
pub async fn tls_get(
    addr: SocketAddr,
    node: &str,
    config: Arc<rustls::ClientConfig>,
    path: &str,
) -> Scraped {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from(node.to_owned()).unwrap();
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await?;
    exchange(stream, path).await
}

/// `GET /metrics` at `addr` in plaintext.
pub async fn plain(addr: SocketAddr) -> Scraped {
    exchange(tokio::net::TcpStream::connect(addr).await?, "/metrics").await
}

async fn exchange<S>(mut stream: S, path: &str) -> Scraped
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let Some((head, body)) = answer.split_once("\r\n\r\n") else {
        return Err(std::io::Error::other(format!("no HTTP answer: {answer:?}")));
    };
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_owned()))
}

/// The value of the series `series` (its name and labels as Prometheus writes them, e.g.
/// `cluster_calls_total{service="search",function="search"}`), if the text has it.
pub fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(series)?;
        rest.strip_prefix(' ')?.trim().parse().ok()
    })
}
