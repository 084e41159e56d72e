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
