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

use std::path::{Path, PathBuf};

use clap::Args;
use cluster::{Authority, GossipKey, IdentityError};

/// `init`'s command line, shared by `cluster` and `cluster-node`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// The cluster's name, which its CA certificate carries
    #[arg(long, value_name = "NAME")]
    pub cluster: String,
    /// Where to write them; it must not hold a cluster already
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
}

impl InitArgs {
    /// Runs [`init`]; what to print, naming the next step as `program` (the binary) says it.
    pub fn run(&self, program: &str) -> Result<String, IdentityError> {
        init(&self.dir, &self.cluster)?;
        Ok(format!(
            "cluster `{cluster}`: wrote {dir}/ca.pem, {dir}/ca.key (keep it off the nodes) and {dir}/gossip.key; next: {program} issue --dir {dir} --node NAME",
            cluster = self.cluster,
            dir = self.dir.display(),
        ))
    }
}

/// `issue`'s command line, shared by `cluster` and `cluster-node`.
#[derive(Debug, Args)]
pub struct IssueArgs {
    /// The directory `init` wrote
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// The name, as the node (or `cluster --name`) gives it
    #[arg(long, value_name = "NAME")]
    pub node: String,
    /// How long the certificate is valid, in days
    #[arg(long, value_name = "N", default_value_t = 365)]
    pub days: u32,
    /// Replace an existing certificate and key of that name (to renew them)
    #[arg(long)]
    pub force: bool,
}

impl IssueArgs {
    /// Runs [`issue`]; what to print.
    pub fn run(&self) -> Result<String, IdentityError> {
        issue(&self.dir, &self.node, self.days, self.force)?;
        Ok(format!(
            "`{node}`: wrote {dir}/{node}.pem and {dir}/{node}.key",
            node = self.node,
            dir = self.dir.display()
        ))
    }
}

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
