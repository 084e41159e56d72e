//! A real etcd (Debian's `etcd-server`) for one test: its own ports and data directory, stopped
//! and deleted when dropped, and killed with the test process however that ends.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One etcd member on loopback.
pub struct Etcd {
    child: Option<Child>,
    pub client: SocketAddr,
    peer: SocketAddr,
    /// Where `/health` is served in plaintext, whatever the client port speaks.
    metrics: SocketAddr,
    dir: PathBuf,
    /// Its certificate, key and CA files, when its client port speaks TLS.
    tls: Option<[PathBuf; 3]>,
}

fn binary() -> String {
    std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".to_owned())
}

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

impl Etcd {
    /// Starts etcd on ports the OS had free, and waits until it answers its health check.
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// Starts etcd whose client port speaks TLS with a certificate of `ca` for `etcd-server`,
    /// and asks clients for a certificate of the same CA.
    pub fn start_tls(ca: &cluster::Authority) -> Self {
        Self::start_with(Some(ca))
    }

    fn start_with(ca: Option<&cluster::Authority>) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "cluster-etcd-{}-{}",
            std::process::id(),
            fastrand_u64()
        ));
        let tls = ca.map(|ca| {
            let files = std::env::temp_dir().join(format!(
                "cluster-etcd-tls-{}-{}",
                std::process::id(),
                fastrand_u64()
            ));
            std::fs::create_dir_all(&files).unwrap();
            let (cert, key) = ca.issue_pem("etcd-server", 1).unwrap();
            let paths = [
                files.join("cert.pem"),
                files.join("key.pem"),
                files.join("ca.pem"),
            ];
            for (path, pem) in paths
                .iter()
                .zip([cert.as_str(), key.as_str(), ca.cert_pem()])
            {
                std::fs::write(path, pem).unwrap();
            }
            paths
        });
        for _ in 0..5 {
            let mut etcd = Self {
                child: None,
                client: free_port(),
                peer: free_port(),
                metrics: free_port(),
                dir: dir.clone(),
                tls: tls.clone(),
            };
            etcd.spawn();
            if etcd.healthy(Duration::from_secs(20)) {
                return etcd;
            }
            // A port taken between the probe and etcd's bind: again, on others.
            etcd.stop();
        }
        panic!("etcd did not start (is Debian's etcd-server installed? `.ci/run` installs it)");
    }

    fn spawn(&mut self) {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://{}", self.client);
        let peer = format!("http://{}", self.peer);
        let tls = match &self.tls {
            Some([cert, key, ca]) => format!(
                "--cert-file '{}' --key-file '{}' --trusted-ca-file '{}' --client-cert-auth",
                cert.display(),
                key.display(),
                ca.display()
            ),
            None => String::new(),
        };
        // Run under a shell that kills etcd when its stdin closes: when the test process exits,
        // however it ends, etcd goes with it.
        let script = format!(
            "{etcd} --name t --data-dir '{dir}' --listen-client-urls {client} \
             --advertise-client-urls {client} --listen-peer-urls {peer} \
             --initial-advertise-peer-urls {peer} --initial-cluster t={peer} \
             --listen-metrics-urls http://{metrics} {tls} \
             --log-level error --logger zap & pid=$!; cat >/dev/null; kill -9 $pid; wait $pid",
            etcd = binary(),
            metrics = self.metrics,
            dir = self.dir.display(),
        );
        let child = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh runs");
        self.child = Some(child);
    }

    fn healthy(&self, within: Duration) -> bool {
        let give_up = Instant::now() + within;
        while Instant::now() < give_up {
            if let Ok(mut s) = TcpStream::connect_timeout(&self.metrics, Duration::from_millis(200))
            {
                use std::io::{Read, Write};
                let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                let _ = s.write_all(b"GET /health HTTP/1.0\r\n\r\n");
                let mut answer = String::new();
                let _ = s.read_to_string(&mut answer);
                if answer.contains("\"health\":\"true\"") {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Stops etcd as a crash would (SIGKILL); its data stays for [`resume`](Self::resume).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            drop(child.stdin.take());
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same ports and data (a restart).
    pub fn resume(&mut self) {
        self.spawn();
        assert!(self.healthy(Duration::from_secs(20)), "etcd started again");
    }

    /// Stops etcd, copies its data aside, and starts it again: a snapshot to go back to.
    pub fn backup(&mut self) -> PathBuf {
        self.stop();
        let copy = self.dir.with_extension("backup");
        let _ = std::fs::remove_dir_all(&copy);
        copy_dir(&self.dir, &copy);
        self.resume();
        copy
    }

    /// Stops etcd and starts it again on the data of an earlier [`backup`](Self::backup): its
    /// revision goes back, as after a restore from a snapshot.
    pub fn restore(&mut self, backup: &std::path::Path) {
        self.stop();
        std::fs::remove_dir_all(&self.dir).unwrap();
        copy_dir(backup, &self.dir);
        std::fs::remove_dir_all(backup).unwrap();
        self.resume();
    }

    /// The endpoint for `EtcdConfig::new`.
    pub fn endpoint(&self) -> String {
        self.client.to_string()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some([cert, ..]) = &self.tls
            && let Some(files) = cert.parent()
        {
            let _ = std::fs::remove_dir_all(files);
        }
    }
}

fn fastrand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(Instant::now().elapsed().as_nanos() as u64);
    h.finish()
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
