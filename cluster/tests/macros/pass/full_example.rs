// The contract's example: every service- and function-level key, a provider, a server and a
// client whose call is built (not awaited: there is no cluster to reach here).
#![deny(warnings)]
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
pub struct Hit {
    pub id: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum SearchError {
    BadQuery,
}

#[cluster::service(
    name = "search",
    version = "2.1.0",
    timeout = "5s",
    retry(after = "200ms", budget = "30s")
)]
pub trait Search {
    /// Finds hits.
    #[call(idempotent)]
    async fn search(&self, query: String, limit: u32) -> Result<Vec<Hit>, SearchError>;
    #[call(timeout = "60s", retry = false)]
    async fn reindex(&self, full: bool) -> u64;
    async fn ping(&self);
}

/// Every key once more, to check each builder method the expansion emits.
#[cluster::service(
    name = "tuning",
    version = "1.0.0-rc.1+build.5",
    compat = ">=0.9, <2",
    crate = "::cluster",
    retry = true
)]
pub trait Tuning {
    #[call(retry(
        after = "10ms",
        budget = "1m",
        max_after = "1h",
        factor = 1.5,
        jitter = false
    ))]
    async fn tune(&self, level: u8) -> std::result::Result<(), String>;
    #[call(retry(factor = 2, jitter = true), idempotent, timeout = "250ms")]
    async fn reset(&self) -> Option<u8>;
    #[call(at_most_once, retry(ratio = 0.1, window = "30s", floor = 2))]
    async fn charge(&self, cents: u64) -> u64;
    #[call(idempotent, hedge(after = "20ms", max = 2))]
    async fn quote(&self, item: String) -> u64;
}

/// Hedging declared for the whole service: it applies to its idempotent functions only.
#[cluster::service(name = "hedged", version = "1.0.0", hedge(after = "5ms", max = 1))]
pub trait Hedged {
    #[call(idempotent)]
    async fn read(&self, key: String) -> Option<String>;
}

pub struct Engine;

impl Search for Engine {
    async fn search(&self, query: String, limit: u32) -> Result<Vec<Hit>, SearchError> {
        if query.is_empty() {
            return Err(SearchError::BadQuery);
        }
        Ok((0..u64::from(limit)).map(|id| Hit { id }).collect())
    }

    async fn reindex(&self, full: bool) -> u64 {
        u64::from(full)
    }

    async fn ping(&self) {}
}

fn build(node: &cluster::__private::Node) {
    let client = SearchClient::new(node);
    let _call: cluster::__private::Call<Vec<Hit>, SearchError> =
        client.search("rust".to_owned(), 10);
    let _call: cluster::__private::Call<u64, std::convert::Infallible> = client.reindex(true);
    let _call = client.clone().ping();
    let _tuning = TuningClient::new(node).tune(3);
}

fn assert_provide<P: cluster::__private::Provide>(_: &P) {}

fn main() {
    let server = SearchServer::new(Engine);
    assert_provide(&server);
    let _shared = SearchServer::from_arc(std::sync::Arc::new(Engine));
    let _ = build;

    let _: &'static cluster::__private::ServiceDescription = SearchClient::description();
    let _ = TuningClient::description();
}
