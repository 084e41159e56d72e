//! The reader's terminals: the commands of the guide run as a reader runs them.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant, SystemTime};

use crate::blocks::{Block, addresses, normal, shown, words};

/// How long any one step may take: only a broken guide or build reaches it.
const PATIENCE: Duration = Duration::from_secs(30);

/// A process the guide left running, killed when dropped (also when the test fails).
struct Running {
    child: Child,
    lines: Receiver<String>,
    /// What it printed so far, for the message when a line never comes.
    seen: Vec<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory removed with everything in it when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The reader's terminals: the environment they exported, the processes they left running,
/// and the addresses of this run that stand for the guide's.
pub(crate) struct Session {
    /// Before `dir`: fields drop in order, and the processes end before their directory goes.
    running: HashMap<String, Running>,
    dir: Scratch,
    env: HashMap<String, String>,
    addresses: HashMap<String, String>,
    last_code: i32,
}

/// The `cluster` command line of this workspace, for this test's profile (a test can name only
/// its own package's binaries). `cargo test --workspace` builds it for the cli's own tests: it
/// is taken as it is when newer than every source it is built from. Otherwise `cargo build -p
/// cluster-cli` builds it: at once when it is fresh, but the first time that is a build of the
/// cli and all it needs, as its features are unified apart from the workspace's.
pub(crate) fn cluster_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/PROFILE");
    let target = profile_dir.parent().expect("target");
    let binary = profile_dir.join(format!("cluster{}", std::env::consts::EXE_SUFFIX));
    let built_at = std::fs::metadata(&binary).and_then(|m| m.modified()).ok();
    if built_at.is_some_and(|at| at >= newest_source()) {
        return binary;
    }
    let mut build = Command::new(env!("CARGO"));
    build
        .args(["build", "--quiet", "-p", "cluster-cli", "--bin", "cluster"])
        .arg("--target-dir")
        .arg(target)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    // What cargo sets for this test, not for a build: with them, the build scripts that watch
    // one (ring's, `CARGO_MANIFEST_DIR`) would run again, and all that depends on them rebuild.
    for (var, _) in std::env::vars_os() {
        let name = var.to_string_lossy();
        let set_for_us = [
            "CARGO_PKG_",
            "CARGO_BIN_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix))
            || ["CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR", "OUT_DIR"].contains(&&*name);
        if set_for_us {
            build.env_remove(&var);
        }
    }
    if profile_dir.ends_with("release") {
        build.arg("--release");
    }
    let built = build.status().expect("cargo runs");
    assert!(built.success(), "cargo build -p cluster-cli failed");
    binary
}

/// When the newest file the command line is built from was changed.
fn newest_source() -> SystemTime {
    fn walk(path: &Path, newest: &mut SystemTime) {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if !meta.is_dir() {
            *newest = (*newest).max(meta.modified().expect("a modification time"));
        } else if !path.ends_with("target") {
            for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
                walk(&entry.path(), newest);
            }
        }
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut newest = SystemTime::UNIX_EPOCH;
    for part in [
        "Cargo.toml",
        "Cargo.lock",
        "cli",
        "cluster",
        "cluster-macros",
        "etcd",
        "vendor",
    ] {
        walk(&workspace.join(part), &mut newest);
    }
    newest
}

impl Session {
    pub(crate) fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("cluster-guide-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        Self {
            dir: Scratch(dir),
            env: HashMap::new(),
            running: HashMap::new(),
            addresses: HashMap::new(),
            last_code: 0,
        }
    }

    /// The guide's words with this run's addresses in place of the guide's.
    fn this_run(&self, word: &str) -> String {
        self.addresses
            .iter()
            .fold(word.to_owned(), |w, (guide, ours)| w.replace(guide, ours))
    }

    /// The command of `line` (`$ …`), ready to run: `None` for a shell builtin it handled.
    fn command(&mut self, line: &str, cluster: &Path) -> Option<Command> {
        let mut words: Vec<String> = words(line).iter().map(|w| self.this_run(w)).collect();
        if words.first().is_some_and(|w| w == "export") {
            for assignment in &words[1..] {
                let (var, value) = assignment.split_once('=').expect("export VAR=VALUE");
                self.env.insert(var.to_owned(), value.to_owned());
            }
            return None;
        }
        let mut env = self.env.clone();
        while let Some((var, value)) = words.first().and_then(|w| w.split_once('=')) {
            env.insert(var.to_owned(), value.to_owned());
            words.remove(0);
        }
        let (program, args) = words.split_first().expect("a command");
        let mut command = match (program.as_str(), args) {
            ("cluster", _) => {
                let mut command = Command::new(cluster);
                command.args(args);
                command
            }
            ("cargo", [run, bin, name]) if run == "run" && bin == "--bin" => {
                let exe = match name.as_str() {
                    "inventory" => env!("CARGO_BIN_EXE_inventory"),
                    "orders" => env!("CARGO_BIN_EXE_orders"),
                    "frontend" => env!("CARGO_BIN_EXE_frontend"),
                    other => panic!("the guide runs `{other}`, which this crate does not have"),
                };
                Command::new(exe)
            }
            _ => panic!("the test does not know how to run `{line}`"),
        };
        for var in [
            "CLUSTER_CERTS",
            "CLUSTER_NAME",
            "CLUSTER_SEEDS",
            "CLUSTER_ID",
            "SEED",
        ] {
            command.env_remove(var);
        }
        command
            .envs(env)
            .current_dir(&self.dir.0)
            .stdin(Stdio::null());
        Some(command)
    }

