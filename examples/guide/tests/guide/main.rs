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
//! one space and the numbers that differ from run to run (ports, durations, generations) are
//! `N` (`blocks::normal`); a count, a version or an exit code must be the same.
//! The lines of a block must come in order; the program may print others between them (a
//! line `…` says so to the reader). An address `127.0.0.1:PORT` printed where the guide has one
//! is the address the guide's later commands mean when they name the guide's.
//!
//! Commands: `cluster …` is this workspace's command line; `cargo run --bin NAME` is this
//! crate's binary NAME; `export VAR=VALUE …` and `VAR=VALUE COMMAND` set the environment;
//! `echo $?` prints the last exit code.

mod blocks;
mod session;

use std::path::{Path, PathBuf};
use std::time::Instant;

use blocks::{addresses, normal, region, tagged_blocks, words};
use session::{Session, cluster_binary};

fn guide() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/guide.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
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
fn a_line_matches_whatever_its_ports_durations_generations_and_spacing() {
    assert_eq!(
        normal("orders-1   127.0.0.1:39609  1796597067303499462  2-2  live"),
        normal("orders-1 127.0.0.1:1 1796597068315975501 2-2 live")
    );
    assert_eq!(
        normal("Attempts: 1 in 3ms (budget 30s), 4996 ms left, 10.0 ms"),
        normal("Attempts: 1 in 12ms (budget 2s), 17 ms left, 9.5 ms")
    );
    // Counts, versions and exit codes are what they are.
    assert_ne!(
        normal("2 apple reserved, 8 left"),
        normal("2 apple reserved, 7 left")
    );
    assert_ne!(normal("1"), normal("0"));
    assert_ne!(normal("orders@1.0.0"), normal("orders@1.0.1"));
    assert_ne!(normal("inventory-1"), normal("inventory-2"));
    assert_ne!(normal("8 left"), normal("8 gone"));
    assert_eq!(addresses("gossip at 127.0.0.1:42152"), ["127.0.0.1:42152"]);
    assert_eq!(words(r#"call orders.place '["apple", 3]'"#).len(), 3);
}
