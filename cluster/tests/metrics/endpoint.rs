//! Who may scrape: a certificate of the cluster's CA over TLS; plaintext only when asked for by
//! name, or on a node that is itself insecure. And what a client can make the endpoint hold.

use std::net::SocketAddr;

use cluster::{Authority, MemoryNetwork, Node, StartError};

use crate::counters::node;
use crate::scrape;
use crate::support::identity;

fn any_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

#[tokio::test]
async fn a_scrape_without_a_certificate_of_the_ca_or_in_plaintext_is_refused() {
    let registry = cluster::MemoryRegistry::new();
    let node = node("search-1", &registry, 1024).await;
    let addr = node.metrics_addr().unwrap();
    let member = scrape::client_config(Some("prometheus"));
    assert_eq!(scrape::tls(addr, "search-1", member).await.unwrap().0, 200);

    let anonymous = scrape::client_config(None);
    let refused = scrape::tls(addr, "search-1", anonymous).await;
    assert!(refused.is_err(), "no client certificate: {refused:?}");

    let plain = scrape::plain(addr).await;
    assert!(plain.is_err(), "plaintext to a TLS endpoint: {plain:?}");

    // Same cluster name, another CA: refused in the handshake.
    let forger = Authority::new("test").unwrap();
    let (cert, key) = forger.issue_pem("prometheus", 1).unwrap();
    let forged = {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let mut roots = rustls::RootCertStore::empty();
        let ca = crate::support::authority().cert_pem().as_bytes().to_vec();
        roots
            .add(CertificateDer::from_pem_slice(&ca).unwrap())
            .unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap()
    };
    let refused = scrape::tls(addr, "search-1", std::sync::Arc::new(forged)).await;
    assert!(refused.is_err(), "a certificate of another CA: {refused:?}");
    node.shutdown().await;
}

#[tokio::test]
async fn plaintext_is_served_only_when_asked_for_by_name_or_on_an_insecure_node() {
    let registry = cluster::MemoryRegistry::new();
    let by_name = Node::builder()
        .identity(identity("search-1"))
        .registry(registry.clone())
        .metrics_insecure(any_port())
        .start()
        .await
        .unwrap();
    let (status, text) = scrape::plain(by_name.metrics_addr().unwrap())
        .await
        .unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("cluster_registry_nodes 1"), "{text}");
    // In plaintext, a request that names a site as its Host (a page that made its own name
    // resolve here: DNS rebinding) is refused; an address or localhost is what a scraper sends.
    for (host, status) in [
        ("evil.example", 421),
        ("127.0.0.1:9464", 200),
        ("[::1]", 200),
    ] {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(by_name.metrics_addr().unwrap())
            .await
            .unwrap();
        let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status} ")),
            "{host}: {answer}"
        );
    }

    let insecure = Node::builder()
        .insecure()
        .metrics(any_port())
        .start()
        .await
        .unwrap();
    let (status, _) = scrape::plain(insecure.metrics_addr().unwrap())
        .await
        .unwrap();
    assert_eq!(status, 200);

    // A node on the in-memory network has no identity to serve TLS with: asked for secure
    // metrics, it refuses to start rather than serve them in plaintext.
    let refused = Node::builder()
        .memory(&MemoryNetwork::new())
        .metrics(any_port())
        .start()
        .await;
    let Err(StartError::Setting(why)) = refused else {
        panic!("started: {refused:?}")
    };
    assert!(why.contains("metrics_insecure"), "{why}");

    // Off by default: no endpoint, nothing rendered.
    let off = Node::builder().insecure().start().await.unwrap();
    assert_eq!(off.metrics_addr(), None);
    assert_eq!(off.render_metrics(), None);
    for node in [by_name, insecure, off] {
        node.shutdown().await;
    }
}

#[tokio::test]
async fn silent_connections_cannot_keep_the_scraper_out() {
    let node = Node::builder()
        .insecure()
        .metrics(any_port())
        .start()
        .await
        .unwrap();
    let addr = node.metrics_addr().unwrap();
    // Anyone who reaches the port holds every place with connections that say nothing.
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    // The scraper still gets in: the oldest silent connection gives its place up.
    for _ in 0..3 {
        let (status, _) = scrape::plain(addr)
            .await
            .expect("a scrape past 8 silent connections");
        assert_eq!(status, 200);
        held.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    // And a connection that says nothing is closed when its opening time is up (2 s), not
    // after the whole exchange's 10 s.
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let started = std::time::Instant::now();
    let mut buf = [0u8; 16];
    use tokio::io::AsyncReadExt;
    let read = tokio::time::timeout(std::time::Duration::from_secs(9), silent.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "closed: {read:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(9));
    drop(held);
    node.shutdown().await;
}
