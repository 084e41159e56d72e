//! Our clients: the Static / Dns / Discovery resolvers and the registrar.
#![allow(unreachable_pub)]

#[path = "../support/mod.rs"]
mod support;

mod deltas;
mod registrar;
mod resolvers;
mod restart;
mod single_flight;
