//! The victim: one `cluster-node` process per test, measured from outside (`/proc/<pid>`), and
//! the legitimate caller whose call every test ends with.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use cluster::registry::{NodeInfo, ServiceEntry};
use cluster::{Identity, MemoryRegistry, Node, Registry};
use examples::{BankClient, GreeterClient, ProbeClient};

/// The node's name, as its certificate says it on a secure victim.
pub(crate) const VICTIM: &str = "victim";

/// The legitimate caller's name.
const CLIENT: &str = "client";

/// The compromised peer's name: a certificate of the cluster, in the wrong hands.
pub(crate) const ATTACKER: &str = "attacker";

/// Three more compromised members, for attacks from several at once.
pub(crate) const MORE_ATTACKERS: [&str; 3] = ["attacker-2", "attacker-3", "attacker-4"];

/// How long a victim has to print its addresses.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The `cluster-node` under attack: this build's, or `ABUSE_NODE_BIN`'s (to measure another
/// build, e.g. the previous commit's, with the same suite).
fn node_bin() -> PathBuf {
    std::env::var_os("ABUSE_NODE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cluster-node")))
}

/// A cluster's secrets, written by `cluster-node init` and `issue` as an operator would, for
/// the victim, the legitimate client and the attacker; removed when dropped.
pub(crate) struct Certs(PathBuf);

impl Certs {
    fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "cluster-abuse-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let dir_arg = dir.to_str().expect("a UTF-8 temp dir");
        node_command(&["init", "--cluster", "abuse", "--dir", dir_arg]);
        for node in [VICTIM, CLIENT, ATTACKER].into_iter().chain(MORE_ATTACKERS) {
            node_command(&["issue", "--dir", dir_arg, "--node", node]);
        }
        Self(dir)
    }

    /// The directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.0
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn node_command(args: &[&str]) {
    let out = Command::new(node_bin()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "cluster-node {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Where the victim's stderr goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stderr {
    /// Read by a thread of the test, kept for [`Victim::stderr`].
    Kept,
    /// A pipe nobody reads, as a supervisor that stopped reading leaves it.
    Unread,
}

/// How to start a victim. Default settings of the node everywhere; this says only how the
/// process is run.
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    /// Mutual TLS (certificates from `cluster-node issue`), or `--insecure`.
    pub(crate) secure: bool,
    /// `RUST_LOG`; unset when `None`.
    pub(crate) rust_log: Option<&'static str>,
    /// Where stderr goes. Stdout is a pipe read only up to the line of addresses, either way.
    pub(crate) stderr: Stderr,
    /// `ulimit -n` for the victim, if lower than the test's own.
    pub(crate) max_files: Option<u32>,
    /// Serve `probe` beside `greeter` (`--probe`).
    pub(crate) probe: bool,
    /// Serve `bank` beside `greeter` (`--bank`); its `deposit N` lines are read and counted
    /// ([`Victim::deposits`]).
    pub(crate) bank: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            secure: false,
            rust_log: None,
            stderr: Stderr::Kept,
            max_files: None,
            probe: false,
            bank: false,
        }
    }
}

/// A running `cluster-node`, killed when dropped.
pub(crate) struct Victim {
    child: Child,
    /// Where it serves calls.
    pub(crate) rpc: SocketAddr,
    certs: Option<Certs>,
    kept: Option<Arc<Mutex<String>>>,
    /// Deposits run, counted from its stdout (with [`Setup::bank`]).
    deposits: Arc<std::sync::atomic::AtomicU64>,
    // Held open and never read again: the pipes stay full once full.
    _stdout: Option<ChildStdout>,
    unread_stderr: Option<ChildStderr>,
}

