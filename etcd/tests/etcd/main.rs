//! The etcd backend against a real etcd: the deploy table, and etcd's own failures.
#![allow(unreachable_pub)]

#[path = "../support/mod.rs"]
mod support;

#[path = "../../../cluster/tests/registry/deploys.rs"]
mod deploys;
mod events;
mod failures;
mod names;
mod outside;
mod secure;
