//! The core's call-path tests (`cluster/tests/calls/`), unchanged, on the etcd backend: every
//! cluster's registry is an [`EtcdRegistry`](cluster_etcd::EtcdRegistry) on a real etcd that
//! the test started.
#![allow(unreachable_pub)]
// The included tests write timing tables as `0 * S, 7 * S, …`.
#![allow(clippy::erasing_op, clippy::identity_op)]

#[path = "../support/mod.rs"]
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
