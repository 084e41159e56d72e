//! The core's call-path tests (`cluster/tests/calls/`), unchanged, on the Eureka backend: every
//! node's registry is an [`EurekaRegistry`](cluster_discovery::backend::EurekaRegistry) whose
//! writes and reads go through a registry server's REST routes and Eureka's JSON.
#![allow(unreachable_pub)]
// The included tests write timing tables as `0 * S, 7 * S, …`.
#![allow(clippy::erasing_op, clippy::identity_op)]

mod support;

#[path = "../../../cluster/tests/calls/budget.rs"]
mod budget;
#[path = "../../../cluster/tests/calls/errors.rs"]
mod errors;
#[path = "../../../cluster/tests/calls/lookup.rs"]
mod lookup;
#[path = "../../../cluster/tests/calls/outcomes.rs"]
mod outcomes;
#[path = "../../../cluster/tests/calls/resolve.rs"]
mod resolve;
mod two_processes;
