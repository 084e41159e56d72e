//! How a certificate names its node: one URI subject alternative name,
//! `spiffe://<cluster>/node/<node>` (SPIFFE's shape: the cluster is the trust domain). The
//! CA's certificate carries `spiffe://<cluster>`.

use rustls::pki_types::CertificateDer;

const SCHEME: &str = "spiffe://";

/// The URI naming `node` of `cluster`.
#[cfg(feature = "authority")]
pub(crate) fn node_uri(cluster: &str, node: &str) -> String {
    format!("{SCHEME}{cluster}/node/{node}")
}

/// The URI naming the cluster itself, in its CA's certificate.
#[cfg(feature = "authority")]
pub(crate) fn cluster_uri(cluster: &str) -> String {
    format!("{SCHEME}{cluster}")
}

/// Whether `name` may be a cluster's or a node's name in a certificate: letters, digits,
/// `-`, `_` and `.`, 1 to 255 bytes. Nothing that would need escaping in a URI, so that the
/// name read back is the name written.
pub(crate) fn check(what: &str, name: &str) -> Result<(), String> {
    let fine = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.len() > 255 || !name.chars().all(fine) {
        return Err(format!(
            "{what} `{name}` cannot be put in a certificate: use 1 to 255 letters, digits, '-', '_' or '.'"
        ));
    }
    Ok(())
}

/// The cluster and node a certificate names, if it names exactly one node.
pub(crate) fn of_certificate(cert: &CertificateDer<'_>) -> Result<(String, String), String> {
    let found: Vec<(String, String)> = uris(cert)
        .map_err(|e| format!("the certificate cannot be read: {e}"))?
        .into_iter()
        .filter_map(parse_node_uri)
        .collect();
    match <[_; 1]>::try_from(found) {
        Ok([named]) => Ok(named),
        Err(found) if found.is_empty() => Err(format!(
            "the certificate names no node (no `{SCHEME}<cluster>/node/<node>` name)"
        )),
        Err(_) => Err("the certificate names more than one node".to_owned()),
    }
}

/// The cluster a CA's certificate names (`spiffe://<cluster>`).
#[cfg(feature = "authority")]
pub(crate) fn of_ca(cert: &CertificateDer<'_>) -> Result<String, String> {
    uris(cert)
        .map_err(|e| format!("the CA certificate cannot be read: {e}"))?
        .into_iter()
        .find_map(|uri| {
            uri.strip_prefix(SCHEME)
                .filter(|cluster| check("", cluster).is_ok())
                .map(str::to_owned)
        })
        .ok_or_else(|| format!("the CA certificate names no cluster (no `{SCHEME}<cluster>`)"))
}

/// The URI subject alternative names of a certificate, as webpki (which verifies it in the TLS
/// handshake) reads them.
fn uris<'a>(cert: &'a CertificateDer<'a>) -> Result<Vec<&'a str>, webpki::Error> {
    let parsed = webpki::EndEntityCert::try_from(cert)?;
    Ok(parsed.valid_uri_names().collect())
}

fn parse_node_uri(uri: &str) -> Option<(String, String)> {
    let (cluster, node) = uri.strip_prefix(SCHEME)?.split_once("/node/")?;
    (check("", cluster).is_ok() && check("", node).is_ok())
        .then(|| (cluster.to_owned(), node.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_uri_reads_back_and_odd_names_are_refused() {
        let uri = node_uri("prod", "search-1");
        assert_eq!(uri, "spiffe://prod/node/search-1");
        assert_eq!(
            parse_node_uri(&uri),
            Some(("prod".into(), "search-1".into()))
        );
        for bad in [
            "spiffe://prod/node/",
            "spiffe://prod/node/a/b",
            "spiffe:///node/a",
            "http://prod/node/a",
            "spiffe://pr od/node/a",
        ] {
            assert_eq!(parse_node_uri(bad), None, "{bad}");
        }
        assert!(check("node", "web_1.eu-west").is_ok());
        assert!(check("node", "web 1").is_err());
        assert!(check("node", "").is_err());
    }
}
