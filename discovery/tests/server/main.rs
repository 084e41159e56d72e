//! The registry server: routes and shapes, leases, bad input, peers, the dashboard.
#![allow(unreachable_pub)]

#[path = "../support/mod.rs"]
mod support;

mod bad_input;
mod dashboard;
mod leases;
mod peers;
mod routes;
mod security;
