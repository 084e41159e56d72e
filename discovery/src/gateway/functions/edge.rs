//! Who may call which function through a function route: the HTTP caller at the edge, named
//! by an API key (`Authorization: Bearer KEY` or `X-Api-Key: KEY`) or, behind a proxy of the
//! operator's that authenticates, by a header that proxy sets. Each name has an allow-list of
//! `service.function` patterns (`inventory.*`). The check runs before the body is read:
//! an unknown key is `401`, a known caller asking for a function not on its list `403`, and
//! nothing is called either way.
//!
//! Keys are kept as their SHA-256 and compared as such, every configured key each time, with
//! no early exit: how long the check takes says nothing of how much of a key was right.

use axum::http::{HeaderMap, HeaderName, header};
use cluster::Callers;
use ring::digest;

/// The longest edge caller name: it travels in the call's metadata.
pub const MAX_EDGE_NAME: usize = 128;

/// Which HTTP callers a function route admits, and what each may call.
#[derive(Clone)]
pub struct EdgeCallers {
    keys: Vec<([u8; 32], Edge)>,
    certificates: Vec<Edge>,
    trusted_header: Option<(HeaderName, Vec<Edge>)>,
    open: bool,
    /// The first caller refused when it was added (a bad name, a short key): the route then
    /// refuses to start, saying so (`FunctionRoute::check`), instead of a panic at the
    /// builder over a value read from the environment.
    refused: Option<String>,
}

impl std::fmt::Debug for EdgeCallers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys' digests: they are as good as the keys to a dictionary.
        f.debug_struct("EdgeCallers")
            .field("keys", &self.keys.len())
            .field("certificates", &self.certificates)
            .field(
                "trusted_header",
                &self.trusted_header.as_ref().map(|h| &h.0),
            )
            .field("open", &self.open)
            .finish()
    }
}

#[derive(Debug, Clone)]
struct Edge {
    name: String,
    functions: Callers,
}

/// Why an edge caller is not let through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No credential, or one no caller has: `401`.
    Unknown,
    /// A known caller, not allowed this function: `403`.
    NotAllowed(String),
}

/// The caller a request came from, once let through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EdgeCaller {
    /// Its name (`anonymous` on an open route).
    pub(crate) name: String,
    functions: Option<Callers>,
}

impl EdgeCaller {
    /// Whether it may call `service.function` (every one, on an open route).
    pub(crate) fn may_call(&self, target: &str) -> bool {
        self.functions.as_ref().is_none_or(|f| f.admits(target))
    }
}

impl EdgeCallers {
    /// No caller yet: every request is `401`.
    pub fn new() -> Self {
        Self {
            keys: Vec::new(),
            certificates: Vec::new(),
            trusted_header: None,
            open: false,
            refused: None,
        }
    }

    /// Anyone may call every function of the route, named `anonymous` in the call's metadata:
    /// for a gateway reachable only by trusted networks. A route is refused at start unless it
    /// has callers, or this.
    pub fn open_to_anyone() -> Self {
        Self {
            open: true,
            ..Self::new()
        }
    }

    /// A caller named `name`, known by the API key `key`, that may call the functions
    /// matching `functions` (`service.function`, with `*` and `?`: `inventory.*`).
    ///
    /// A `name` that is empty, longer than [`MAX_EDGE_NAME`] or not printable ASCII, or a `key`
    /// shorter than 16 bytes, is a configuration error: the gateway refuses to start and says
    /// which caller (`Gateway::start` returns it), and the key is not added.
    pub fn key<S: Into<String>>(
        mut self,
        name: &str,
        key: &str,
        functions: impl IntoIterator<Item = S>,
    ) -> Self {
        let refused = match check_name(name) {
            Err(why) => Some(format!("edge caller `{name}`: {why}")),
            Ok(()) if key.len() < 16 => Some(format!(
                "edge caller `{name}`: an API key has at least 16 bytes, this one {}",
                key.len()
            )),
            Ok(()) => None,
        };
        if let Some(why) = refused {
            self.refused.get_or_insert(why);
            return self;
        }
        self.keys.push((
            sha256(key.as_bytes()),
            Edge {
                name: name.to_owned(),
                functions: Callers::only(functions),
            },
        ));
        self
    }

    /// Why these callers cannot be used, if a caller was refused when it was added.
    pub(crate) fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// Callers known by a TLS client certificate: the node name it carries (as an
    /// [`Authority`](cluster::Authority) issues them, `cluster issue NAME`), from the CA the
    /// gateway's listener asks clients for (`ServerTls::from_pem_with_client_ca`; the
    /// handshake verifies it). Each name with the functions it may call; a certificate of
    /// another name is `401`.
    pub fn certificates<S: Into<String>>(
        mut self,
        callers: impl IntoIterator<Item = (String, Vec<S>)>,
    ) -> Self {
        let callers = self.edges(callers);
        self.certificates.extend(callers);
        self
    }

