//! `cluster dashboard`: a browser's plaintext requests on loopback, forwarded to a real node's
//! metrics endpoint over mutual TLS; the node's page, its refusals, and why a node that cannot
//! be reached or trusted gives none.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use cluster::{Identity, MemoryRegistry, Node};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Child;

use crate::support::{Scratch, command, sigterm};

/// How long any one step may take before the test fails: only a broken test reaches it.
const PATIENCE: Duration = Duration::from_secs(20);

/// A node named `name` with the identity in `dir`, serving its metrics endpoint on loopback.
async fn node(dir: &Path, name: &str) -> Node {
    Node::builder()
        .identity(Identity::from_dir(dir, name).expect("an identity"))
        .registry(MemoryRegistry::new())
        .metrics(SocketAddr::from(([127, 0, 0, 1], 0)))
        .start()
        .await
        .expect("node starts")
}

/// `cluster dashboard NODE ADDR` as the operator `ops` of `dir`, on a port from the OS, once it
/// has said where it listens.
struct Dashboard {
    child: Child,
    at: SocketAddr,
}

impl Dashboard {
    async fn start(dir: &Path, node: &str, addr: SocketAddr) -> Self {
        let mut child = command(&["dashboard", node, &addr.to_string()])
            .args(["--listen", "127.0.0.1:0", "--name", "ops", "--certs"])
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cluster runs");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let line = tokio::time::timeout(PATIENCE, lines.next_line())
            .await
            .expect("a line in time")
            .expect("stdout reads")
            .expect("a line before the end");
        let at = line
            .strip_prefix(&format!("dashboard of {node} at http://"))
            .and_then(|rest| rest.strip_suffix("/ (Ctrl-C to stop)"))
            .unwrap_or_else(|| panic!("not the line expected: {line}"));
        Self {
            child,
            at: at.parse().expect("an address"),
        }
    }

    /// The status and body of `METHOD path`, with `Host: host`.
    async fn ask(&self, method: &str, path: &str, host: &str) -> (u16, String) {
        let mut stream = tokio::net::TcpStream::connect(self.at)
            .await
            .expect("connects");
        let request = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("writes");
        let mut answer = Vec::new();
        tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answer))
            .await
            .expect("an answer in time")
            .expect("reads");
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let (head, body) = answer
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no HTTP answer: {answer:?}"));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, body.to_owned())
    }

    async fn get(&self, path: &str) -> (u16, String) {
        self.ask("GET", path, &self.at.to_string()).await
    }

    /// SIGTERM; its exit code and everything it wrote on stderr.
    async fn stop(mut self) -> (Option<i32>, String) {
        sigterm(&self.child);
        let mut stderr = String::new();
        let mut pipe = self.child.stderr.take().expect("stderr");
        let code = tokio::time::timeout(PATIENCE, async {
            pipe.read_to_string(&mut stderr).await.expect("reads");
            self.child.wait().await.expect("waits").code()
        })
        .await
        .expect("ends on SIGTERM");
        (code, stderr)
    }
}

