//! `cluster-node`'s command line, as scripts and operators use it: `--help` names every command
//! and option; a misuse exits 2 and says what was wrong; the forms the docs and the other tests
//! use still parse (`compat` on two files: tests/compat.rs).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// What `cluster-node ARGS` did: its exit code, stdout and stderr.
fn cluster_node(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cluster-node"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Asserts that `args` is a misuse: exit code 2, nothing on stdout, and a message on stderr
/// that names each of `named`.
fn misuse(args: &[&str], named: &[&str]) {
    let (code, out, err) = cluster_node(args);
    assert_eq!(code, Some(2), "{args:?}: {err}");
    assert_eq!(out, "", "{args:?}");
    for word in named {
        assert!(err.contains(word), "{args:?} should name {word}: {err}");
    }
}

/// Every option of every command, as a user reads them in `--help`.
const OPTIONS: [&str; 16] = [
    "--name",
    "--certs",
    "--insecure",
    "--cluster-id",
    "--cluster",
    "--seed",
    "--listen",
    "--advertise",
    "--gossip-listen",
    "--gossip-advertise",
    "--probe",
    "--bank",
    "--dir",
    "--node",
    "--days",
    "--help",
];

#[test]
fn help_exits_0_and_names_every_command_and_option() {
    for help in ["--help", "-h"] {
        let (code, out, err) = cluster_node(&[help]);
        assert_eq!(code, Some(0), "{err}");
        for word in OPTIONS
            .iter()
            .chain(&["init", "issue", "key", "compat", "OLD.json", "NEW.json"])
        {
            assert!(out.contains(word), "`{help}` should name {word}:\n{out}");
        }
        assert!(out.contains("Exit codes"), "{out}");
    }
    // Each command's own help, `run`'s included though `--help` shows its options as
    // `cluster-node`'s.
    for (command, options) in [
        (
            "run",
            &["--name", "--certs", "--insecure", "--seed", "--bank"][..],
        ),
        ("init", &["--cluster", "--dir"]),
        ("issue", &["--dir", "--node", "--days"]),
        ("compat", &["OLD.json", "NEW.json", "exit"]),
    ] {
        let (code, out, err) = cluster_node(&[command, "--help"]);
        assert_eq!(code, Some(0), "{command}: {err}");
        for option in options {
            assert!(out.contains(option), "{command} --help: {option}:\n{out}");
        }
    }
}

#[test]
fn a_misuse_exits_2_and_names_the_problem() {
    misuse(&["--bogus"], &["--bogus"]);
    misuse(&["bogus"], &["bogus"]);
    misuse(&["--name"], &["--name", "value"]);
    misuse(&["issue", "--dir"], &["--dir", "value"]);
    misuse(
        &["--insecure", "--cluster-id", "dev", "--listen", "nope"],
        &["--listen", "nope"],
    );
    // An address needs its port.
    misuse(
        &[
            "--insecure",
            "--cluster-id",
            "dev",
            "--gossip-advertise",
            "10.0.0.1",
        ],
        &["--gossip-advertise", "10.0.0.1"],
    );
    misuse(
        &["issue", "--dir", "d", "--node", "n", "--days", "ten"],
        &["--days", "ten"],
    );
    // A command's options are its own.
    misuse(
        &["init", "--cluster", "c", "--dir", "d", "--days", "3"],
        &["--days"],
    );
    misuse(&["init", "--cluster", "c"], &["--dir"]);
    misuse(&["compat", "old.json"], &["NEW.json"]);
    // What clap cannot see alone: the node's identity.
    misuse(&[], &["no identity", "--certs", "--insecure"]);
    misuse(&["--insecure"], &["--cluster-id"]);
    misuse(
        &["--certs", "d", "--insecure", "--cluster-id", "dev"],
        &["--certs", "--insecure"],
    );
}

#[test]
fn key_prints_a_gossip_key() {
    let (code, out, err) = cluster_node(&["key"]);
    assert_eq!(code, Some(0), "{err}");
    let key = out.trim_end();
    assert_eq!(key.len(), 64, "{out}");
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()), "{out}");
}

#[test]
fn init_and_issue_take_their_options_and_the_cluster_id_alias() {
    let dir = std::env::temp_dir().join(format!("cluster-command-line-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    let (code, _, err) = cluster_node(&["init", "--cluster-id", "cli", "--dir", d]);
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = cluster_node(&["issue", "--node", "n-1", "--dir", d, "--days", "30"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("n-1.pem"), "{out}");
    assert!(dir.join("n-1.key").exists());

    // A repeated option takes its last value, as before clap: the identity looked for is `n-2`'s.
    let (code, _, err) = cluster_node(&["--certs", d, "--name", "n-1", "--name", "n-2"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("`n-2`"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_starts_with_or_without_the_word_run() {
    for command in [
        &["run", "--insecure", "--cluster", "cli"][..],
        &[
            "--insecure",
            "--cluster-id",
            "cli",
            "--listen",
            "127.0.0.1:0",
        ],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cluster-node"))
            .args(command)
            .args(["--seed", "127.0.0.1:9", "--seed", "127.0.0.1:10", "--probe"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(line.starts_with("gossip=127.0.0.1:"), "{command:?}: {line}");
        assert!(line.contains(" rpc=127.0.0.1:"), "{command:?}: {line}");
    }
}
