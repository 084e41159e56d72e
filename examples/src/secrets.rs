//! A cluster's secrets on disk, as the bootstrap commands write them, and a throwaway set in
//! memory for the demo and the tests.
//!
//! ```text
//! cluster-node init --cluster prod --dir certs      # certs/ca.pem, ca.key, gossip.key
//! cluster-node issue --dir certs --node search-1    # certs/search-1.pem, search-1.key
//! ```
//!
//! `ca.key` signs new nodes: keep it where `issue` runs, not on the nodes. A node needs
//! `ca.pem`, `gossip.key` and its own two files.

use std::path::Path;

use cluster::{Authority, GossipKey, Identity, IdentityError, Keyring};

/// A CA and a gossip key.
pub struct Secrets {
    /// The cluster's CA.
    pub ca: Authority,
    /// The gossip key.
    pub key: GossipKey,
}

impl Secrets {
    /// New secrets for `cluster`, in memory only: gone when the process ends.
    pub fn throwaway(cluster: &str) -> Self {
        Self {
            ca: Authority::new(cluster).expect("a valid cluster name"),
            key: GossipKey::generate(),
        }
    }

    /// A certificate for `node`.
    pub fn identity(&self, node: &str) -> Identity {
        self.ca.issue(node).expect("a valid node name")
    }

    /// A keyring of the gossip key.
    pub fn keyring(&self) -> Keyring {
        Keyring::new(self.key.clone())
    }
}

/// `cluster-node init`: a new CA and gossip key in `dir`, which must not hold one already.
pub fn init(dir: &Path, cluster: &str) -> Result<(), IdentityError> {
    if dir.join("ca.pem").exists() {
        return Err(IdentityError::Invalid(format!(
            "{} already holds a cluster's CA (ca.pem): refusing to replace it",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir).map_err(|source| IdentityError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let ca = Authority::new(cluster)?;
    write(&dir.join("ca.pem"), ca.cert_pem(), false)?;
    write(&dir.join("ca.key"), &ca.key_pem(), true)?;
    let key = GossipKey::generate();
    let text = format!(
        "# the gossip keyring of cluster {cluster}: the first key seals, every key opens\n{}\n",
        key.to_hex()
    );
    write(&dir.join("gossip.key"), &text, true)
}

/// `cluster-node issue`: a certificate and key for `node` in `dir`, from its `ca.pem` and
/// `ca.key`.
pub fn issue(dir: &Path, node: &str, days: u32) -> Result<(), IdentityError> {
    let ca = Authority::from_dir(dir)?;
    let (cert, key) = ca.issue_pem(node, days)?;
    write(&dir.join(format!("{node}.pem")), &cert, false)?;
    write(&dir.join(format!("{node}.key")), &key, true)
}

/// Writes `text` to `path`; a secret is readable by its owner only.
fn write(path: &Path, text: &str, secret: bool) -> Result<(), IdentityError> {
    let io = |source| IdentityError::Io {
        path: path.to_owned(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let _ = secret;
    use std::io::Write;
    options
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(io)
}
