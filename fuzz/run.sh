#!/usr/bin/env bash
# Builds every fuzz target and runs each for SECONDS (20 unless told), one after the other:
#
#   fuzz/run.sh [SECONDS] [TARGET...]
#   FUZZ_RUNS=N fuzz/run.sh      N inputs per target from seed 1: the same run everywhere (CI)
#
# On stable Rust: libFuzzer through cargo-fuzz with `--sanitizer none` (installed from
# crates.io when missing, in about a minute). FUZZ_SANITIZER=address uses AddressSanitizer,
# which needs a nightly toolchain. Each run grows fuzz/work/<target>/ from the seeds in
# fuzz/corpus/<target>/ (which it leaves as they are); a crash is kept in
# fuzz/artifacts/<target>/ and printed in hex. Exits non-zero if any target crashed.
set -euo pipefail

seconds=${1:-20}
shift || true
cd "$(dirname "$0")/.."

sanitizer=${FUZZ_SANITIZER:-none}
cargo=(cargo)
if [ "$sanitizer" != none ]; then
    cargo=(cargo +nightly)
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <("${cargo[@]}" fuzz list)
fi

# One build for all the targets (or just the one named).
if [ ${#targets[@]} -eq 1 ]; then
    "${cargo[@]}" fuzz build --sanitizer "$sanitizer" "${targets[0]}"
else
    "${cargo[@]}" fuzz build --sanitizer "$sanitizer"
fi

passed=0
failed=()
for target in "${targets[@]}"; do
    mkdir -p "fuzz/work/$target"
    echo "fuzz: $target for ${seconds}s"
    # -timeout: an input that takes over 10 s is a hang, reported like a crash.
    # FUZZ_RUNS=N: that many inputs from a fixed seed instead of a time, so that a run is the
    # same on every machine (CI: a new crash fails it because the code changed, not by luck).
    if [ -n "${FUZZ_RUNS:-}" ]; then
        budget=(-runs="$FUZZ_RUNS" -seed=1)
    else
        budget=(-max_total_time="$seconds")
    fi
    if "${cargo[@]}" fuzz run --sanitizer "$sanitizer" "$target" \
        "fuzz/work/$target" "fuzz/corpus/$target" -- \
        "${budget[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        >"fuzz/work/$target.log" 2>&1; then
        grep -E '^#[0-9]+.*DONE' "fuzz/work/$target.log" | tail -1 || true
        passed=$((passed + 1))
    else
        failed+=("$target")
        grep -E -A12 'panicked at|ERROR: libFuzzer|SUMMARY' "fuzz/work/$target.log" | head -40 || true
        for crash in "fuzz/artifacts/$target"/*; do
            [ -f "$crash" ] && echo "input ($crash): $(od -An -tx1 -v "$crash" | tr -d ' \n' | head -c 2000)"
        done
    fi
done

echo "fuzz: ${passed} passed, ${#failed[@]} failed${failed[*]:+ (${failed[*]})}"
[ ${#failed[@]} -eq 0 ]
