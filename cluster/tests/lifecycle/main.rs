//! Provider lifecycle: health that is checked, admission control, draining.
#![allow(unreachable_pub)]

#[path = "../support/mod.rs"]
mod support;

mod drain;
mod health;
