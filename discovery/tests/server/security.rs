//! The server's security, on real sockets: HTTP Basic for writes (and reads, by option), the
//! peer credentials for replication, `isReplication` only from a peer, and TLS.

use crate::until;
use std::time::Duration;

use cluster_discovery::server::{
    Access, Credentials, RegistryServer, RunningServer, ServerConfig, ServerTls,
};
use reqwest::{Method, StatusCode};

const CLIENT: (&str, &str) = ("app", "app-secret");
const PEER: (&str, &str) = ("peer", "peer-secret");

fn access() -> Access {
    Access::new(
        Credentials::new(CLIENT.0, CLIENT.1),
        Credentials::new(PEER.0, PEER.1),
    )
}

fn quick() -> ServerConfig {
    let mut config = ServerConfig::default();
    config.peer_timeout = Duration::from_millis(200);
    config.warm_up = false;
    config
}

async fn listener() -> (tokio::net::TcpListener, u16) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

async fn secured(access: Access) -> RunningServer {
    let (l, _) = listener().await;
    RegistryServer::new()
        .config(quick())
        .access(access)
        .start_on(l)
        .await
        .unwrap()
}

/// A request with these credentials (`None`: none), its status and body.
async fn send(
    http: &reqwest::Client,
    method: Method,
    url: &str,
    auth: Option<(&str, &str)>,
    body: Option<String>,
) -> (StatusCode, reqwest::header::HeaderMap, String) {
    let mut req = http
        .request(method, url)
        .header("accept", "application/json");
    if let Some((user, password)) = auth {
        req = req.basic_auth(user, Some(password));
    }
    if let Some(body) = body {
        req = req.header("content-type", "application/json").body(body);
    }
    let r = req.send().await.unwrap();
    let (status, headers) = (r.status(), r.headers().clone());
    (status, headers, r.text().await.unwrap())
}

/// Registers instance `o-1` of `ORDERS` on `server` with the client credentials; it must succeed.
async fn register_o1(http: &reqwest::Client, server: &RunningServer) {
    let url = format!("{}apps/ORDERS", server.url());
    let (status, _, body) =
        send(http, Method::POST, &url, Some(CLIENT), register_body("o-1")).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
}

fn register_body(id: &str) -> Option<String> {
    Some(crate::support::js_body("orders", id, 8080))
}

