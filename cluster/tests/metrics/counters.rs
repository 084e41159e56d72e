//! The counters after calls whose outcomes are known, as a scrape over mutual TLS reads them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cluster::{CallError, Node, Reason};

use crate::scrape::{self, value};
use crate::support::{Engine, Mode, SearchClient, SearchServer, authority, identity, until};

fn any_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A node on loopback TCP with the tests' CA, its metrics served at a port from the OS.
pub async fn node(name: &str, registry: &cluster::MemoryRegistry, limit: usize) -> Node {
    Node::builder()
        .identity(identity(name))
        .registry(registry.clone())
        .max_concurrent_calls(limit)
        .metrics(any_port())
        .start()
        .await
        .expect("node starts")
}

/// `node`'s metrics, scraped over mutual TLS as a member named `prometheus`.
async fn scraped(node: &Node) -> String {
    let config = scrape::client_config(Some("prometheus"));
    let (status, text) = scrape::tls(node.metrics_addr().unwrap(), node.name(), config)
        .await
        .expect("a scrape with a certificate of the CA is answered");
    assert_eq!(status, 200, "{text}");
    text
}

fn series(name: &str, labels: &str) -> String {
    format!("{name}{{{labels}}}")
}

#[tokio::test]
async fn a_scrape_over_mutual_tls_counts_every_call_attempt_retry_and_outcome_exactly() {
    let _ = authority();
    let registry = cluster::MemoryRegistry::new();
    // One call at a time on the provider: a second one is refused as overloaded.
    let provider = node("search-1", &registry, 1).await;
    let engine = Arc::new(Engine::new("search-1", Mode::Answer));
    let _registration = provider
        .serve(SearchServer::new(engine.clone()))
        .await
        .unwrap();
    let caller = node("web-1", &registry, 1024).await;
    let search = SearchClient::new(&caller);

    // Two answers, and the provider's own error.
    search.search("a".into()).await.unwrap();
    search.search("b".into()).await.unwrap();
    engine.set_mode(Mode::Fail);
    let failed = search.search("c".into()).await.unwrap_err();
    assert!(matches!(failed, CallError::App { .. }), "{failed}");
    // A call that hangs holds the provider's only place; the next is refused as overloaded,
    // retried once (`overloaded_retries`), refused again.
    engine.set_mode(Mode::Hang);
    let hanging = tokio::spawn({
        let search = search.clone();
        async move { search.search("hang".into()).await }
    });
    until("the hanging call runs", || engine.counters.running() == 1).await;
    let refused = search
        .search("d".into())
        .retry_after(Duration::from_millis(20))
        .await
        .unwrap_err();
    let CallError::Service(e) = &refused else {
        panic!("{refused}")
    };
    assert_eq!(e.reason(), Reason::Overloaded, "{refused}");
    // The caller gives the hanging call up: it is dropped here, cancelled there.
    hanging.abort();
    let _ = hanging.await;
    until("the hanging handler is stopped", || {
        engine.counters.running() == 0
    })
    .await;

    let text = scraped(&caller).await;
    let labels = r#"service="search",function="search""#;
    let outcome = |o: &str| {
        series(
            "cluster_call_outcomes_total",
            &format!(r#"{labels},outcome="{o}""#),
        )
    };
    let expected = [
        (series("cluster_calls_total", labels), 5.0),
        (outcome("ok"), 2.0),
        (outcome("app_error"), 1.0),
        (outcome("overloaded"), 1.0),
        (outcome("dropped"), 1.0),
        // Counted when a call ends: 1 + 1 + 1 for the first three, 2 for the refused one.
        (series("cluster_call_attempts_total", labels), 5.0),
        (series("cluster_call_retries_total", labels), 1.0),
        (series("cluster_call_hedges_total", labels), 0.0),
        (series("cluster_call_budget_exhausted_total", labels), 0.0),
        (series("cluster_calls_in_flight", labels), 0.0),
        // Every call that ended, the dropped one aside.
        (series("cluster_call_duration_seconds_count", labels), 4.0),
        (series("cluster_connections", r#"direction="out""#), 1.0),
        ("cluster_outlier_ejections_total".to_owned(), 0.0),
        ("cluster_registry_nodes".to_owned(), 2.0),
        ("cluster_registry_services".to_owned(), 1.0),
        ("cluster_registry_entries".to_owned(), 1.0),
        (
            series("cluster_registry_events_total", r#"kind="service_up""#),
            1.0,
        ),
    ];
    for (series, want) in &expected {
        assert_eq!(value(&text, series), Some(*want), "{series} in\n{text}");
    }
    assert_eq!(
        value(&text, &outcome("timeout")),
        None,
        "only outcomes that happened"
    );

    let text = scraped(&provider).await;
    let request = |o: &str| {
        series(
            "cluster_requests_total",
            &format!(r#"{labels},outcome="{o}""#),
        )
    };
    let expected = [
        // The two answers and the provider's own error all went back as replies.
        (request("answered"), 3.0),
        (request("cancelled"), 1.0),
        (
            series(
                "cluster_admission_refusals_total",
                &format!(r#"{labels},reason="overloaded""#),
            ),
            2.0,
        ),
        (
            series("cluster_handler_duration_seconds_count", labels),
            4.0,
        ),
        (series("cluster_connections", r#"direction="in""#), 1.0),
        (series("cluster_connections", r#"direction="out""#), 0.0),
    ];
    for (series, want) in &expected {
        assert_eq!(value(&text, series), Some(*want), "{series} in\n{text}");
    }
    // Nothing of the caller's side on the provider: no client of `search` was made there.
    assert_eq!(value(&text, &series("cluster_calls_total", labels)), None);
    // Every metric is described.
    assert!(text.contains("# HELP cluster_requests_total "), "{text}");
    assert!(
        text.contains("# TYPE cluster_handler_duration_seconds histogram"),
        "{text}"
    );

    caller.shutdown().await;
    provider.shutdown().await;
}

#[tokio::test]
async fn a_call_whose_budget_runs_out_counts_as_exhausted() {
    let registry = cluster::MemoryRegistry::new();
    let provider = node("search-1", &registry, 1024).await;
    let engine = Arc::new(Engine::new("search-1", Mode::Hang));
    let _registration = provider
        .serve(SearchServer::new(engine.clone()))
        .await
        .unwrap();
    let caller = node("web-1", &registry, 1024).await;
    // Attempts of 200 ms, 50 ms between, a budget of 480 ms: two attempts time out, and at
    // 450 ms no pause fits before the budget's end.
    let err = SearchClient::new(&caller)
        .search("slow".into())
        .timeout(Duration::from_millis(200))
        .retry_after(Duration::from_millis(50))
        .budget(Duration::from_millis(480))
        .await
        .unwrap_err();
    let text = scraped(&caller).await;
    let labels = r#"service="search",function="search""#;
    assert_eq!(
        value(
            &text,
            &series("cluster_call_budget_exhausted_total", labels)
        ),
        Some(1.0),
        "{err}\n{text}"
    );
    assert_eq!(
        value(
            &text,
            &series(
                "cluster_call_outcomes_total",
                &format!(r#"{labels},outcome="timeout""#)
            )
        ),
        Some(1.0),
        "{err}\n{text}"
    );
    caller.shutdown().await;
    provider.shutdown().await;
}
