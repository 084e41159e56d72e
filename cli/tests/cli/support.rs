//! A two-node cluster for `cluster` to look at, and the binary run as an operator runs it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use cluster::registry::{GossipConfig, GossipRegistry};
use cluster::{Identity, Keyring, Node};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use super::{OrdersServer, Shop};

/// How long any one step may take before the test fails: only a broken test reaches it.
const PATIENCE: Duration = Duration::from_secs(20);

/// A directory removed with everything in it when dropped.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Scratch {
    pub(crate) fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("cluster-cli-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Two nodes serving `orders` (`shop-a`, the seed, and `shop-b`), and the certificates of an
/// operator `ops` of the same cluster and of a `stranger` of another.
pub(crate) struct Cluster {
    certs: Scratch,
    other: Scratch,
    a: Node,
    b: Option<Node>,
    seed: SocketAddr,
    shop: &'static Shop,
}

async fn start_node(dir: &Path, name: &str, seeds: &[SocketAddr]) -> (Node, SocketAddr) {
    let identity = Identity::from_dir(dir, name).expect("an identity");
    let keyring = Keyring::from_file(dir.join("gossip.key")).expect("a keyring");
    let registry = GossipRegistry::new(
        GossipConfig::new()
            .keyring(keyring)
            .seeds(seeds.iter().map(ToString::to_string)),
    );
    let node = Node::builder()
        .identity(identity)
        .registry(registry.clone())
        .start()
        .await
        .expect("node starts");
    (node, registry.gossip_addr().expect("gossiping"))
}

impl Cluster {
    pub(crate) async fn start() -> Self {
        let (certs, other) = (Scratch::new(), Scratch::new());
        cluster_cli::secrets::init(&certs.0, "test").expect("init");
        for name in ["shop-a", "shop-b", "ops", "evil", "evil-2"] {
            cluster_cli::secrets::issue(&certs.0, name, 1, false).expect("issue");
        }
        cluster_cli::secrets::init(&other.0, "other").expect("init");
        cluster_cli::secrets::issue(&other.0, "stranger", 1, false).expect("issue");
        let shop: &'static Shop = Box::leak(Box::default());
        let (a, seed) = start_node(&certs.0, "shop-a", &[]).await;
        let (b, _) = start_node(&certs.0, "shop-b", &[seed]).await;
        for node in [&a, &b] {
            std::mem::forget(node.serve(OrdersServer::new(shop)).await.expect("serves"));
        }
        let mut changes = a.registry().changes();
        tokio::time::timeout(PATIENCE, async {
            while a.registry().lookup("orders").len() < 2 {
                changes.changed().await.expect("registry runs");
            }
        })
        .await
        .expect("both providers in the seed's copy");
        Self {
            certs,
            other,
            a,
            b: Some(b),
            seed,
            shop,
        }
    }

    /// A member holding the cluster's certificate and key that serves what it likes: `provider`.
    pub(crate) async fn member(&self, name: &str, provider: impl cluster::Provide) -> Node {
        let (node, _) = start_node(&self.certs.0, name, &[self.seed]).await;
        std::mem::forget(node.serve(provider).await.expect("serves"));
        let mut changes = self.a.registry().changes();
        tokio::time::timeout(PATIENCE, async {
            while !self
                .a
                .registry()
                .services()
                .iter()
                .any(|e| e.node.name == name)
            {
                changes.changed().await.expect("registry runs");
            }
        })
        .await
        .expect("the member's services in the seed's copy");
        node
    }

    /// Orders placed so far, on either node.
    pub(crate) fn placed(&self) -> u64 {
        self.shop.placed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Where `shop-a` serves calls.
    pub(crate) fn addr_of_a(&self) -> SocketAddr {
        self.a.addr()
    }

    fn as_ops(&self, args: &[&str]) -> Command {
        let mut command = command(args);
        command.arg("--certs").arg(&self.certs.0).args([
            "--name",
            "ops",
            "--seed",
            &self.seed.to_string(),
        ]);
        command
    }

    /// `cluster ARGS` as the operator `ops`.
    pub(crate) async fn cli(&self, args: &[&str]) -> Run {
        Run::of(&mut self.as_ops(args)).await
    }

    /// `cluster ARGS` as `ops`, with `input` on stdin.
    pub(crate) async fn cli_with_stdin(&self, args: &[&str], input: &str) -> Run {
        let mut command = self.as_ops(args);
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cluster runs");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(input.as_bytes()).await.expect("writes");
        drop(stdin);
        Run::finish(child).await
    }

    /// `cluster ARGS` with the certificate of another cluster.
    pub(crate) async fn cli_as_stranger(&self, args: &[&str]) -> Run {
        let mut command = command(args);
        command.arg("--certs").arg(&self.other.0).args([
            "--name",
            "stranger",
            "--seed",
            &self.seed.to_string(),
        ]);
        Run::of(&mut command).await
    }

    /// `cluster ARGS` as `ops`, left running: its stdout read line by line.
    pub(crate) fn spawn(&self, args: &[&str]) -> Running {
        let mut child = self
            .as_ops(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("cluster runs");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Running {
            child,
            lines: Some(lines),
        }
    }

    /// The seed's registry changes, to wait on.
    pub(crate) fn registry_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.a.registry().changes()
    }

    /// Waits until a call of `slow` has started on a provider.
    pub(crate) async fn until_slow_started(&self) {
        let shop = self.shop;
        tokio::time::timeout(PATIENCE, async {
            while shop.slow_started.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the call reached its handler");
    }

    /// Waits until the seed's copy holds `n` nodes.
    pub(crate) async fn until_nodes(
        &self,
        n: usize,
        changes: &mut tokio::sync::watch::Receiver<u64>,
    ) {
        tokio::time::timeout(PATIENCE, async {
            while self.a.registry().nodes().len() != n {
                changes.changed().await.expect("registry runs");
            }
        })
        .await
        .expect("the node count in time");
    }

    /// `shop-b` leaves cleanly.
    pub(crate) async fn stop_b(&mut self) {
        if let Some(b) = self.b.take() {
            b.shutdown().await;
        }
    }

    pub(crate) async fn stop(mut self) {
        self.stop_b().await;
        self.a.shutdown().await;
    }
}

/// The `cluster` binary with `args`, and none of the environment's `CLUSTER_*` settings.
pub(crate) fn command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cluster"));
    command
        .args(args)
        .env_remove("CLUSTER_CERTS")
        .env_remove("CLUSTER_NAME")
        .env_remove("CLUSTER_SEEDS")
        .env_remove("CLUSTER_ID")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// A finished run of `cluster`.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    pub(crate) async fn of(command: &mut Command) -> Run {
        let child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cluster runs");
        Run::finish(child).await
    }

    async fn finish(child: Child) -> Run {
        let out = tokio::time::timeout(PATIENCE, child.wait_with_output())
            .await
            .expect("cluster ends")
            .expect("cluster runs");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Its stdout, after exit code 0.
    pub(crate) fn ok(self) -> String {
        assert_eq!(self.code, 0, "cluster failed: {self:?}");
        self.stdout
    }

    /// Its stdout as JSON, after exit code 0.
    pub(crate) fn json(self) -> Value {
        let out = self.ok();
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
    }
}

/// A `cluster` process still running.
pub(crate) struct Running {
    child: Child,
    lines: Option<Lines<BufReader<ChildStdout>>>,
}

impl Running {
    /// Its next line of stdout, as JSON.
    pub(crate) async fn line(&mut self) -> Value {
        let line = tokio::time::timeout(
            PATIENCE,
            self.lines.as_mut().expect("stdout open").next_line(),
        )
        .await
        .expect("a line in time")
        .expect("stdout reads")
        .expect("a line before the end");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Its next line of stdout, as it is.
    pub(crate) async fn raw_line(&mut self) -> String {
        tokio::time::timeout(
            PATIENCE,
            self.lines.as_mut().expect("stdout open").next_line(),
        )
        .await
        .expect("a line in time")
        .expect("stdout reads")
        .expect("a line before the end")
    }

    /// Stops reading its stdout, as `head` does once it has its lines.
    pub(crate) fn close_stdout(&mut self) {
        self.lines = None;
    }

    /// Its exit code, once it ends.
    pub(crate) async fn wait(mut self) -> Option<i32> {
        tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .expect("ends")
            .expect("waits")
            .code()
    }

    /// Sends it SIGTERM, as a shell's ctrl-c would end it; its exit code.
    pub(crate) async fn stop(mut self) -> Option<i32> {
        sigterm(&self.child);
        tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .expect("ends on SIGTERM")
            .expect("waits")
            .code()
    }
}

/// Sends `child` SIGTERM, as a shell's ctrl-c or a supervisor would end it.
pub(crate) fn sigterm(child: &Child) {
    let pid = child.id().expect("running").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(killed.success());
}