    /// Callers named by `header`, which a proxy in front of the gateway sets after it has
    /// authenticated them (and removes from what clients send): only for a gateway that
    /// nothing but that proxy can reach. `callers` are the names it may set and what each may
    /// call; another name is `401`.
    pub fn trusted_header<S: Into<String>>(
        mut self,
        header: HeaderName,
        callers: impl IntoIterator<Item = (String, Vec<S>)>,
    ) -> Self {
        let callers = self.edges(callers);
        self.trusted_header = Some((header, callers));
        self
    }

    /// `callers` as edges; a name [`check_name`] refuses is left out and makes the route refuse
    /// to start (`refused`).
    fn edges<S: Into<String>>(
        &mut self,
        callers: impl IntoIterator<Item = (String, Vec<S>)>,
    ) -> Vec<Edge> {
        let mut edges = Vec::new();
        for (name, functions) in callers {
            match check_name(&name) {
                Ok(()) => edges.push(Edge {
                    name,
                    functions: Callers::only(functions),
                }),
                Err(why) => {
                    self.refused
                        .get_or_insert_with(|| format!("edge caller `{name}`: {why}"));
                }
            }
        }
        edges
    }

    /// Whether the route has any way to admit a caller (else it is refused at start).
    pub(crate) fn configured(&self) -> bool {
        self.open
            || !self.keys.is_empty()
            || !self.certificates.is_empty()
            || self.trusted_header.is_some()
    }

    /// The caller a verified client certificate (`certificate`, the node name it carries) or
    /// `headers` name, if any: the certificate first, as it is proven by the handshake.
    pub(crate) fn identify(
        &self,
        headers: &HeaderMap,
        certificate: Option<&str>,
    ) -> Result<EdgeCaller, Refusal> {
        // A credential header sent twice is refused, not read as its first value: a proxy that
        // appends its header to the client's would otherwise let the client choose.
        let credentials = [Some(&header::AUTHORIZATION), Some(&X_API_KEY)];
        let trusted = [self.trusted_header.as_ref().map(|(h, _)| h)];
        if credentials
            .iter()
            .chain(&trusted)
            .flatten()
            .any(|name| headers.get_all(*name).iter().nth(1).is_some())
        {
            return Err(Refusal::Unknown);
        }
        if let Some(name) = certificate
            && !self.certificates.is_empty()
        {
            return named(&self.certificates, name);
        }
        if let Some((header, callers)) = &self.trusted_header
            && let Some(name) = headers.get(header).and_then(|v| v.to_str().ok())
        {
            return named(callers, name);
        }
        if let Some(key) = presented_key(headers) {
            let presented = sha256(key);
            // Every key compared, whichever matches.
            let mut found = None;
            for (digest, edge) in &self.keys {
                if same(digest, &presented) {
                    found = Some(edge);
                }
            }
            if let Some(edge) = found {
                return Ok(EdgeCaller {
                    name: edge.name.clone(),
                    functions: Some(edge.functions.clone()),
                });
            }
            return Err(Refusal::Unknown);
        }
        if self.open {
            return Ok(EdgeCaller {
                name: "anonymous".to_owned(),
                functions: None,
            });
        }
        Err(Refusal::Unknown)
    }

    /// [`identify`](Self::identify), then whether the caller may call `target`.
    pub(crate) fn admit(
        &self,
        headers: &HeaderMap,
        certificate: Option<&str>,
        target: &str,
    ) -> Result<EdgeCaller, Refusal> {
        let caller = self.identify(headers, certificate)?;
        if caller.may_call(target) {
            Ok(caller)
        } else {
            Err(Refusal::NotAllowed(caller.name))
        }
    }
}

impl Default for EdgeCallers {
    fn default() -> Self {
        Self::new()
    }
}

const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// The key in `Authorization: Bearer KEY`, else in `X-Api-Key`.
fn presented_key(headers: &HeaderMap) -> Option<&[u8]> {
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        let v = v.as_bytes();
        if v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer ") {
            return Some(v[7..].trim_ascii());
        }
    }
    headers.get(X_API_KEY).map(|v| v.as_bytes().trim_ascii())
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, bytes).as_ref());
    out
}

/// Equal, in a time that does not depend on where they differ.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why `name` cannot name an edge caller.
pub(crate) fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > MAX_EDGE_NAME {
        return Err("a name has 1 to 128 characters");
    }
    if !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("a name is printable ASCII without spaces");
    }
    Ok(())
}

