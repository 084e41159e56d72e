//! The `#[service]` attribute of the `cluster` framework; use it as `cluster::service`.
//!
//! The attribute takes `name`, `version`, `compat`, `timeout`, `retry`, `wait_for_provider`
//! and `crate`; functions may carry `#[call(idempotent, timeout = "…", retry …,
//! wait_for_provider = "…")]`. It emits the trait rewritten so
//! providers can be spawned, a typed `{Trait}Client` and a `{Trait}Server<T>` adapter, all
//! reaching the runtime only through `cluster::__private`. When anything is wrong it emits the
//! user's trait unchanged (minus `#[call]`) and every error found, each at the offending token.
//!
//! Layout: `attr` and `options` parse the attribute arguments, `validate` checks the trait's
//! shape, `model` holds the validated service (one struct per function), `signature` renders the
//! signature strings, and `expand` emits the code (or the fallback).

mod attr;
mod duration;
mod errors;
mod expand;
mod model;
mod options;
mod signature;
mod validate;

use proc_macro::TokenStream;

/// Turns a trait into a cluster service: the trait (rewritten so providers can be spawned), a
/// typed `{Trait}Client` and a `{Trait}Server<T>` adapter for providers.
///
/// ```text
/// #[cluster::service(name = "search", version = "2.1.0", timeout = "5s",
///                    retry(after = "200ms", budget = "30s"))]
/// pub trait Search {
///     /// Finds hits.
///     #[call(idempotent)]
///     async fn search(&self, query: String, limit: u32) -> Result<Vec<Hit>, SearchError>;
///     #[call(timeout = "60s", retry = false)]
///     async fn reindex(&self, full: bool) -> u64;
/// }
/// ```
#[proc_macro_attribute]
pub fn service(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::service(args.into(), item.into()).into()
}
