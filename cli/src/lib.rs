//! `cluster`, the command line of a running cluster (`src/bin/cluster/`), and what it is made
//! of that is worth testing on its own. JSON in and out of a call without the service's Rust
//! types is the library's (`cluster::json`), shared with the discovery gateway.
//! `docs/operations.md` walks through the commands.

pub mod etcd;
pub mod secrets;
