#!/usr/bin/env bash
# How long a newcomer waits for a first build, from a cold target directory (the registry's
# downloads aside: run once first, or `cargo fetch`, so that the network is not timed):
#
#   1. a minimal service crate depending on `cluster` alone (one #[service] trait, tokio, serde),
#      with this checkout's Cargo.lock so that every run builds the same versions;
#   2. the demo: `cargo build -p examples --example demo` in this checkout.
#
# Usage: examples/benches/cold_build.sh [CHECKOUT]   (default: this one)
# Prints, for each: wall-clock seconds, CPU seconds (user + system), and units compiled.
set -euo pipefail
checkout=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

timed() { # label, then the command; runs it in a cold target directory of its own
  local label=$1; shift
  rm -rf "$scratch/target"
  /usr/bin/time -f "%e %U %S" -o "$scratch/time" env CARGO_TARGET_DIR="$scratch/target" "$@" \
    >"$scratch/log" 2>&1 || { cat "$scratch/log"; exit 1; }
  local units
  units=$(grep -c '^ *Compiling ' "$scratch/log" || true)
  read -r wall user sys <"$scratch/time"
  printf '%-28s %6.1f s wall  %6.1f s CPU  %4d crates compiled\n' \
    "$label" "$wall" "$(awk "BEGIN { print $user + $sys }")" "$units"
}

mkdir -p "$scratch/minimal/src"
cat >"$scratch/minimal/Cargo.toml" <<EOF
[package]
name = "minimal"
version = "0.1.0"
edition = "2024"

[dependencies]
cluster = { path = "$checkout/cluster" }
tokio = { version = "1", features = ["rt-multi-thread", "macros"] }
serde = { version = "1", features = ["derive"] }

[workspace]
EOF
cat >"$scratch/minimal/src/main.rs" <<'EOF'
#[cluster::service(name = "greeter", version = "1.0.0")]
pub trait Greeter {
    async fn hello(&self, name: String) -> String;
}
fn main() {}
EOF
cp "$checkout/Cargo.lock" "$scratch/minimal/"
(cd "$scratch/minimal" && cargo fetch -q)
(cd "$checkout" && cargo fetch -q --locked)

timed "minimal crate (cluster)" cargo build --manifest-path "$scratch/minimal/Cargo.toml"
timed "demo (examples)" cargo build --locked --manifest-path "$checkout/Cargo.toml" -p examples --example demo
