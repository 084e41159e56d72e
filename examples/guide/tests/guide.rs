//! `docs/guide.md`, checked and run.
//!
//! The guide marks its blocks with an HTML comment on the line before the fence (invisible once
//! rendered):
//!
//! - `<!-- file: PATH -->` or `<!-- file: PATH#REGION -->`: the block is that file of this
//!   crate, whole, or the lines between `guide:start REGION` and `guide:end REGION` in it.
//! - `<!-- test: run -->`: a shell session run in order, in a scratch directory that plays the
//!   reader's crate: each `$ COMMAND` line is run to its end, and the lines under it are what it
//!   must print (stdout, then stderr).
//! - `<!-- test: start NAME -->`: one `$ COMMAND` left running as NAME (a process of its own,
//!   in a terminal of its own); the test goes on once it has printed the lines under it.
//! - `<!-- test: output NAME -->`: the next lines the running NAME must print.
//!
//! A printed line matches a line of the guide when both are the same once whitespace runs are
//! one space and every number is `0`: ports, generations and durations differ from run to run.
//! The lines of a block must come in order; the program may print others between them (a
//! line `…` says so to the reader). An
//! address `127.0.0.1:PORT` printed where the guide has one is the address the guide's later
//! commands mean when they name the guide's.
//!
//! Commands: `cluster …` is this workspace's command line; `cargo run --bin NAME` is this
//! crate's binary NAME; `export VAR=VALUE …` and `VAR=VALUE COMMAND` set the environment;
//! `echo $?` prints the last exit code.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// How long any one step may take: only a broken guide or build reaches it.
const PATIENCE: Duration = Duration::from_secs(30);

fn guide() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/guide.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A fenced block of the guide and the tag on the line before it.
#[derive(Debug)]
struct Block {
    tag: String,
    /// 1-based, for messages.
    line: usize,
    body: Vec<String>,
}

/// Every fenced block of `text` that has a tag.
fn tagged_blocks(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_start();
        if !fence.starts_with("```") {
            i += 1;
            continue;
        }
        let tag = i
            .checked_sub(1)
            .map(|p| lines[p].trim())
            .and_then(|l| l.strip_prefix("<!--"))
            .and_then(|l| l.strip_suffix("-->"))
            .map(|l| l.trim().to_owned());
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].trim_start().starts_with("```"))
            .unwrap_or_else(|| panic!("guide.md:{}: a block never closed", i + 1));
        if let Some(tag) = tag {
            blocks.push(Block {
                tag,
                line: i + 1,
                body: lines[i + 1..end].iter().map(|l| (*l).to_owned()).collect(),
            });
        }
        i = end + 1;
    }
    blocks
}

/// The lines between `guide:start REGION` and `guide:end REGION` of `text`, without their
/// common indentation.
fn region(text: &str, name: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let marker = |l: &str, what: &str| {
        l.trim()
            .trim_start_matches(['/', '#'])
            .trim()
            .strip_prefix(what)
            .is_some_and(|rest| rest.trim() == name)
    };
    let start = lines
        .iter()
        .position(|l| marker(l, "guide:start"))
        .unwrap_or_else(|| panic!("no `guide:start {name}`"));
    let end = lines
        .iter()
        .position(|l| marker(l, "guide:end"))
        .unwrap_or_else(|| panic!("no `guide:end {name}`"));
    let body = &lines[start + 1..end];
    let indent = body
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    body.iter()
        .map(|l| l.get(indent..).unwrap_or("").to_owned())
        .collect()
}

/// Every file of the crate (`src/`, `Cargo.toml`), as a path from the workspace's root.
fn crate_files() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("reads the directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("Cargo.toml")];
    walk(&root.join("src"), &mut files);
    files
        .iter()
        .map(|f| {
            let relative = f.strip_prefix(root).expect("in the crate");
            format!("examples/guide/{}", relative.display())
        })
        .collect()
}

#[test]
fn the_guides_code_is_the_code_of_the_guide_crate() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut shown = Vec::new();
    for block in tagged_blocks(&guide()) {
        let Some(file) = block.tag.strip_prefix("file:") else {
            continue;
        };
        let file = file.trim();
        let (path, part) = match file.split_once('#') {
            Some((path, part)) => (path, Some(part)),
            None => (file, None),
        };
        let text = std::fs::read_to_string(workspace.join(path))
            .unwrap_or_else(|e| panic!("guide.md:{}: {path}: {e}", block.line));
        let expected = match part {
            Some(part) => region(&text, part),
            None => text.lines().map(str::to_owned).collect(),
        };
        assert_eq!(
            block.body.join("\n"),
            expected.join("\n"),
            "guide.md:{}: the block is not {file} as it is",
            block.line
        );
        shown.push(path.to_owned());
    }
    // Every file of the crate is in the guide, so the reader's copy builds.
    for file in crate_files() {
        assert!(shown.contains(&file), "the guide never shows {file}");
    }
}

