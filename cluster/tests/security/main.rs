//! The attacks of issue 10, each as a test that now fails for the attacker: over real TCP and
//! UDP on loopback (separate processes: `examples/tests/processes.rs`). `docs/security.md`
//! has the table.
#![allow(unreachable_pub)]

#[path = "../support/mod.rs"]
mod support;

mod gossip;
mod rpc;
