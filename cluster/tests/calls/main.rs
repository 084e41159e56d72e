//! The call path, step by step (docs/calls.md).
#![allow(unreachable_pub)]

#[path = "../support/raw_peer.rs"]
mod raw_peer;
#[path = "../support/mod.rs"]
mod support;

mod accrual;
mod admission_shares;
mod at_most_once;
mod at_most_once_bounds;
mod budget;
mod compat;
mod connect_race;
mod encoded_edges;
mod errors;
mod handler_panics;
mod hedge;
mod hedge_race;
mod large_frames;
mod lookup;
mod outcomes;
mod resolve;
mod shared_parts;
mod stalled;
mod throttle;
