//! A small cluster doing real calls over TCP on loopback: two providers of `search`, a client,
//! a `frontend` whose handler calls `search` (a call inside a call, with its context), and a
//! rolling replacement of a provider in the middle of a call. Every connection is mutual TLS,
//! with certificates from a CA made at start and thrown away at the end (a real cluster's come
//! from `cluster-node init` and `issue`); `search` admits only the client and `web-*` nodes.
//!
//! Run with `cargo run -p examples --example demo` (`RUST_LOG=info` shows the registry events).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cluster::{CallError, Callers, MemoryRegistry, Node};
use examples::secrets::Secrets;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Hit {
    title: String,
    node: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum SearchError {
    EmptyQuery,
}

impl std::fmt::Display for SearchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the query is empty")
    }
}

/// A search service: its timeouts and retry policy travel with its registry entry.
#[cluster::service(
    name = "search",
    version = "2.1.0",
    timeout = "2s",
    retry(after = "50ms", budget = "10s")
)]
trait Search {
    /// Safe to run twice: retried after a timeout.
    #[call(idempotent)]
    async fn search(&self, query: String) -> Result<Vec<Hit>, SearchError>;
    /// Not idempotent: never run again once it may have run.
    #[call(timeout = "30s")]
    async fn reindex(&self, full: bool) -> Result<u64, SearchError>;
}

/// A frontend whose handler calls `search`: the nested call inherits its deadline and request id.
#[cluster::service(name = "frontend", version = "1.0.0", timeout = "3s")]
trait Frontend {
    #[call(idempotent)]
    async fn page(&self, query: String) -> Result<String, cluster::error::Downstream>;
}

struct Web {
    search: SearchClient,
}

impl Frontend for Web {
    async fn page(&self, query: String) -> Result<String, cluster::error::Downstream> {
        let ctx = cluster::context().expect("inside a handler");
        let hits = match self.search.search(query).await {
            Ok(hits) => hits,
            Err(CallError::App { error: e, .. }) => return Ok(format!("no page: {e}")),
            Err(e) => return Err(e.into()),
        };
        Ok(format!(
            "page for {:?} (caller {}, request {}, tenant {:?}, {:?} left), first hit from {}",
            hits[0].title,
            ctx.caller().unwrap_or("?"),
            ctx.request_id(),
            ctx.metadata().get("tenant"),
            ctx.remaining(),
            hits[0].node,
        ))
    }
}

struct Engine {
    node: String,
    reindexed: AtomicU64,
    delay: Duration,
}

/// Told when a provider starts running the deploy step's call, so that the shutdown begins
/// while it runs.
static DEPLOY_CALL_RUNS: tokio::sync::Notify = tokio::sync::Notify::const_new();

impl Search for Engine {
    async fn search(&self, query: String) -> Result<Vec<Hit>, SearchError> {
        if query.is_empty() {
            return Err(SearchError::EmptyQuery);
        }
        if query == "deploy" {
            DEPLOY_CALL_RUNS.notify_one();
        }
        tokio::time::sleep(self.delay).await;
        Ok(vec![Hit {
            title: format!("{query}: the book"),
            node: self.node.clone(),
        }])
    }