impl Victim {
    /// Starts a victim and waits for its addresses.
    pub(crate) fn start(setup: Setup) -> Self {
        let certs = setup.secure.then(Certs::new);
        let mut command = match setup.max_files {
            Some(n) => {
                let mut sh = Command::new("sh");
                sh.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\"")])
                    .arg(node_bin());
                sh
            }
            None => Command::new(node_bin()),
        };
        command.args(["--name", VICTIM]);
        match &certs {
            Some(certs) => command.args(["--certs", certs.dir().to_str().unwrap()]),
            None => command.args(["--insecure", "--cluster-id", "abuse"]),
        };
        if setup.probe {
            command.arg("--probe");
        }
        if setup.bank {
            command.arg("--bank");
        }
        match setup.rust_log {
            Some(level) => command.env("RUST_LOG", level),
            None => command.env_remove("RUST_LOG"),
        };
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("cluster-node starts");

        let mut kept = None;
        let mut unread_stderr = None;
        let stderr = child.stderr.take().unwrap();
        match setup.stderr {
            Stderr::Kept => {
                let text = Arc::new(Mutex::new(String::new()));
                kept = Some(text.clone());
                std::thread::spawn(move || keep(stderr, &text));
            }
            Stderr::Unread => unread_stderr = Some(stderr),
        }

        // The line of addresses, read off the test's thread so that a victim that never prints
        // it fails the test instead of hanging it. A build that logs to stdout may print log
        // lines first; they are skipped. The pipe is handed back, unread from then on.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout);
            let mut line = String::new();
            let rpc = loop {
                line.clear();
                match lines.read_line(&mut line) {
                    Ok(0) | Err(_) => break None,
                    Ok(_) => {}
                }
                if let Some(rpc) = line.split_whitespace().find_map(|w| w.strip_prefix("rpc=")) {
                    break rpc.parse::<SocketAddr>().ok();
                }
            };
            let _ = tx.send((rpc, lines.into_inner()));
        });
        let Ok((Some(rpc), stdout)) = rx.recv_timeout(START_TIMEOUT) else {
            let _ = child.kill();
            let said = kept.map(|k| k.lock().unwrap().clone()).unwrap_or_default();
            panic!("cluster-node printed no rpc= line within {START_TIMEOUT:?}: {said}");
        };
        let deposits = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stdout = match setup.bank {
            // Each deposit prints a line: read them all, or the pipe fills and the node stalls.
            true => {
                let deposits = deposits.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(stdout).lines() {
                        match line {
                            Ok(line) if line.starts_with("deposit ") => {
                                deposits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            Ok(_) => {}
                            Err(_) => break,
                        }
                    }
                });
                None
            }
            false => Some(stdout),
        };
        Self {
            child,
            rpc,
            certs,
            kept,
            deposits,
            _stdout: stdout,
            unread_stderr,
        }
    }

    /// The deposits it has run (with [`Setup::bank`]).
    pub(crate) fn deposits(&self) -> u64 {
        self.deposits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The cluster's secrets, on a secure victim.
    pub(crate) fn certs(&self) -> &Certs {
        self.certs.as_ref().expect("a secure victim")
    }

    /// Whether the process is still running.
    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn status_kb(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .unwrap_or_else(|e| panic!("the victim's /proc status (has it died?): {e}"));
        status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse().ok())
            .unwrap_or_else(|| panic!("no {field} in the victim's status"))
    }

    /// Resident memory now, in bytes.
    pub(crate) fn rss(&self) -> u64 {
        self.status_kb("VmRSS:") * 1024
    }

    /// The most resident memory so far, in bytes.
    pub(crate) fn peak_rss(&self) -> u64 {
        self.status_kb("VmHWM:") * 1024
    }

    /// Open file descriptors now.
    pub(crate) fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|dir| dir.count())
            .unwrap_or(0)
    }

    /// What it wrote on stderr so far (with [`Stderr::Kept`]).
    pub(crate) fn stderr(&self) -> String {
        self.kept
            .as_ref()
            .map(|kept| kept.lock().unwrap().clone())
            .unwrap_or_default()
    }

    /// Asks it to leave (SIGTERM) and reads its stderr, unread until now, to the end: the
    /// lines it wrote and whether it exited within `limit`.
    pub(crate) fn terminate_and_drain(&mut self, limit: Duration) -> (String, bool) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let text = Arc::new(Mutex::new(String::new()));
        // The reader reaches the end of stderr when the process has exited (and closed it):
        // that is the event waited for, within `limit`.
        let (done, ended) = std::sync::mpsc::channel();
        let reading = self.unread_stderr.take().map(|stderr| {
            let text = text.clone();
            std::thread::spawn(move || {
                keep(stderr, &text);
                let _ = done.send(());
            })
        });
        let read_to_end = reading.is_none() || ended.recv_timeout(limit).is_ok();
        let exited = read_to_end && self.child.wait().is_ok();
        let text = text.lock().unwrap().clone();
        (text, exited)
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads `from` to its end into `into`, keeping the last 1 MiB.
fn keep(mut from: impl Read, into: &Mutex<String>) {
    let mut buf = [0u8; 8192];
    while let Ok(n @ 1..) = from.read(&mut buf) {
        let mut text = into.lock().unwrap();
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
        if text.len() > 2 << 20 {
            let cut = text.len() - (1 << 20);
            let cut = (cut..text.len())
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(0);
            text.drain(..cut);
        }
    }
}

