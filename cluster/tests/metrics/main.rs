//! Metrics (issue 16): a two-node cluster on loopback, calls with known outcomes, then the
//! counters as Prometheus scrapes them, over mutual TLS; who may scrape. `docs/operations.md`,
//! "Metrics".
#![allow(unreachable_pub)]

#[path = "../support/mod.rs"]
mod support;

mod counters;
mod dashboard;
mod endpoint;
mod scrape;
