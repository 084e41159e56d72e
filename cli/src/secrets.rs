//! A cluster's secrets on disk, as `cluster init` and `cluster issue` (and `cluster-node`'s
//! commands of the same names) write them:
//!
//! ```text
//! cluster init --cluster prod --dir certs      # certs/ca.pem, ca.key, gossip.key
//! cluster issue --dir certs --node search-1    # certs/search-1.pem, search-1.key
//! ```
//!
//! `ca.key` signs new nodes: keep it where `issue` runs, not on the nodes. A node needs
//! `ca.pem`, `gossip.key` and its own two files.

use std::path::Path;

use cluster::{Authority, GossipKey, IdentityError};

/// `cluster init`: a new CA and gossip key in `dir`, which must not hold one already.
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

/// `cluster issue`: a certificate and key for `node` in `dir`, from its `ca.pem` and
/// `ca.key`; an existing pair of that name is replaced only if `replace`.
pub fn issue(dir: &Path, node: &str, days: u32, replace: bool) -> Result<(), IdentityError> {
    let cert = dir.join(format!("{node}.pem"));
    if !replace && cert.exists() {
        // A second `issue` under a name in use would swap a running node's key under it.
        return Err(IdentityError::Invalid(format!(
            "{} already exists: refusing to replace `{node}`'s certificate and key (give --force to renew them)",
            cert.display()
        )));
    }
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
    use std::io::Write;
    let mut file = options.open(path).map_err(io)?;
    // `mode` applies only to a file created now: a replaced key (`issue --force`) keeps the
    // mode it had, which may be readable by others. Set before the secret is written.
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io)?;
    }
    let _ = secret;
    file.write_all(text.as_bytes()).map_err(io)
}
