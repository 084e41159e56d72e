//! The call path, step by step (docs/calls.md).
#![allow(unreachable_pub)]

#[path = "../support/mod.rs"]
mod support;

mod accrual;
mod budget;
mod compat;
mod errors;
mod lookup;
mod outcomes;
mod resolve;
