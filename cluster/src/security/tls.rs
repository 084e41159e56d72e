//! Mutual TLS for RPC connections (rustls on ring, TLS 1.3 only). Both sides present a
//! certificate of the cluster's CA. The verifiers check the chain only; who the peer is comes
//! from the name in its certificate, read after the handshake ([`peer_of`]): the client then
//! compares it with the registry entry it chose, the provider hands it to handlers as the caller.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

use super::{Identity, IdentityError, names};

/// The first byte of every TLS connection (a handshake record): how a provider tells a TLS
/// client from a plaintext one before answering either.
pub(crate) const TLS_HANDSHAKE_RECORD: u8 = 0x16;

// rustls 0.23.48 deprecates ring's provider because ring has no post-quantum key exchange;
// aws-lc-rs, which has, is a C build that needs cmake (../shared/reference/security-and-limits.md).
// A dependent crate resolving a newer rustls would otherwise see the warning in our code.
#[allow(deprecated)]
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(ca: &[CertificateDer<'static>]) -> Result<RootCertStore, rustls::Error> {
    let mut roots = RootCertStore::empty();
    for cert in ca {
        roots
            .add(cert.clone())
            .map_err(|e| rustls::Error::General(format!("the CA certificate: {e}")))?;
    }
    Ok(roots)
}

/// Whether `chain` (end entity first) chains to one of `ca`, now.
pub(crate) fn verify_chain(
    ca: &[CertificateDer<'static>],
    chain: &[CertificateDer<'_>],
) -> Result<(), rustls::Error> {
    let roots = roots(ca)?;
    let parsed = ParsedCertificate::try_from(&chain[0])?;
    rustls::client::verify_server_cert_signed_by_trust_anchor(
        &parsed,
        &roots,
        &chain[1..],
        UnixTime::now(),
        provider().signature_verification_algorithms.all,
    )
}

/// Whether `key` is the private key of `chain`'s certificate.
pub(crate) fn check_key(
    chain: &[CertificateDer<'static>],
    key: &PrivateKeyDer<'static>,
) -> Result<(), rustls::Error> {
    rustls::sign::CertifiedKey::from_der(chain.to_vec(), key.clone_key(), &provider()).map(|_| ())
}

/// The TLS side of a secure node: its client and server configurations, and who it is.
pub(crate) struct Tls {
    pub(crate) client: Arc<ClientConfig>,
    pub(crate) server: Arc<ServerConfig>,
    pub(crate) cluster: String,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl Tls {
    pub(crate) fn new(identity: &Identity) -> Result<Self, IdentityError> {
        let id = &identity.inner;
        let invalid = |e: rustls::Error| IdentityError::Invalid(format!("TLS: {e}"));
        let provider = provider();
        let roots = Arc::new(roots(&id.ca).map_err(invalid)?);
        let callers = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| IdentityError::Invalid(format!("TLS: {e}")))?;
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(invalid)?
            .with_client_cert_verifier(callers)
            .with_single_cert(id.chain.clone(), id.key.clone_key())
            .map_err(invalid)?;
        let verifier = Arc::new(ChainOnly {
            roots,
            provider: provider.clone(),
        });
        let client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(invalid)?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_client_auth_cert(id.chain.clone(), id.key.clone_key())
            .map_err(invalid)?;
        Ok(Self {
            client: Arc::new(client),
            server: Arc::new(server),
            cluster: id.cluster.clone(),
        })
    }

    /// The node a peer's certificate names, if it is of this node's cluster.
    pub(crate) fn peer_of(&self, certs: Option<&[CertificateDer<'_>]>) -> Result<String, String> {
        let Some(first) = certs.and_then(|c| c.first()) else {
            return Err("the peer presented no certificate".to_owned());
        };
        let (cluster, node) = names::of_certificate(first)?;
        if cluster != self.cluster {
            return Err(format!(
                "the peer's certificate is for node `{node}` of cluster `{cluster}`, not of `{}`",
                self.cluster
            ));
        }
        Ok(node)
    }
}

/// The name a client connects to: the node's name where it is a DNS name (it keys the
/// session cache, so that resumption finds the right ticket), else the address.
pub(crate) fn server_name(node: &str, addr: SocketAddr) -> ServerName<'static> {
    ServerName::try_from(node.to_owned()).unwrap_or_else(|_| ServerName::from(addr.ip()))
}

/// Checks that the provider's certificate chains to the cluster's CA, and nothing about its
/// name: the connector reads the name afterwards and compares it with the registry entry, so
/// that a mismatch is an error of its own rather than a generic handshake failure.
#[derive(Debug)]
struct ChainOnly {
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let parsed = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &parsed,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
