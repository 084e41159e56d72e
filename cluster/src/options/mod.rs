//! Call options: per-attempt timeout and retry policy, declared in layers and merged field by field.
//!
//! Each layer ([`CallOptions`]) holds only the fields it sets. [`ResolvedOptions::merge`] walks the
//! layers from the library default up to the per-call override and takes, for every field
//! separately, the value of the highest layer that sets it, remembering which layer that was. A
//! per-call `retry_after` therefore keeps the provider's budget; the seed's shallow keyword merge
//! replaced the whole retry list instead.

mod layer;
mod resolved;

pub use layer::CallOptions;
pub(crate) use resolved::refused;
pub use resolved::{
    HedgePolicy, MAX_HEDGES, MIN_HEDGE_AFTER, MIN_RETRY_PAUSE, ResolvedOptions, RetryPolicy, Source,
};