#[tokio::test]
async fn the_dashboard_forwards_a_nodes_pages_over_mutual_tls_and_says_why_it_cannot() {
    let (certs, other) = (Scratch::new(), Scratch::new());
    cluster_cli::secrets::init(&certs.0, "test").expect("init");
    for name in ["web-1", "ops"] {
        cluster_cli::secrets::issue(&certs.0, name, 1, false).expect("issue");
    }
    // A node of another cluster under the same name.
    cluster_cli::secrets::init(&other.0, "other").expect("init");
    cluster_cli::secrets::issue(&other.0, "web-1", 1, false).expect("issue");
    let web = node(&certs.0, "web-1").await;
    let impostor = node(&other.0, "web-1").await;
    let web_at = web.metrics_addr().expect("metrics served");

    // The node's page and its metrics come through; what the node would refuse is refused.
    let dashboard = Dashboard::start(&certs.0, "web-1", web_at).await;
    let (status, page) = dashboard.get("/").await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.starts_with("<!doctype html>") && page.contains("<title>web-1"),
        "{page}"
    );
    let (status, text) = dashboard.get("/metrics?x=1").await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("cluster_registry_nodes 1"), "{text}");
    let host = dashboard.at.to_string();
    assert_eq!(dashboard.ask("POST", "/", &host).await.0, 405);
    assert_eq!(dashboard.get("/admin").await.0, 404);
    // A page that made its own name resolve to 127.0.0.1 gets nothing.
    let (status, body) = dashboard.ask("GET", "/", "evil.example:8080").await;
    assert_eq!(status, 421, "{body}");
    assert_eq!(dashboard.stop().await, (Some(0), String::new()));

    // The wrong name at that address: refused by TLS, said on the page and once on stderr.
    let wrong = Dashboard::start(&certs.0, "web-2", web_at).await;
    for _ in 0..2 {
        let (status, body) = wrong.get("/").await;
        assert_eq!(status, 502, "{body}");
        assert!(body.contains("does not name `web-2`"), "{body}");
    }
    let (code, stderr) = wrong.stop().await;
    assert_eq!(code, Some(0));
    assert_eq!(
        stderr.matches("does not name `web-2`").count(),
        1,
        "{stderr}"
    );

    // A node of another CA under the right name.
    let stranger = Dashboard::start(&certs.0, "web-1", impostor.metrics_addr().unwrap()).await;
    let (status, body) = stranger.get("/").await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("is not of the CA in"), "{body}");
    stranger.stop().await;

    // Nobody at the address.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let nobody = closed.local_addr().unwrap();
    drop(closed);
    let unreachable = Dashboard::start(&certs.0, "web-1", nobody).await;
    let (status, body) = unreachable.get("/metrics").await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body.starts_with(&format!("cannot reach web-1 at {nobody}")),
        "{body}"
    );
    unreachable.stop().await;

    web.shutdown().await;
    impostor.shutdown().await;
}

// A real browser, which has no client certificate: `cargo test -p cluster-cli --test cli --
// --ignored browser` (`.ci/run` does, after installing Debian's chromium).
#[tokio::test]
#[ignore = "needs chromium: .ci/run installs it and runs this"]
async fn browser_a_headless_chromium_opens_the_dashboard_through_it() {
    let certs = Scratch::new();
    cluster_cli::secrets::init(&certs.0, "test").expect("init");
    for name in ["web-1", "ops"] {
        cluster_cli::secrets::issue(&certs.0, name, 1, false).expect("issue");
    }
    let web = node(&certs.0, "web-1").await;
    let dashboard = Dashboard::start(&certs.0, "web-1", web.metrics_addr().unwrap()).await;
    let profile = Scratch::new();
    let out = tokio::time::timeout(
        PATIENCE,
        tokio::process::Command::new("chromium")
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
            .arg(format!("--user-data-dir={}", profile.0.display()))
            .arg(format!("http://{}/", dashboard.at))
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("chromium ends")
    .expect("chromium on the PATH (.ci/run installs Debian's)");
    // The DOM after the browser parsed the page: the node's, not an error page.
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(dom.contains("<title>web-1"), "{dom}");
    assert!(dom.contains("<h2>Nodes (1)</h2>"), "{dom}");
    dashboard.stop().await;
    web.shutdown().await;
}

#[tokio::test]
async fn a_dashboard_for_the_network_or_without_an_identity_is_refused() {
    let anywhere = command(&[
        "dashboard",
        "web-1",
        "127.0.0.1:9464",
        "--listen",
        "0.0.0.0:0",
    ])
    .args(["--certs", "certs", "--name", "ops"])
    .output()
    .await
    .expect("cluster runs");
    let stderr = String::from_utf8_lossy(&anywhere.stderr);
    assert_eq!(anywhere.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not a loopback address"), "{stderr}");
    let anonymous = command(&[
        "dashboard",
        "web-1",
        "127.0.0.1:9464",
        "--listen",
        "127.0.0.1:0",
    ])
    .output()
    .await
    .expect("cluster runs");
    let stderr = String::from_utf8_lossy(&anonymous.stderr);
    assert_eq!(anonymous.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--certs DIR and --name NAME"), "{stderr}");
}