/// The caller of `edges` named `name` (a certificate's node, a trusted header's value).
fn named(edges: &[Edge], name: &str) -> Result<EdgeCaller, Refusal> {
    edges
        .iter()
        .find(|e| e.name == name)
        .map(|e| EdgeCaller {
            name: e.name.clone(),
            functions: Some(e.functions.clone()),
        })
        .ok_or(Refusal::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
            .collect()
    }

    #[test]
    fn a_short_key_or_a_bad_name_is_refused_by_name_not_a_panic() {
        let short = EdgeCallers::new().key("web", "short", ["*"]);
        assert_eq!(
            short.refused(),
            Some("edge caller `web`: an API key has at least 16 bytes, this one 5")
        );
        assert!(!short.configured(), "the short key is not added");
        let unnamed = EdgeCallers::new()
            .key("ops", "ops-key-01234567890", ["*"])
            .certificates([(String::new(), vec!["*"])]);
        assert!(unnamed.refused().unwrap().starts_with("edge caller ``"));
        assert!(
            EdgeCallers::new()
                .key("ops", "ops-key-01234567890", ["*"])
                .refused()
                .is_none()
        );
    }

    #[test]
    fn keys_name_callers_and_their_lists_decide() {
        let edge = EdgeCallers::new()
            .key("shop", "shop-key-0123456789", ["inventory.*"])
            .key("ops", "ops-key-01234567890", ["*"]);
        let shop = headers(&[("authorization", "Bearer shop-key-0123456789")]);
        assert_eq!(
            edge.admit(&shop, None, "inventory.reserve").unwrap().name,
            "shop"
        );
        assert_eq!(
            edge.admit(&shop, None, "bank.deposit"),
            Err(Refusal::NotAllowed("shop".into()))
        );
        let ops = headers(&[("x-api-key", "ops-key-01234567890")]);
        assert_eq!(edge.admit(&ops, None, "bank.deposit").unwrap().name, "ops");
        let wrong = headers(&[("authorization", "Bearer shop-key-0123456780")]);
        assert_eq!(
            edge.admit(&wrong, None, "inventory.reserve"),
            Err(Refusal::Unknown)
        );
        assert_eq!(
            edge.admit(&HeaderMap::new(), None, "inventory.reserve"),
            Err(Refusal::Unknown)
        );
    }

    #[test]
    fn an_open_route_still_refuses_a_wrong_key() {
        let edge = EdgeCallers::open_to_anyone();
        assert!(edge.configured());
        assert!(!EdgeCallers::new().configured());
        assert_eq!(
            edge.admit(&HeaderMap::new(), None, "a.b").unwrap().name,
            "anonymous"
        );
        let wrong = headers(&[("x-api-key", "nobody-has-this-key")]);
        assert_eq!(edge.admit(&wrong, None, "a.b"), Err(Refusal::Unknown));
    }

    #[test]
    fn a_verified_certificate_names_its_caller_before_any_header() {
        let edge = EdgeCallers::new()
            .certificates([("billing-app".to_owned(), vec!["bank.*"])])
            .key("shop", "shop-key-0123456789", ["inventory.*"]);
        let none = HeaderMap::new();
        assert_eq!(
            edge.admit(&none, Some("billing-app"), "bank.deposit")
                .unwrap()
                .name,
            "billing-app"
        );
        assert_eq!(
            edge.admit(&none, Some("billing-app"), "inventory.count"),
            Err(Refusal::NotAllowed("billing-app".into()))
        );
        assert_eq!(
            edge.admit(&none, Some("stranger"), "bank.deposit"),
            Err(Refusal::Unknown)
        );
        let shop = headers(&[("x-api-key", "shop-key-0123456789")]);
        assert_eq!(
            edge.admit(&shop, None, "inventory.count").unwrap().name,
            "shop"
        );
    }

    #[test]
    fn a_credential_header_sent_twice_is_refused() {
        let edge = EdgeCallers::new()
            .key("ops", "ops-key-01234567890", ["*"])
            .trusted_header(
                HeaderName::from_static("x-edge-user"),
                [("web".to_owned(), vec!["*"])],
            );
        let mut twice = HeaderMap::new();
        twice.append("x-edge-user", "web".parse().unwrap());
        twice.append("x-edge-user", "admin".parse().unwrap());
        assert_eq!(edge.identify(&twice, None), Err(Refusal::Unknown));
        let mut keys = HeaderMap::new();
        keys.append("x-api-key", "ops-key-01234567890".parse().unwrap());
        keys.append("x-api-key", "other-key-0123456789".parse().unwrap());
        assert_eq!(edge.identify(&keys, None), Err(Refusal::Unknown));
        let mut once = HeaderMap::new();
        once.append("x-api-key", "ops-key-01234567890".parse().unwrap());
        assert_eq!(edge.identify(&once, None).unwrap().name, "ops");
    }

    #[test]
    fn a_trusted_header_names_only_the_callers_configured() {
        let edge = EdgeCallers::new().trusted_header(
            HeaderName::from_static("x-edge-user"),
            [("web".to_owned(), vec!["inventory.*"])],
        );
        let web = headers(&[("x-edge-user", "web")]);
        assert_eq!(
            edge.admit(&web, None, "inventory.count").unwrap().name,
            "web"
        );
        let other = headers(&[("x-edge-user", "admin")]);
        assert_eq!(
            edge.admit(&other, None, "inventory.count"),
            Err(Refusal::Unknown)
        );
    }
}
