//! `cluster-node compat OLD.json NEW.json`: the CI check of docs/compatibility.md.

use std::path::PathBuf;
use std::process::Command;

use cluster::{FunctionDescription, ServiceDescription};
use examples::GreeterClient;

/// A directory of its own, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("cluster-compat-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn write(&self, name: &str, description: &ServiceDescription) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, description.to_json()).unwrap();
        path.to_string_lossy().into_owned()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn compat(old: &str, new: &str) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cluster-node"))
        .args(["compat", old, new])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn an_added_function_passes_and_a_removed_one_fails() {
    let dir = Dir::new("cli");
    let old = GreeterClient::description().clone();
    let first = old.functions[0].name.clone();
    let before = dir.write("old.json", &old);
    assert_eq!(
        compat(&before, &before),
        (0, "no change that matters to callers\n".to_owned())
    );

    let mut added = old.clone();
    added.functions.push(FunctionDescription::new(
        "wave",
        "wave() -> ()",
        true,
        cluster::CallOptions::new(),
    ));
    let (code, out) = compat(&before, &dir.write("added.json", &added));
    assert_eq!((code, out.as_str()), (0, "compatible: `wave` added\n"));

    let mut removed = old.clone();
    removed.functions.remove(0);
    let (code, out) = compat(&before, &dir.write("removed.json", &removed));
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("breaking: `{first}` removed")),
        "{out}"
    );

    let (code, _) = compat(&before, &dir.0.join("missing.json").to_string_lossy());
    assert_eq!(code, 2);
}
