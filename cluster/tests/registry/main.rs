//! The gossip registry over real UDP (gossip) and TCP (calls) on loopback.
#![allow(unreachable_pub)]

#[path = "../support/mod.rs"]
mod support;

mod authorship;
mod datagrams;
mod deploys;
mod forge;
mod gossip;
mod hostile;
mod limits;
mod liveness;
mod members;
mod v2_attacks;
