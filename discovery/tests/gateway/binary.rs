//! `cluster-discovery gateway --config FILE`, the process: it routes as its file says, refuses
//! a file that is wrong with exit code 2, and on SIGTERM finishes the request in flight before
//! it exits 0.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;

use axum::http::StatusCode;

use crate::support::{Upstream, client, get};

/// The configuration in a file of its own (removed on drop).
struct File(std::path::PathBuf);

impl File {
    fn new(name: &str, text: &str) -> Self {
        let path = std::env::temp_dir().join(format!("gateway-{}-{name}.toml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        Self(path)
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The process, killed if the test ends before it exits (a failed assertion, say).
struct Process(std::process::Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn config(upstream: &Upstream) -> String {
    format!(
        r#"
listen = "127.0.0.1:0"

[resolvers.fixed]
kind = "static"
services = {{ orders = ["{}"] }}

[[routes]]
path = "/api/orders/*"
service = "orders"
resolver = "fixed"
strip = "/api"

[[routes]]
path = "/hold"
service = "orders"
resolver = "fixed"
"#,
        upstream.addr
    )
}

#[tokio::test]
async fn the_binary_routes_as_its_file_says_and_drains_on_sigterm() {
    let up = Upstream::start().await;
    let file = File::new("routes", &config(&up));
    let mut child = Process(
        Command::new(env!("CARGO_BIN_EXE_cluster-discovery"))
            .args(["gateway", "--config"])
            .arg(&file.0)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();
    let c = client();
    let a = get(&c, format!("{url}/api/orders/7")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.text.contains("GET /orders/7\n"), "{}", a.text);

    // SIGHUP (nginx's reload) is not a stop, nor the default kill: it goes on serving. A
    // pending signal is acted on before the process runs again, so an answer after `kill`
    // returned is from a process that lived through it.
    let hup = Command::new("kill")
        .args(["-HUP", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    assert_eq!(
        get(&c, format!("{url}/api/orders/8")).await.status,
        StatusCode::OK
    );
    assert!(child.0.try_wait().unwrap().is_none(), "SIGHUP ended it");

    // A request in flight when SIGTERM comes: answered, then the process exits 0.
    let (c2, u2) = (c.clone(), url.clone());
    let held = tokio::spawn(async move { get(&c2, format!("{u2}/hold")).await });
    while up.seen.holding.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let term = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    // Stopped accepting: a new connection is refused.
    let addr = url.strip_prefix("http://").unwrap().to_owned();
    while tokio::net::TcpStream::connect(&addr).await.is_ok() {
        tokio::task::yield_now().await;
    }
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "exited with a request in flight"
    );
    up.seen.release.notify_waiters();
    assert_eq!(held.await.unwrap().status, StatusCode::OK);
    let status = tokio::task::spawn_blocking(move || child.0.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_file_that_is_wrong_exits_2_and_says_why() {
    for (name, text, says) in [
        ("typo", "listen = \"127.0.0.1:0\"\nroutez = []\n", "routez"),
        (
            "resolver",
            "[resolvers]\n[[routes]]\npath = \"/a/*\"\nservice = \"a\"\nresolver = \"nope\"\n",
            "nope",
        ),
        (
            "no-node",
            "[[functions]]\npath = \"/api/*\"\nopen_to_anyone = true\n",
            "need a `[node]`",
        ),
        (
            "no-identity",
            "[node]\nname = \"gateway-1\"\nidentity_dir = \"/nowhere/at/all\"\neureka = []\n\
             [[functions]]\npath = \"/api/*\"\nopen_to_anyone = true\n",
            "identity_dir /nowhere/at/all",
        ),
        (
            "no-key",
            "[node]\nname = \"gateway-1\"\nidentity_dir = \"/nowhere/at/all\"\neureka = []\n\
             [[functions]]\npath = \"/api/*\"\n[[functions.keys]]\nname = \"ops\"\n\
             key_env = \"CLUSTER_GATEWAY_NO_SUCH_VARIABLE\"\nallow = [\"*\"]\n",
            // Said before the node would start (its identity would fail too).
            "`CLUSTER_GATEWAY_NO_SUCH_VARIABLE` is not set",
        ),
    ] {
        let file = File::new(name, text);
        let out = Command::new(env!("CARGO_BIN_EXE_cluster-discovery"))
            .args(["gateway", "--config"])
            .arg(&file.0)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(says), "{name}: {err}");
        assert!(out.stdout.is_empty());
    }
}