/// A legitimate caller: a real `cluster::Node` (insecure, or with its own certificate on a
/// secure victim) whose registry holds the victim's entries, as gossip would.
pub(crate) struct Legit {
    node: Node,
    greeter: GreeterClient,
    probe: ProbeClient,
    bank: BankClient,
}

impl Legit {
    /// A caller of `victim`.
    pub(crate) async fn new(victim: &Victim) -> Self {
        Self::named(victim, CLIENT).await
    }

    /// A caller of `victim` under the certificate of `name`: one of [`ATTACKER`] and
    /// [`MORE_ATTACKERS`] is a compromised member using the library as any member would.
    pub(crate) async fn named(victim: &Victim, name: &str) -> Self {
        let registry = MemoryRegistry::new();
        let info = NodeInfo::new(VICTIM, victim.rpc, 1)
            .with_max_frame(Some(cluster::DEFAULT_MAX_FRAME))
            .with_wire(Some(cluster::WIRE_VERSIONS));
        for description in [
            GreeterClient::description(),
            ProbeClient::description(),
            BankClient::description(),
        ] {
            registry
                .register(ServiceEntry::new(
                    info.clone(),
                    Arc::new(description.clone()),
                ))
                .await
                .unwrap();
        }
        let builder = Node::builder().name(name).registry(registry);
        let builder = match &victim.certs {
            Some(certs) => builder.identity(Identity::from_dir(certs.dir(), name).unwrap()),
            None => builder.insecure(),
        };
        let node = builder.start().await.expect("the client node starts");
        let greeter = GreeterClient::new(&node);
        let probe = ProbeClient::new(&node);
        let bank = BankClient::new(&node);
        Self {
            node,
            greeter,
            probe,
            bank,
        }
    }

    /// The greeter client.
    pub(crate) fn greeter(&self) -> &GreeterClient {
        &self.greeter
    }

    /// The probe client.
    pub(crate) fn probe(&self) -> &ProbeClient {
        &self.probe
    }

    /// The bank client.
    pub(crate) fn bank(&self) -> &BankClient {
        &self.bank
    }

    /// One `greet`, given `limit` in all (its own timeout and the test's); how long it took,
    /// or what went wrong.
    pub(crate) async fn greet(&self, limit: Duration) -> Result<Duration, String> {
        let start = Instant::now();
        let call = self
            .greeter
            .greet("legit".into())
            .timeout(limit)
            .budget(limit);
        match tokio::time::timeout(limit, call).await {
            Ok(Ok(greeting)) if greeting.text == "hello, legit" => Ok(start.elapsed()),
            Ok(Ok(other)) => Err(format!("a wrong greeting: {other:?}")),
            Ok(Err(e)) => Err(format!("failed after {:?}: {e}", start.elapsed())),
            Err(_) => Err(format!("no answer within {limit:?}")),
        }
    }

    /// Stops the caller's node.
    pub(crate) async fn stop(self) {
        self.node.shutdown().await;
    }
}
