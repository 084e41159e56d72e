//! A node's identity: its certificate and key, and the cluster's CA that every peer's
//! certificate must chain to. Loaded from PEM (files or memory), checked when loaded: a node
//! whose certificate does not fit its CA refuses to start rather than failing every handshake.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::{names, tls};

/// A node's certificate, its key and its cluster's CA. Cheap to clone.
///
/// ```
/// let ca = cluster::Authority::new("staging")?;
/// let identity = ca.issue("search-1")?;
/// assert_eq!((identity.cluster(), identity.node()), ("staging", "search-1"));
/// # Ok::<(), cluster::IdentityError>(())
/// ```
#[derive(Clone)]
pub struct Identity {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) cluster: String,
    pub(crate) node: String,
    pub(crate) ca: Vec<CertificateDer<'static>>,
    pub(crate) chain: Vec<CertificateDer<'static>>,
    pub(crate) key: PrivateKeyDer<'static>,
    /// Its TLS side, made once: the node's connections and its registry's name claim share it.
    tls: std::sync::OnceLock<Arc<tls::Tls>>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("cluster", &self.inner.cluster)
            .field("node", &self.inner.node)
            .finish_non_exhaustive()
    }
}

/// An identity or a key could not be loaded or made.
#[derive(Debug)]
#[non_exhaustive]
pub enum IdentityError {
    /// A file could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The PEM, the certificate or the key is not what a node needs; the text says why.
    Invalid(String),
}

impl std::fmt::Display for IdentityError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io { path, source } => {
                write!(f, "cannot read or write {}: {source}", path.display())
            }
            Self::Invalid(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for IdentityError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::Invalid(_) => None,
        }
    }
}

impl Identity {
    /// An identity from PEM text: the cluster's CA certificate(s), the node's certificate
    /// (followed by any intermediates) and its private key (PKCS#8, SEC1 or PKCS#1).
    pub fn from_pem(ca: &str, cert: &str, key: &str) -> Result<Self, IdentityError> {
        let ca = certificates("the CA", ca)?;
        let chain = certificates("the node's certificate", cert)?;
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| {
            IdentityError::Invalid(format!("the node's key is not a PEM private key: {e}"))
        })?;
        let (cluster, node) = names::of_certificate(&chain[0]).map_err(IdentityError::Invalid)?;
        tls::verify_chain(&ca, &chain).map_err(|e| {
            IdentityError::Invalid(format!(
                "the certificate of node `{node}` does not chain to the CA given: {e}"
            ))
        })?;
        // A certificate with another node's key would fail every handshake: say so now.
        tls::check_key(&chain, &key).map_err(|e| {
            IdentityError::Invalid(format!(
                "the key given is not the key of node `{node}`'s certificate: {e}"
            ))
        })?;
        Ok(Self {
            inner: Arc::new(Inner {
                cluster,
                node,
                ca,
                chain,
                key,
                tls: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Its TLS side (client and server configurations), made on first use.
    pub(crate) fn tls(&self) -> Result<Arc<tls::Tls>, IdentityError> {
        if let Some(tls) = self.inner.tls.get() {
            return Ok(tls.clone());
        }
        let made = Arc::new(tls::Tls::new(self)?);
        Ok(self.inner.tls.get_or_init(|| made).clone())
    }

    /// An identity from three PEM files.
    pub fn from_pem_files(
        ca: impl AsRef<Path>,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<Self, IdentityError> {
        Self::from_pem(
            &read(ca.as_ref())?,
            &read(cert.as_ref())?,
            &read(key.as_ref())?,
        )
    }

    /// The identity of `node` in a directory the bootstrap command wrote: `ca.pem`,
    /// `<node>.pem` and `<node>.key` (`cluster issue` makes the last two).
    pub fn from_dir(dir: impl AsRef<Path>, node: &str) -> Result<Self, IdentityError> {
        let dir = dir.as_ref();
        let cert = dir.join(format!("{node}.pem"));
        if dir.join("ca.pem").exists() && !cert.exists() {
            return Err(IdentityError::Invalid(format!(
                "{} holds no certificate for node `{node}`: run `cluster issue --dir {} --node {node}`",
                dir.display(),
                dir.display()
            )));
        }
        Self::from_pem_files(dir.join("ca.pem"), cert, dir.join(format!("{node}.key")))
    }

    /// The cluster the certificate is for.
    pub fn cluster(&self) -> &str {
        &self.inner.cluster
    }

    /// The node the certificate names.
    pub fn node(&self) -> &str {
        &self.inner.node
    }
}

fn certificates(what: &str, pem: &str) -> Result<Vec<CertificateDer<'static>>, IdentityError> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| IdentityError::Invalid(format!("{what} is not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(IdentityError::Invalid(format!(
            "{what} holds no certificate"
        )));
    }
    Ok(certs)
}

pub(crate) fn read(path: &Path) -> Result<String, IdentityError> {
    std::fs::read_to_string(path).map_err(|source| IdentityError::Io {
        path: path.to_owned(),
        source,
    })
}
