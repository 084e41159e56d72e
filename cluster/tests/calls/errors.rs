//! The errors read like the seed's: the call, the reason with a one-line explanation, the
//! service, and every attempt. docs/errors.md shows these same messages.

use std::time::Duration;

use crate::support::{Cluster, Mode, SearchClient};

async fn rendered() -> (String, String, String) {
    let cluster = Cluster::memory();
    let (provider, _engine) = cluster.provider("search-1", Mode::Hang).await;
    let client = SearchClient::new(&cluster.node("client").await);
    let timeout = client.search("rust".into()).await.unwrap_err().to_string();
    let panicked = client
        .crash("index corrupted".into())
        .await
        .unwrap_err()
        .to_string();
    provider.shutdown().await;
    let none = client
        .search("rust".into())
        .wait_for_provider(Duration::from_secs(5))
        .budget(Duration::from_secs(5))
        .await
        .unwrap_err()
        .to_string();
    (timeout, panicked, none)
}

fn documented(block: &str) {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/errors.md"))
        .expect("docs/errors.md");
    assert!(
        doc.contains(block),
        "docs/errors.md must show this message as the code renders it:\n{block}"
    );
}

#[tokio::test(start_paused = true)]
async fn error_messages_are_structured_and_documented() {
    let (timeout, panicked, none) = rendered().await;
    assert!(
        timeout.starts_with("The call search.search/1 failed: timeout\n"),
        "{timeout}"
    );
    assert!(
        timeout.contains("Attempts: 3 in 20s (budget 21s, set by the provider's service options)"),
        "{timeout}"
    );
    assert!(
        panicked.contains("panic message: index corrupted"),
        "{panicked}"
    );
    assert!(none.contains("failed: no service"), "{none}");
    for message in [&timeout, &panicked, &none] {
        documented(message);
    }
}

fn rpc<E: std::fmt::Debug>(e: cluster::CallError<E>) -> cluster::RpcError {
    match e {
        cluster::CallError::Rpc(e) => e,
        other => panic!("expected an RpcError, got {other:?}"),
    }
}

/// `reindex` as a build that declares it idempotent would: its provider's entry does not.
mod eager {
    use crate::support::SearchError;
    #[cluster::service(name = "search", version = "2.1.0")]
    pub trait Search {
        #[call(idempotent)]
        async fn reindex(&self, full: bool) -> Result<u64, SearchError>;
    }
}

#[tokio::test(start_paused = true)]
async fn a_timeout_not_retried_because_the_function_is_not_idempotent_says_so() {
    const S: Duration = Duration::from_secs(1);
    let cluster = Cluster::memory();
    let (_provider, engine) = cluster.provider("search-1", Mode::Hang).await;
    let node = cluster.node("client").await;
    let client = SearchClient::new(&node);
    let said = "not retried: it may have run, and `reindex` is declared neither #[call(idempotent)] nor #[call(at_most_once)] in its trait";

    // The numbers: 500 ms attempts in a 3 s budget, one attempt and no word of why.
    let call = client
        .reindex(true)
        .timeout(Duration::from_millis(500))
        .budget(3 * S);
    let e = rpc(call.await.unwrap_err());
    assert_eq!(e.kind(), cluster::RpcErrorKind::Timeout);
    assert_eq!(e.report().attempts.len(), 1);
    assert_eq!(e.hint(), Some(said));
    let message = e.to_string();
    assert!(
        message.contains(&format!(
            "  every attempt ran out of time; the function may or may not have run\n  {said}\n"
        )),
        "{message}"
    );
    documented(&message);

    // No word where a retry would not have followed anyway: the budget is spent by the
    // attempt, retries are off, or the function is idempotent and was retried.
    let spent = rpc(client.reindex(true).budget(6 * S).await.unwrap_err());
    assert_eq!(
        (spent.kind(), spent.hint()),
        (cluster::RpcErrorKind::Timeout, None)
    );
    let off = rpc(client.reindex(true).no_retry().await.unwrap_err());
    assert_eq!(off.hint(), None, "{off}");
    let retried = rpc(client.search("rust".into()).await.unwrap_err());
    assert_eq!(retried.report().attempts.len(), 3);
    assert_eq!(retried.hint(), None, "{retried}");

    // The client's build says idempotent, the provider's entry does not: the entry is named.
    let eager = eager::SearchClient::new(&node);
    let e = rpc(eager.reindex(true).await.unwrap_err());
    assert_eq!(e.report().attempts.len(), 1);
    assert_eq!(
        e.hint(),
        Some(
            "not retried: it may have run, and the provider's entry (2.1.0 on search-1) does not declare `reindex` idempotent"
        )
    );
    assert_eq!(engine.counters.started(), 1 + 1 + 1 + 3 + 1);
}
