//! Frames whose lengths lie, through the readers a node runs on a peer's bytes (the fuzz
//! targets' entry points, `cluster::fuzzing`): every seed frame with a huge length written over,
//! or into, each of its positions. None may panic, and none may allocate on the peer's word:
//! the bytes allocated stay within a small multiple of the frame's own size.
#![cfg(feature = "fuzzing")]

use std::alloc::System;

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const LIES: [&[u8]; 7] = [
    &[253, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
    &[253, 0, 0, 0, 0, 1, 0, 0, 0],
    &[252, 0xff, 0xff, 0xff, 0x7f],
    &[252, 0, 0, 0, 8],
    &[251, 0xff, 0xff],
    &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
    &[0, 0, 0, 0x40, 0, 0, 0, 0],
];

fn mutants(seed: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for at in 0..=seed.len() {
        for lie in LIES {
            let mut over = seed.to_vec();
            for (i, b) in lie.iter().enumerate() {
                if at + i < over.len() {
                    over[at + i] = *b;
                }
            }
            out.push(over);
            let mut into = seed.to_vec();
            into.splice(at..at, lie.iter().copied());
            out.push(into);
        }
        // Cut short here.
        out.push(seed[..at].to_vec());
    }
    out
}

fn check(name: &str, seeds: Vec<Vec<u8>>, read: fn(&[u8]) -> Result<(), String>) {
    let (mut tried, mut refused) = (0, 0);
    let mut worst = (0, Vec::new());
    for seed in seeds {
        assert!(read(&seed).is_ok(), "{name}: a seed reads");
        for m in mutants(&seed) {
            let region = Region::new(GLOBAL);
            let r = std::panic::catch_unwind(|| read(&m));
            let change = region.change();
            let largest = change.bytes_allocated + change.bytes_reallocated.max(0) as usize;
            let r = r.unwrap_or_else(|_| panic!("{name}: a reader panicked on {m:?}"));
            tried += 1;
            refused += usize::from(r.is_err());
            if largest > worst.0 {
                worst = (largest, m.clone());
            }
            assert!(
                largest <= 64 * m.len() + (64 << 10),
                "{name}: {largest} bytes allocated at once for a frame of {} bytes: {m:?}",
                m.len()
            );
        }
    }
    println!(
        "{name}: {tried} frames, {refused} refused, largest allocation {}",
        worst.0
    );
}

#[test]
fn lengths_that_lie_are_refused_without_allocating_on_their_word() {
    check(
        "v2 request",
        cluster::fuzzing::seed_v2_requests(),
        cluster::fuzzing::v2_request,
    );
    check(
        "v2 reply",
        cluster::fuzzing::seed_v2_replies(),
        cluster::fuzzing::v2_reply,
    );
    check("v1", cluster::fuzzing::seed_v1(), cluster::fuzzing::v1);
}