/// A line as compared: whitespace runs as one space, every number as `0`.
fn normal(line: &str) -> String {
    let mut out = String::new();
    let mut digits = false;
    for word in line.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        for c in word.chars() {
            if c.is_ascii_digit() {
                if !digits {
                    out.push('0');
                }
                digits = true;
            } else {
                out.push(c);
                digits = false;
            }
        }
        digits = false;
    }
    out
}

/// Whether a line of the guide's output is one to look for: not blank, and not `…`, which
/// stands for lines the guide leaves out.
fn shown(line: &str) -> bool {
    !matches!(line.trim(), "" | "…")
}

/// The loopback addresses in a line.
fn addresses(line: &str) -> Vec<String> {
    line.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':'))
        .filter(|w| {
            w.strip_prefix("127.0.0.1:")
                .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_owned)
        .collect()
}

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
struct Session {
    dir: Scratch,
    env: HashMap<String, String>,
    running: HashMap<String, Running>,
    addresses: HashMap<String, String>,
    last_code: i32,
}

/// Splits a shell command into words: single and double quotes, nothing else.
fn words(command: &str) -> Vec<String> {
    let (mut words, mut word, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in command.chars() {
        match (quote, c) {
            (None, '\'' | '"') => (quote, any) = (Some(c), true),
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if any {
                    words.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (_, c) => {
                word.push(c);
                any = true;
            }
        }
    }
    assert!(quote.is_none(), "an unclosed quote in `{command}`");
    if any {
        words.push(word);
    }
    words
}

/// The `cluster` command line, built for this test's profile by `cargo build -p cluster-cli`
/// (a test can name only its own package's binaries): quick once it has been built, the first
/// time a build of the cli and what it needs.
fn cluster_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/PROFILE");
    let target = profile_dir.parent().expect("target");
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
    profile_dir.join(format!("cluster{}", std::env::consts::EXE_SUFFIX))
}

impl Session {
    fn new() -> Self {
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
    fn run(&mut self, block: &Block, cluster: &Path) {
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
            let printed = if command.trim() == "echo $?" {
                vec![self.last_code.to_string()]
            } else {
                match self.command(command, cluster) {
                    None => Vec::new(),
                    Some(mut command) => {
                        let out = finish(&mut command);
                        self.last_code = out.0;
                        out.1
                    }
                }
            };
            self.expect(
                &format!("guide.md:{}: `{command}`", block.line),
                expected,
                &printed,
            );
            i = end;
        }
    }

    /// Runs a `test: start NAME` block.
    fn start(&mut self, name: &str, block: &Block, cluster: &Path) {
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
    fn output(&mut self, name: &str, line: usize, expected: &[String]) {
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

#[test]
fn the_guides_steps_run_as_written() {
    let started = Instant::now();
    let cluster = cluster_binary();
    eprintln!("the command line built in {:?}", started.elapsed());
    let mut session = Session::new();
    let mut steps = 0;
    for block in tagged_blocks(&guide()) {
        let step = Instant::now();
        let tag: Vec<&str> = block.tag.split_whitespace().collect();
        match tag.as_slice() {
            ["test:", "run"] => session.run(&block, &cluster),
            ["test:", "start", name] => session.start(name, &block, &cluster),
            ["test:", "output", name] => session.output(name, block.line, &block.body),
            [t, ..] if t.starts_with("test:") => {
                panic!("guide.md:{}: an unknown tag `{}`", block.line, block.tag)
            }
            _ => continue,
        }
        steps += 1;
        eprintln!(
            "guide.md:{}: {} in {:?}",
            block.line,
            block.tag,
            step.elapsed()
        );
    }
    assert!(steps >= 8, "the guide has only {steps} steps the test runs");
    eprintln!("{steps} steps in {:?}", started.elapsed());
}

#[test]
fn a_line_matches_whatever_its_numbers_and_spacing() {
    assert_eq!(
        normal("orders-1   127.0.0.1:39609  live"),
        normal("orders-1 127.0.0.1:1 live")
    );
    assert_ne!(normal("8 left"), normal("8 gone"));
    assert_eq!(addresses("gossip at 127.0.0.1:42152"), ["127.0.0.1:42152"]);
    assert_eq!(words(r#"call orders.place '["apple", 3]'"#).len(), 3);
}
