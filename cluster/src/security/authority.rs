//! A cluster's certificate authority, made with rcgen: what the bootstrap command
//! (`cluster-node init`, `cluster-node issue`) writes to files, and what tests and the demo
//! make in memory and throw away.

use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use super::identity::read;
use super::{Identity, IdentityError, names};

/// How long a node's certificate is valid by default: a year.
const NODE_DAYS: i64 = 365;
/// How long a CA's certificate is valid: ten years.
const CA_DAYS: i64 = 3650;

/// A cluster's CA: issues the certificates that name its nodes.
///
/// The CA's name is the cluster's: every certificate it issues says
/// `spiffe://<cluster>/node/<node>`, and a node accepts a peer only if it is of its own
/// cluster, so a staging node pointed at a production seed is refused, not merged.
pub struct Authority {
    cluster: String,
    cert_pem: String,
    key: KeyPair,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl Authority {
    /// The longest a node certificate may be valid, in days: 100 years.
    pub const MAX_DAYS: u32 = 36_500;

    /// A new CA for `cluster` (letters, digits, `-`, `_`, `.`), with a new ECDSA P-256 key.
    pub fn new(cluster: &str) -> Result<Self, IdentityError> {
        names::check("the cluster name", cluster).map_err(IdentityError::Invalid)?;
        let key = KeyPair::generate().map_err(invalid)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{cluster} cluster CA"));
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.subject_alt_names = vec![uri(&names::cluster_uri(cluster))?];
        (params.not_before, params.not_after) = validity(CA_DAYS);
        let cert = params.self_signed(&key).map_err(invalid)?;
        Ok(Self {
            cluster: cluster.to_owned(),
            cert_pem: cert.pem(),
            key,
        })
    }

    /// A CA from its certificate and key, as [`cert_pem`](Self::cert_pem) and
    /// [`key_pem`](Self::key_pem) wrote them.
    pub fn from_pem(cert: &str, key: &str) -> Result<Self, IdentityError> {
        let key = KeyPair::from_pem(key)
            .map_err(|e| IdentityError::Invalid(format!("the CA's key cannot be read: {e}")))?;
        let der = rustls::pki_types::pem::PemObject::from_pem_slice(cert.as_bytes())
            .map_err(|e| IdentityError::Invalid(format!("the CA certificate is not PEM: {e}")))?;
        let der: rustls::pki_types::CertificateDer<'_> = der;
        let cluster = names::of_ca(&der).map_err(IdentityError::Invalid)?;
        Ok(Self {
            cluster,
            cert_pem: cert.to_owned(),
            key,
        })
    }

    /// The CA in a directory `cluster-node init` wrote: `ca.pem` and `ca.key`.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self, IdentityError> {
        let dir = dir.as_ref();
        Self::from_pem(&read(&dir.join("ca.pem"))?, &read(&dir.join("ca.key"))?)
    }

    /// The cluster's name.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The CA's certificate, PEM: every node needs it.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA's private key, PEM: keep it off the nodes.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// A certificate and key naming `node`, valid for `days` days, as PEM (certificate, key).
    /// `days` is 1 to [`MAX_DAYS`](Self::MAX_DAYS).
    pub fn issue_pem(&self, node: &str, days: u32) -> Result<(String, String), IdentityError> {
        names::check("the node name", node).map_err(IdentityError::Invalid)?;
        if !(1..=Self::MAX_DAYS).contains(&days) {
            return Err(IdentityError::Invalid(format!(
                "a certificate valid for {days} days: give 1 to {} (100 years)",
                Self::MAX_DAYS
            )));
        }
        let issuer = Issuer::from_ca_cert_pem(&self.cert_pem, &self.key).map_err(invalid)?;
        let key = KeyPair::generate().map_err(invalid)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{node} ({})", self.cluster));
        params.subject_alt_names = vec![uri(&names::node_uri(&self.cluster, node))?];
        // The node's name as a DNS name too, where it is one: who the node is comes from the URI
        // above, but a client that checks a server by name (Prometheus scraping the metrics
        // endpoint, with `server_name: <node>`) reads only DNS and IP names.
        if rustls::pki_types::DnsName::try_from(node).is_ok() {
            params
                .subject_alt_names
                .push(SanType::DnsName(node.try_into().map_err(invalid)?));
        }
        // Each node is both: it serves calls and makes them.
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        (params.not_before, params.not_after) = validity(i64::from(days));
        let cert = params.signed_by(&key, &issuer).map_err(invalid)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// The identity of `node`, issued now, valid for a year.
    pub fn issue(&self, node: &str) -> Result<Identity, IdentityError> {
        let (cert, key) = self.issue_pem(node, NODE_DAYS as u32)?;
        Identity::from_pem(&self.cert_pem, &cert, &key)
    }
}

fn uri(text: &str) -> Result<SanType, IdentityError> {
    Ok(SanType::URI(text.try_into().map_err(invalid)?))
}

/// From an hour ago (clocks a little behind still accept it) to `days` from now.
fn validity(days: i64) -> (time::OffsetDateTime, time::OffsetDateTime) {
    let now = time::OffsetDateTime::now_utc();
    (
        now - time::Duration::hours(1),
        now + time::Duration::days(days),
    )
}

fn invalid(e: impl std::fmt::Display) -> IdentityError {
    IdentityError::Invalid(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_validity_past_a_hundred_years_or_of_zero_days_is_refused_not_a_panic() {
        let ca = Authority::new("prod").unwrap();
        for days in [0, Authority::MAX_DAYS + 1, u32::MAX] {
            let e = ca.issue_pem("n1", days).unwrap_err().to_string();
            assert!(e.contains("1 to 36500"), "{e}");
        }
        assert!(ca.issue_pem("n1", Authority::MAX_DAYS).is_ok());
    }

    #[test]
    fn a_ca_issues_identities_and_reads_back_from_pem() {
        let ca = Authority::new("prod").unwrap();
        let again = Authority::from_pem(ca.cert_pem(), &ca.key_pem()).unwrap();
        assert_eq!(again.cluster(), "prod");
        let (cert, key) = again.issue_pem("search-1", 30).unwrap();
        let id = Identity::from_pem(ca.cert_pem(), &cert, &key).unwrap();
        assert_eq!((id.cluster(), id.node()), ("prod", "search-1"));

        let other = Authority::new("prod").unwrap();
        let Err(IdentityError::Invalid(why)) = Identity::from_pem(other.cert_pem(), &cert, &key)
        else {
            panic!("a certificate of another CA was accepted");
        };
        assert!(why.contains("does not chain"), "{why}");
        let (_, other_key) = ca.issue_pem("search-2", 30).unwrap();
        let Err(IdentityError::Invalid(why)) = Identity::from_pem(ca.cert_pem(), &cert, &other_key)
        else {
            panic!("another node's key was accepted");
        };
        assert!(why.contains("not the key"), "{why}");
        assert!(ca.issue("web 1").is_err());
        assert!(Authority::new("").is_err());
    }
}
