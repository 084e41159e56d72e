//! etcd's own security, by option: TLS with client certificates, and users. Plaintext only
//! when asked for by name.

use std::time::Duration;

use cluster::Node;
use cluster::registry::RegistryError;
use cluster_etcd::{EtcdConfig, EtcdRegistry};

use crate::support::server::Etcd;
use crate::support::{authority, etcd, identity};

async fn start(registry: EtcdRegistry, name: &str) -> Result<Node, cluster::StartError> {
    Node::builder()
        .identity(identity(name))
        .registry(registry)
        .start()
        .await
}

fn unavailable(result: Result<Node, cluster::StartError>) -> String {
    match result {
        Err(cluster::StartError::Registry(RegistryError::Unavailable(why))) => {
            println!("refused: {why}");
            why
        }
        other => panic!("started: {:?}", other.map(|n| n.addr())),
    }
}

#[tokio::test]
async fn without_tls_a_registry_connects_only_when_plaintext_is_asked_for_by_name() {
    let endpoint = etcd().borrow().endpoint();
    let why = unavailable(start(EtcdRegistry::new(EtcdConfig::new([endpoint.clone()])), "a").await);
    assert!(why.contains("EtcdConfig::plaintext()"), "{why}");
    start(
        EtcdRegistry::new(EtcdConfig::new([endpoint]).plaintext()),
        "b",
    )
    .await
    .expect("plaintext, asked for");
}

#[tokio::test]
async fn over_tls_with_a_client_certificate() {
    let ca = authority();
    let server = Etcd::start_tls(ca);
    let config = || {
        EtcdConfig::new([server.endpoint()])
            .tls(ca.cert_pem().as_bytes().to_vec(), None)
            .tls_domain("etcd-server")
            .lease_ttl(Duration::from_secs(2))
    };
    // etcd asks for a client certificate: without one, no connection.
    unavailable(start(EtcdRegistry::new(config()), "no-cert").await);
    let (cert, key) = ca.issue_pem("etcd-client", 1).unwrap();
    let tls = EtcdRegistry::new(
        EtcdConfig::new([server.endpoint()])
            .tls(
                ca.cert_pem().as_bytes().to_vec(),
                Some((cert.into(), key.into())),
            )
            .tls_domain("etcd-server"),
    );
    let node = start(tls, "with-cert").await.expect("over TLS");
    assert_eq!(node.registry().nodes().len(), 1);
    // Plaintext to a TLS port fails too.
    let plain = EtcdRegistry::new(EtcdConfig::new([server.endpoint()]).plaintext());
    unavailable(start(plain, "plain").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_users_a_wrong_password_is_refused_and_the_right_one_works() {
    let endpoint = etcd().borrow().endpoint();
    let mut admin = etcd_client::Client::connect([format!("http://{endpoint}")], None)
        .await
        .unwrap();
    admin.user_add("root", "root-pw", None).await.unwrap();
    admin.user_grant_role("root", "root").await.unwrap();
    admin.user_add("cluster", "cluster-pw", None).await.unwrap();
    admin.role_add("registry").await.unwrap();
    admin
        .role_grant_permission(
            "registry",
            etcd_client::Permission::read_write("/cluster/").with_prefix(),
        )
        .await
        .unwrap();
    admin.user_grant_role("cluster", "registry").await.unwrap();
    admin.auth_enable().await.unwrap();

    let config = || EtcdConfig::new([endpoint.clone()]).plaintext();
    unavailable(start(EtcdRegistry::new(config().user("cluster", "wrong")), "a").await);
    // Without a user, etcd refuses the reads.
    unavailable(start(EtcdRegistry::new(config()), "b").await);
    let node = start(
        EtcdRegistry::new(config().user("cluster", "cluster-pw")),
        "c",
    )
    .await
    .expect("with the right password");
    assert_eq!(node.registry().nodes().len(), 1);

    // etcd restarts: every token it gave is void. The node authenticates again, for its watch
    // as for its writes: it sees a node that joins after, and is seen.
    etcd().borrow_mut().stop();
    etcd().borrow_mut().resume();
    let later = start(
        EtcdRegistry::new(config().user("cluster", "cluster-pw")),
        "d",
    )
    .await
    .expect("after the restart");
    for (a, b) in [(&node, "d"), (&later, "c")] {
        let seen_it = crate::support::seen(a, Duration::from_secs(10), |n| {
            n.registry().nodes().iter().any(|x| x.name == b)
        });
        assert!(seen_it.await.is_ok(), "{} does not see {b}", a.name());
    }
}