    async fn reindex(&self, _full: bool) -> Result<u64, SearchError> {
        Ok(self.reindexed.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

async fn provider(
    secrets: &Secrets,
    registry: &MemoryRegistry,
    name: &str,
    delay: Duration,
) -> Node {
    let node = Node::builder()
        .identity(secrets.identity(name))
        .registry(registry.clone())
        .start()
        .await
        .expect("node starts");
    let engine = Engine {
        node: name.to_owned(),
        reindexed: AtomicU64::new(0),
        delay,
    };
    let _registration = node
        .serve(Callers::only(["client", "web-*"]).may_call(SearchServer::new(engine)))
        .await
        .expect("service registers");
    node
}

#[tokio::main]
async fn main() {
    let _logs = examples::init_logs();
    let secrets = Secrets::throwaway("demo");
    let registry = MemoryRegistry::new();
    let one = provider(&secrets, &registry, "search-1", Duration::from_millis(100)).await;
    let two = provider(&secrets, &registry, "search-2", Duration::from_millis(100)).await;
    let client_node = Node::builder()
        .identity(secrets.identity("client"))
        .registry(registry.clone())
        .start()
        .await
        .unwrap();
    let search = SearchClient::new(&client_node);

    println!(
        "A cluster on loopback: every connection is mutual TLS, with certificates of a CA made for this run.\n"
    );
    println!("What every client reads from the registry entry of `search`:");
    for f in &SearchClient::description().functions {
        println!(
            "  {}  idempotent: {}  options: {}",
            f.signature, f.idempotent, f.options
        );
    }
    println!(
        "  service-level options: {}\n",
        SearchClient::description().options
    );

    // Calls spread over both replicas.
    for query in ["rust", "tokio", "tarpc", "serde"] {
        let hits = search.search(query.into()).await.expect("served");
        println!(
            "search({query:?}) -> {:?} from {}",
            hits[0].title, hits[0].node
        );
    }

    // A call inside a call: the frontend's handler calls search with what its caller left it.
    let web = Node::builder()
        .identity(secrets.identity("web-1"))
        .registry(registry.clone())
        .start()
        .await
        .unwrap();
    let _frontend = web
        .serve(FrontendServer::new(Web {
            search: SearchClient::new(&web),
        }))
        .await
        .expect("frontend registers");
    let page = FrontendClient::new(&client_node)
        .page("rust".into())
        .timeout(Duration::from_secs(1))
        .metadata("tenant", "acme")
        .await
        .expect("a page");
    println!("frontend.page(\"rust\") -> {page}");

    // The provider's own error comes back typed, and is never retried.
    match search.search(String::new()).await {
        Err(CallError::App { error: e, .. }) => println!("search(\"\") -> the provider said: {e}"),
        other => panic!("expected the provider's error, got {other:?}"),
    }

    // A member of the cluster that search does not admit: refused before the handler runs.
    let batch = Node::builder()
        .identity(secrets.identity("batch-1"))
        .registry(registry.clone())
        .start()
        .await
        .unwrap();
    match SearchClient::new(&batch).search("rust".into()).await {
        Err(e) => println!("search(\"rust\") from batch-1 -> {e}"),
        Ok(_) => panic!("batch-1 is not among search's callers"),
    }
    batch.shutdown().await;

    // A per-call override: one attempt, 1 s.
    let n = search
        .reindex(true)
        .timeout(Duration::from_secs(1))
        .no_retry()
        .await
        .expect("reindexed");
    println!("reindex(true) -> {n}");

    // A rolling replacement. search-1 and search-2 shut down while a call runs on one of them: a
    // shutdown drains, so that call is answered by the node it reached. A call made while no
    // provider is left re-resolves before each attempt, and with `wait_for_provider` it waits
    // for the replacement, search-3, within its budget.
    let in_flight = tokio::spawn({
        let search = search.clone();
        async move { search.search("deploy".into()).await }
    });
    DEPLOY_CALL_RUNS.notified().await; // the call runs on search-1 or -2
    tokio::join!(one.shutdown(), two.shutdown());
    let hits = in_flight.await.unwrap().expect("a shutdown drains");
    println!(
        "search(\"deploy\") in flight while both providers shut down -> served by {} (drained)",
        hits[0].node
    );
    let waiting = tokio::spawn({
        let search = search.clone();
        async move {
            search
                .search("after".into())
                .wait_for_provider(Duration::from_secs(5))
                .await
        }
    });
    let three = provider(&secrets, &registry, "search-3", Duration::from_millis(20)).await;
    let hits = waiting.await.unwrap().expect("the replacement serves it");
    println!(
        "search(\"after\") made with no provider left -> served by {} (the replacement)",
        hits[0].node
    );

    // With every provider gone and retries off, the error says what happened.
    three.shutdown().await;
    let err = search.reindex(false).no_retry().await.unwrap_err();
    println!("\nreindex(false) with no provider and no retry:\n{err}");

    web.shutdown().await;
    client_node.shutdown().await;
}