/// The instance ids on `server`, read with the client credentials (works either way).
async fn ids(server: &RunningServer) -> Vec<String> {
    let (status, _, body) = send(
        &reqwest::Client::new(),
        Method::GET,
        &format!("{}apps/", server.url()),
        Some(CLIENT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    crate::support::ids(&serde_json::from_str(&body).unwrap())
}

async fn status_of(server: &RunningServer, id: &str) -> String {
    let (_, _, body) = send(
        &reqwest::Client::new(),
        Method::GET,
        &format!("{}apps/ORDERS/{id}", server.url()),
        Some(CLIENT),
        None,
    )
    .await;
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    doc["instance"]["status"].as_str().unwrap().to_owned()
}

fn assert_challenge(status: StatusCode, headers: &reqwest::header::HeaderMap, what: &str) {
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}");
    assert_eq!(
        headers
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some(r#"Basic realm="eureka""#),
        "{what}"
    );
}

#[tokio::test]
async fn a_server_given_no_access_does_not_start_and_says_what_to_give() {
    let says_what_to_give = |e: std::io::Error, what: &str| {
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{what}: {e}");
        let text = e.to_string();
        for word in ["no access configured", "Access::new", "Access::open()"] {
            assert!(text.contains(word), "{what} should name {word}: {text}");
        }
    };
    // Refused before binding: on a port already taken, the error is the missing access, not
    // the port.
    let (taken, port) = listener().await;
    let e = RegistryServer::new()
        .config(quick())
        .start(([127, 0, 0, 1], port).into())
        .await
        .expect_err("no access: no server");
    says_what_to_give(e, "start");
    drop(taken);
    let (l, _) = listener().await;
    let e = RegistryServer::new()
        .config(quick())
        .start_on(l)
        .await
        .expect_err("no access: no server");
    says_what_to_give(e, "start_on");

    // Open, said by name: it starts, and anyone writes.
    let (l, _) = listener().await;
    let open = RegistryServer::new()
        .config(quick())
        .access(Access::open())
        .start_on(l)
        .await
        .expect("open by name");
    let http = reqwest::Client::new();
    let url = format!("{}apps/ORDERS", open.url());
    let (status, _, _) = send(&http, Method::POST, &url, None, register_body("o-1")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(ids(&open).await, ["o-1"]);
}

#[tokio::test]
async fn every_write_without_credentials_is_401_and_changes_nothing() {
    let server = secured(access()).await;
    let http = reqwest::Client::new();
    let base = server.url();

    let (status, headers, _) = send(
        &http,
        Method::POST,
        &format!("{base}apps/ORDERS"),
        None,
        register_body("o-1"),
    )
    .await;
    assert_challenge(status, &headers, "an anonymous registration");
    assert!(ids(&server).await.is_empty(), "nothing was registered");

    // Registered with the credentials, then every other write without them.
    let (status, _, _) = send(
        &http,
        Method::POST,
        &format!("{base}apps/ORDERS"),
        Some(CLIENT),
        register_body("o-1"),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let writes = [
        (Method::PUT, "apps/ORDERS/o-1"),
        (Method::DELETE, "apps/ORDERS/o-1"),
        (Method::PUT, "apps/ORDERS/o-1/status?value=OUT_OF_SERVICE"),
        (Method::DELETE, "apps/ORDERS/o-1/status"),
        (Method::PUT, "apps/ORDERS/o-1/metadata?team=intruder"),
        (Method::POST, "v2/apps/ORDERS"),
    ];
    for (method, path) in writes {
        let (status, headers, _) = send(
            &http,
            method.clone(),
            &format!("{base}{path}"),
            None,
            register_body("o-2"),
        )
        .await;
        assert_challenge(status, &headers, &format!("anonymous {method} {path}"));
    }
    assert_eq!(ids(&server).await, ["o-1"], "not cancelled, no o-2");
    assert_eq!(status_of(&server, "o-1").await, "UP", "no override");
    let (_, _, body) = send(
        &http,
        Method::GET,
        &format!("{base}apps/ORDERS/o-1"),
        None,
        None,
    )
    .await;
    assert!(!body.contains("intruder"), "no metadata: {body}");
    assert_eq!(server.health().renewals, 0, "no renewal counted");
}

#[tokio::test]
async fn writes_with_the_client_credentials_succeed() {
    let server = secured(access()).await;
    let http = reqwest::Client::new();
    let base = server.url();
    let with = |method: Method, path: &str, body: Option<String>| {
        let url = format!("{base}{path}");
        let http = http.clone();
        async move { send(&http, method, &url, Some(CLIENT), body).await.0 }
    };
    assert_eq!(
        with(Method::POST, "apps/ORDERS", register_body("o-1")).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        with(Method::PUT, "apps/ORDERS/o-1", None).await,
        StatusCode::OK
    );
    assert_eq!(
        with(
            Method::PUT,
            "apps/ORDERS/o-1/status?value=OUT_OF_SERVICE",
            None
        )
        .await,
        StatusCode::OK
    );
    assert_eq!(status_of(&server, "o-1").await, "OUT_OF_SERVICE");
    assert_eq!(
        with(Method::DELETE, "apps/ORDERS/o-1/status?value=UP", None).await,
        StatusCode::OK
    );
    assert_eq!(
        with(Method::PUT, "apps/ORDERS/o-1/metadata?team=x", None).await,
        StatusCode::OK
    );
    assert_eq!(ids(&server).await, ["o-1"]);
    assert_eq!(
        with(Method::DELETE, "apps/ORDERS/o-1", None).await,
        StatusCode::OK
    );
    assert!(ids(&server).await.is_empty());
}

#[tokio::test]
async fn a_wrong_password_or_a_malformed_authorization_header_is_401_never_a_panic() {
    let server = secured(access()).await;
    let http = reqwest::Client::new();
    let url = format!("{}apps/ORDERS", server.url());
    for (user, password) in [
        (CLIENT.0, "wrong"),
        (CLIENT.0, ""),
        ("", CLIENT.1),
        (PEER.0, CLIENT.1),
        (CLIENT.0, PEER.1),
        ("app-secret", "app"),
    ] {
        let (status, headers, _) = send(
            &http,
            Method::POST,
            &url,
            Some((user, password)),
            register_body("o-1"),
        )
        .await;
        assert_challenge(status, &headers, &format!("{user}:{password}"));
    }
    let malformed: [&[u8]; 9] = [
        b"Basic",
        b"Basic ",
        b"Basic !!not base64!!",
        b"Basic YXBw",                // "app": no colon
        b"Basic //79",                // not UTF-8
        b"Basic YXBwOmFwcC1zZWNyZXQ", // right, but the padding is missing: accepted
        b"Bearer YXBwOmFwcC1zZWNyZXQ=",
        b"YXBwOmFwcC1zZWNyZXQ=",
        b"Basic \xff\xfe\xfd",
    ];
    for value in malformed {
        let r = http
            .post(&url)
            .header("content-type", "application/json")
            .header(
                "authorization",
                reqwest::header::HeaderValue::from_bytes(value).unwrap(),
            )
            .body(crate::support::js_body("orders", "o-1", 8080))
            .send()
            .await
            .unwrap();
        let expected = if value == b"Basic YXBwOmFwcC1zZWNyZXQ" {
            StatusCode::NO_CONTENT
        } else {
            StatusCode::UNAUTHORIZED
        };
        assert_eq!(r.status(), expected, "{}", String::from_utf8_lossy(value));
    }
    assert_eq!(ids(&server).await, ["o-1"], "only the well-formed one");
}

#[tokio::test]
async fn reads_are_open_by_default_and_401_when_protected() {
    let open = secured(access()).await;
    let protected = secured(access().protect_reads()).await;
    let http = reqwest::Client::new();
    let reads = [
        "apps/",
        "apps/delta",
        "apps/ORDERS",
        "apps/ORDERS/o-1",
        "instances/o-1",
        "vips/orders",
        "svips/orders",
        "status",
    ];
    for server in [&open, &protected] {
        register_o1(&http, server).await;
    }
    for path in reads {
        let (status, _, body) = send(
            &http,
            Method::GET,
            &format!("{}{path}", open.url()),
            None,
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "open read {path}: {body}");
        let url = format!("{}{path}", protected.url());
        let (status, headers, _) = send(&http, Method::GET, &url, None, None).await;
        assert_challenge(status, &headers, &format!("protected read {path}"));
        let (status, headers, _) =
            send(&http, Method::GET, &url, Some((CLIENT.0, "wrong")), None).await;
        assert_challenge(
            status,
            &headers,
            &format!("protected read {path}, wrong password"),
        );
        for who in [CLIENT, PEER] {
            let (status, _, _) = send(&http, Method::GET, &url, Some(who), None).await;
            assert_eq!(status, StatusCode::OK, "protected read {path} as {}", who.0);
        }
    }
}

#[tokio::test]
async fn is_replication_counts_only_from_a_peer_and_is_refused_from_anyone_else() {
    // A server with a peer, so that a write it takes as a client's is forwarded (counted).
    let (other, other_port) = listener().await;
    let (l, _) = listener().await;
    let server = RegistryServer::new()
        .config(quick())
        .access(access())
        .peers([format!("http://127.0.0.1:{other_port}/eureka/")])
        .start_on(l)
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let base = server.url();
    let marked_by_query = format!("{base}apps/ORDERS?isReplication=true");
    let marked_by_header =
        |req: reqwest::RequestBuilder| req.header("x-netflix-discovery-replication", "true");

    // Anonymous: 401. Client credentials: 403. Either way nothing changes.
    let (status, headers, _) = send(
        &http,
        Method::POST,
        &marked_by_query,
        None,
        register_body("o-1"),
    )
    .await;
    assert_challenge(status, &headers, "an anonymous replication");
    let (status, _, _) = send(
        &http,
        Method::POST,
        &marked_by_query,
        Some(CLIENT),
        register_body("o-1"),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "isReplication with the client credentials"
    );
    let r = marked_by_header(http.post(format!("{base}apps/ORDERS")))
        .basic_auth(CLIENT.0, Some(CLIENT.1))
        .header("content-type", "application/json")
        .body(crate::support::js_body("orders", "o-1", 8080))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::FORBIDDEN,
        "the replication header from a client"
    );
    let batch = serde_json::json!({"replicationList": [
        {"appName": "ORDERS", "id": "o-1", "action": "Cancel"}
    ]})
    .to_string();
    let batch_url = format!("{base}peerreplication/batch/");
    let (status, headers, _) =
        send(&http, Method::POST, &batch_url, None, Some(batch.clone())).await;
    assert_challenge(status, &headers, "an anonymous batch");
    let (status, _, _) = send(
        &http,
        Method::POST,
        &batch_url,
        Some(CLIENT),
        Some(batch.clone()),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a batch with the client credentials"
    );
    assert!(ids(&server).await.is_empty());
    assert_eq!(server.replication().applied, 0);
    assert_eq!(server.replication().forwarded, 0);

    // The peer credentials: applied as a replication, not forwarded.
    let (status, _, _) = send(
        &http,
        Method::POST,
        &marked_by_query,
        Some(PEER),
        register_body("o-1"),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(ids(&server).await, ["o-1"]);
    assert_eq!(server.replication().applied, 1);
    assert_eq!(
        server.replication().forwarded,
        0,
        "a replication is never forwarded"
    );
    let (status, _, body) = send(&http, Method::POST, &batch_url, Some(PEER), Some(batch)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        ids(&server).await.is_empty(),
        "the peer's batch cancelled it"
    );

    // A client's own write (unmarked) is forwarded, as before.
    let (status, _, _) = send(
        &http,
        Method::POST,
        &format!("{base}apps/ORDERS"),
        Some(CLIENT),
        register_body("o-2"),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(server.replication().forwarded, 1);
    drop(other);
}

/// Two servers naming each other; `b` accepts `b_peer` as the peer credentials, `a` sends
/// `a_peer`.
async fn pair(a_access: Access, b_access: Access) -> (RunningServer, RunningServer) {
    let ((la, pa), (lb, pb)) = (listener().await, listener().await);
    let url = |p: u16| format!("http://127.0.0.1:{p}/eureka/");
    let a = RegistryServer::new()
        .config(quick())
        .access(a_access)
        .peers([url(pb)])
        .start_on(la)
        .await
        .unwrap();
    let b = RegistryServer::new()
        .config(quick())
        .access(b_access)
        .peers([url(pa)])
        .start_on(lb)
        .await
        .unwrap();
    (a, b)
}

#[tokio::test]
async fn two_servers_replicate_with_the_peer_credentials() {
    let (a, b) = pair(access(), access()).await;
    let http = reqwest::Client::new();
    register_o1(&http, &a).await;
    until("b has what was registered on a", || async {
        ids(&b).await == ["o-1"]
    })
    .await;
    assert_eq!(b.replication().applied, 1);
    assert_eq!(b.replication().forwarded, 0, "b did not echo it");
}

#[tokio::test]
async fn a_peer_without_the_right_peer_credentials_has_its_replication_refused() {
    // a sends other peer credentials than b accepts.
    let mut wrong = access();
    wrong.peers = Some(Credentials::new(PEER.0, "not-the-peer-secret"));
    let (a, b) = pair(wrong, access()).await;
    let http = reqwest::Client::new();
    register_o1(&http, &a).await;
    assert_eq!(a.replication().forwarded, 1, "a tried to forward it");
    // a's batches are refused with 401 (a retries them with growing pauses): give the first
    // ones time to arrive.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(ids(&b).await.is_empty(), "b refused a's replication");
    assert_eq!(b.replication().applied, 0);
    assert_eq!(ids(&a).await, ["o-1"], "a kept its own write");
}

/// A test CA and a certificate of it for 127.0.0.1 and localhost: (CA PEM, cert PEM, key PEM).
fn test_pki() -> (String, String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
        SanType,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "discovery test CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params
        .subject_alt_names
        .push(SanType::IpAddress([127, 0, 0, 1].into()));
    let cert = params.signed_by(&key, &issuer).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

fn trusting(ca: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_tls_server_answers_https_to_a_client_trusting_its_ca_and_not_plaintext() {
    let (ca, cert, key) = test_pki();
    let (l, port) = listener().await;
    let server = RegistryServer::new()
        .config(quick())
        .access(access())
        .tls(ServerTls::from_pem(cert.as_bytes(), key.as_bytes()).unwrap())
        .start_on(l)
        .await
        .unwrap();
    assert_eq!(server.url(), format!("https://127.0.0.1:{port}/eureka/"));
    let https = trusting(&ca);
    register_o1(&https, &server).await;
    let (status, _, body) = send(
        &https,
        Method::GET,
        &format!("https://localhost:{port}/eureka/apps/"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        crate::support::ids(&serde_json::from_str(&body).unwrap()),
        ["o-1"]
    );

    let plaintext = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/eureka/apps/"))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(plaintext.is_err(), "plaintext was answered: {plaintext:?}");
    let untrusted = reqwest::Client::new()
        .get(format!("https://127.0.0.1:{port}/eureka/apps/"))
        .send()
        .await;
    assert!(
        untrusted.is_err(),
        "a client that does not trust the CA was answered"
    );
    // The server still serves after both failed handshakes.
    let (status, _, _) = send(
        &https,
        Method::GET,
        &format!("{}apps/", server.url()),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn two_tls_servers_replicate_over_https_trusting_the_given_ca() {
    let (ca, cert, key) = test_pki();
    let tls = ServerTls::from_pem(cert.as_bytes(), key.as_bytes()).unwrap();
    let ((la, pa), (lb, pb)) = (listener().await, listener().await);
    let url = |p: u16| format!("https://127.0.0.1:{p}/eureka/");
    let a = RegistryServer::new()
        .config(quick())
        .access(access())
        .tls(tls.clone())
        .peer_ca(ca.clone())
        .peers([url(pb)])
        .start_on(la)
        .await
        .unwrap();
    let b = RegistryServer::new()
        .config(quick())
        .access(access())
        .tls(tls)
        .peer_ca(ca.clone())
        .peers([url(pa)])
        .start_on(lb)
        .await
        .unwrap();
    let https = trusting(&ca);
    register_o1(&https, &a).await;
    let read = |server: &RunningServer| {
        let (https, url) = (https.clone(), format!("{}apps/", server.url()));
        async move {
            let (_, _, body) = send(&https, Method::GET, &url, None, None).await;
            crate::support::ids(&serde_json::from_str(&body).unwrap())
        }
    };
    until("b has what was registered on a, over https", || async {
        read(&b).await == ["o-1"]
    })
    .await;
    assert_eq!(b.replication().applied, 1);
}

#[test]
fn a_bad_certificate_or_key_is_an_error_at_configuration_not_a_panic() {
    let (_, cert, key) = test_pki();
    assert!(ServerTls::from_pem(b"", key.as_bytes()).is_err());
    assert!(ServerTls::from_pem(cert.as_bytes(), b"").is_err());
    assert!(ServerTls::from_pem(key.as_bytes(), cert.as_bytes()).is_err());
    let (_, _, other_key) = test_pki();
    assert!(
        ServerTls::from_pem(cert.as_bytes(), other_key.as_bytes()).is_err(),
        "a key that is not the certificate's"
    );
}

#[tokio::test]
async fn our_own_eureka_client_writes_with_the_credentials_in_its_url() {
    use cluster_discovery::client::EurekaClient;
    use cluster_discovery::model::Instance;
    let server = secured(access()).await;
    let url = server.url();
    let with = url.replacen("http://", &format!("http://{}:{}@", CLIENT.0, CLIENT.1), 1);
    let instance = Instance::new("orders", "127.0.0.1", 8080).with_id("o-1");
    EurekaClient::new([with.as_str()])
        .register(&instance)
        .await
        .expect("registered with the URL's credentials");
    assert_eq!(ids(&server).await, ["o-1"]);
    let without = EurekaClient::new([url.as_str()]).register(&instance).await;
    assert!(without.is_err(), "registered without credentials");
}
