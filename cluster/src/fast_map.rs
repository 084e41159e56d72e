//! The hash map of the call path's maps: foldhash instead of the standard library's SipHash.
//!
//! A call looked up a peer, a pooled connection, a request id and a caller in SipHash maps,
//! about 2 k instructions of the 41 k a call cost (`docs/benchmarks.md`). foldhash is several
//! times faster on such short keys and still seeded at random per map, so a peer that chooses
//! keys (request ids, a caller's name) cannot aim them at one bucket from outside; and every
//! map a peer can grow has a bound of its own (`docs/reliability.md`), which caps what a
//! collision could cost.

use std::collections::HashMap;

/// A `HashMap` with foldhash's seeded hasher.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
