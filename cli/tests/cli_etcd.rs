//! `cluster` on a registry on etcd (`--etcd`): it joins through etcd, with no seed and no
//! gossip key, shows and calls what is there, and leaves at once. Needs etcd's binary (the
//! `real-etcd` feature; `.ci/run` installs Debian's `etcd-server`).

#[path = "../../etcd/tests/support/server.rs"]
#[allow(dead_code, unreachable_pub)]
mod server;

use std::process::Stdio;

use cluster::Node;
use cluster_etcd::{EtcdConfig, EtcdRegistry};
use tokio::process::Command;

#[cluster::service(name = "greeter", version = "1.0.0")]
trait Greeter {
    #[call(idempotent)]
    async fn hello(&self, name: String) -> String;
}

struct Host;

impl Greeter for Host {
    async fn hello(&self, name: String) -> String {
        format!("hello {name}")
    }
}

async fn cluster_cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cluster"))
        .args(args)
        .env_remove("CLUSTER_ETCD")
        .env_remove("CLUSTER_SEEDS")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(out.stdout),
        text(out.stderr),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_joins_through_etcd_calls_and_leaves() {
    let etcd = server::Etcd::start();
    let endpoint = etcd.endpoint();
    let registry = EtcdRegistry::new(
        EtcdConfig::new([endpoint.clone()])
            .plaintext()
            .cluster("prod"),
    );
    let node = Node::builder()
        .name("greeter-1")
        .insecure()
        .registry(registry)
        .start()
        .await
        .unwrap();
    let _r = node.serve(GreeterServer::new(Host)).await.unwrap();
    let on_etcd = [
        "--etcd",
        &endpoint,
        "--etcd-plaintext",
        "--insecure",
        "--cluster-id",
        "prod",
    ];

    let (code, out, err) = cluster_cli(&[&on_etcd[..], &["--json", "nodes"]].concat()).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("greeter-1"), "{out}");

    let (code, out, err) =
        cluster_cli(&[&on_etcd[..], &["call", "greeter.hello", r#"["ops"]"#]].concat()).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("hello ops"), "{out}");

    // Another cluster's prefix holds nothing.
    let (code, _, err) = cluster_cli(&[
        "--etcd",
        &endpoint,
        "--etcd-plaintext",
        "--insecure",
        "--cluster-id",
        "other",
        "call",
        "greeter.hello",
        r#"["ops"]"#,
    ])
    .await;
    assert_eq!(code, 1, "{err}");

    // Plaintext only by name.
    let (code, _, err) = cluster_cli(&[
        "--etcd",
        &endpoint,
        "--insecure",
        "--cluster-id",
        "prod",
        "nodes",
    ])
    .await;
    assert_eq!(code, 2);
    assert!(err.contains("--etcd-plaintext"), "{err}");

    // Every command left: its lease was revoked, so only the provider is in the registry.
    let names: Vec<String> = node
        .registry()
        .nodes()
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert_eq!(names, ["greeter-1"]);
}
