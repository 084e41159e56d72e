//! TLS on the gateway's listener (rustls on ring, the registry server's `ServerTls`): HTTPS to
//! a client trusting its CA, `X-Forwarded-Proto: https` to the instance.

use std::sync::Arc;

use axum::http::StatusCode;
use cluster_discovery::balance::Balancer;
use cluster_discovery::gateway::{Gateway, Upstream as Route};
use cluster_discovery::resolve::Static;
use cluster_discovery::server::ServerTls;

use crate::support::Upstream;

/// A test CA and a certificate of it for 127.0.0.1: (CA PEM, cert PEM, key PEM). The same as
/// the registry server's TLS tests (`tests/server/security.rs`).
pub(crate) fn test_pki() -> (String, String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
        SanType,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "gateway test CA");
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

#[tokio::test]
async fn the_gateway_serves_https_when_given_a_certificate() {
    let (ca, cert, key) = test_pki();
    let up = Upstream::start().await;
    let b = Arc::new(Balancer::new(
        Static::new().service("orders", [up.endpoint()]),
    ));
    let gw = Gateway::new()
        .route("/orders/*", Route::service("orders", b))
        .tls(ServerTls::from_pem(cert.as_bytes(), key.as_bytes()).unwrap())
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    assert!(gw.url().starts_with("https://"));
    let https = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .build()
        .unwrap();
    let res = https
        .get(format!("{}/orders/1", gw.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), StatusCode::OK.as_u16());
    let text = res.text().await.unwrap();
    assert!(text.contains("x-forwarded-proto: https\n"), "{text}");
    // Plain HTTP to the TLS port is not served.
    let plain = reqwest::get(format!("http://{}/orders/1", gw.addr())).await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
    gw.shutdown().await;
}