    /// Checks that `expected` (the guide's lines) come in order in `printed`, and learns the
    /// addresses they stand for.
    fn expect(&mut self, what: &str, expected: &[String], printed: &[String]) {
        let mut at = 0;
        for want in expected.iter().filter(|l| shown(l)) {
            let found = printed[at..]
                .iter()
                .position(|got| normal(got) == normal(want))
                .unwrap_or_else(|| {
                    panic!(
                        "{what}: the guide says\n  {want}\nbut after line {at} it printed:\n{}",
                        printed[at..].join("\n")
                    )
                });
            self.learn(want, &printed[at + found]);
            at += found + 1;
        }
    }

    fn learn(&mut self, want: &str, got: &str) {
        for (guide, ours) in addresses(want).into_iter().zip(addresses(got)) {
            self.addresses.entry(guide).or_insert(ours);
        }
    }

    /// Runs a `test: run` block.
    pub(crate) fn run(&mut self, block: &Block, cluster: &Path) {
        let mut i = 0;
        while i < block.body.len() {
            let line = &block.body[i];
            let command = line
                .strip_prefix("$ ")
                .unwrap_or_else(|| panic!("guide.md:{}: `{line}` is not a command", block.line));
            let end = (i + 1..block.body.len())
                .find(|&j| block.body[j].starts_with("$ "))
                .unwrap_or(block.body.len());
            let expected = &block.body[i + 1..end];
            let at = format!("guide.md:{}: `{command}`", block.line);
            if command.trim() == "echo $?" {
                // The exit code exactly: a number is any number only in a program's output.
                let said: Vec<&str> = expected.iter().map(|l| l.trim()).collect();
                assert_eq!(said, [self.last_code.to_string()], "{at}");
                i = end;
                continue;
            }
            let printed = match self.command(command, cluster) {
                None => Vec::new(),
                Some(mut command) => {
                    let (code, printed) = finish(&mut command);
                    self.last_code = code;
                    // A command the guide shows failing is followed by `echo $?`; any other
                    // must succeed.
                    let next = block.body.get(end).map(|l| l.trim());
                    if next != Some("$ echo $?") {
                        assert_eq!(code, 0, "{at} failed:\n{}", printed.join("\n"));
                    }
                    printed
                }
            };
            self.expect(&at, expected, &printed);
            i = end;
        }
    }

    /// Runs a `test: start NAME` block.
    pub(crate) fn start(&mut self, name: &str, block: &Block, cluster: &Path) {
        let (first, expected) = block.body.split_first().expect("a command");
        let line = first.strip_prefix("$ ").expect("`$ COMMAND` first");
        let mut command = self.command(line, cluster).expect("a process");
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("`{line}`: {e}"));
        let (send, lines) = channel();
        let stdout = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        self.running.insert(
            name.to_owned(),
            Running {
                child,
                lines,
                seen: Vec::new(),
            },
        );
        self.output(name, block.line, expected);
    }

    /// Waits for the lines `expected` from the running NAME: each as it is printed.
    pub(crate) fn output(&mut self, name: &str, line: usize, expected: &[String]) {
        let mut learned = Vec::new();
        let running = self
            .running
            .get_mut(name)
            .unwrap_or_else(|| panic!("guide.md:{line}: nothing named {name} is running"));
        for want in expected.iter().filter(|l| shown(l)) {
            let deadline = Instant::now() + PATIENCE;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let got = running.lines.recv_timeout(left).unwrap_or_else(|e| {
                    panic!(
                        "guide.md:{line}: {name} never printed\n  {want}\n({e}); it printed:\n{}",
                        running.seen.join("\n")
                    )
                });
                running.seen.push(got.clone());
                if normal(&got) == normal(want) {
                    learned.push((want.clone(), got));
                    break;
                }
            }
        }
        for (want, got) in learned {
            self.learn(&want, &got);
        }
    }
}

/// Runs `command` to its end: its exit code, and its stdout's lines then its stderr's.
fn finish(command: &mut Command) -> (i32, Vec<String>) {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command runs");
    let pid = child.id();
    // Ends the command if it outlives PATIENCE, so that a hung step fails the test.
    let (done, finished) = channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if finished.recv_timeout(PATIENCE).is_err() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    });
    let out = child.wait_with_output().expect("the command ends");
    let _ = done.send(());
    let _ = watchdog.join();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let lines = stdout.lines().chain(stderr.lines()).map(str::to_owned);
    (out.status.code().unwrap_or(-1), lines.collect())
}
