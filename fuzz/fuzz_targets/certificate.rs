#![no_main]
//! `cluster::fuzzing::certificate`: see its doc, and README.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // An error is the right answer to bad input; a panic (a crash) is the bug.
    let _ = cluster::fuzzing::certificate(data);
});
