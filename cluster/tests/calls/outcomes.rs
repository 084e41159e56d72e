//! Step 5 over real TCP: what is retried, what is not, and what each failure looks like.

use std::sync::Arc;
use std::time::Duration;

use cluster::registry::{Registry, ServiceEntry};
use cluster::{CallError, Reason, RpcErrorKind};

use crate::support::{Cluster, Mode, SearchClient, SearchError};

#[tokio::test]
async fn the_providers_own_error_is_returned_and_never_retried() {
    let cluster = Cluster::tcp();
    let (_p, engine) = cluster.provider("search-1", Mode::Fail).await;
    let client = SearchClient::new(&cluster.node("client").await);
    let err = client.search("rust".into()).await.unwrap_err();
    match &err {
        CallError::App {
            error: SearchError::BadQuery(why),
            ..
        } => assert_eq!(why, "rejected by the provider"),
        other => panic!("expected the provider's error, got {other:?}"),
    }
    // Named like every other error: the call and the provider that answered.
    let said = err.to_string();
    assert!(
        said.starts_with("The call search.search/1 to search-1 ("),
        "{said}"
    );
    assert!(
        said.ends_with("returned an error: bad query: rejected by the provider"),
        "{said}"
    );
    let provider = err.report().provider.as_ref().expect("the provider");
    assert_eq!(provider.node, "search-1");
    let attempts = &err.report().attempts;
    assert_eq!(attempts.len(), 1, "one attempt: {attempts:?}");
    assert_eq!(attempts[0].outcome, "answered", "the one that answered");
    assert_eq!(
        engine.counters.started(),
        1,
        "an application error is an answer, not a failure"
    );
}

#[tokio::test]
async fn a_panic_is_a_service_error_with_its_message_and_the_node_keeps_serving() {
    let cluster = Cluster::tcp();
    let (_p, engine) = cluster.provider("search-1", Mode::Answer).await;
    let client = SearchClient::new(&cluster.node("client").await);
    let err = client.crash("index corrupted".into()).await.unwrap_err();
    let CallError::Service(e) = &err else {
        panic!("expected a ServiceError, got {err:?}")
    };
    assert_eq!(e.reason(), Reason::Panicked);
    assert!(e.detail().contains("index corrupted"), "{}", e.detail());
    assert_eq!(
        e.report().attempts.len(),
        1,
        "a panic is never retried, even for an idempotent function"
    );
    assert_eq!(engine.counters.started(), 1);
    assert!(err.may_have_run());
    // The same connection and node still serve.
    assert_eq!(
        client.search("rust".into()).await.unwrap()[0].title,
        "rust from search-1"
    );
}

#[tokio::test]
async fn oversized_arguments_fail_before_sending_and_oversized_replies_are_refused_cleanly() {
    let cluster = Cluster::tcp();
    let provider = cluster_node_with_frame(&cluster, "search-1", 64 * 1024).await;
    let engine = Arc::new(crate::support::Engine::new("search-1", Mode::Answer));
    let _r = provider
        .serve(crate::support::SearchServer::new(engine.clone()))
        .await
        .unwrap();
    let client_node = cluster_node_with_frame(&cluster, "client", 64 * 1024).await;
    let client = SearchClient::new(&client_node);

    let err = client.echo(vec![7; 100_000]).await.unwrap_err();
    let CallError::Rpc(e) = &err else {
        panic!("expected an RpcError, got {err:?}")
    };
    assert_eq!(e.kind(), RpcErrorKind::TooLarge);
    assert!(e.report().attempts.is_empty(), "nothing was sent");

    // The provider's reply would not fit its frame: a typed error, and the connection survives.
    let err = client.repeat(1, 100_000).await.unwrap_err();
    let CallError::Rpc(e) = &err else {
        panic!("expected an RpcError, got {err:?}")
    };
    assert_eq!(e.kind(), RpcErrorKind::ReplyTooLarge);
    assert!(err.may_have_run(), "the function ran");
    assert_eq!(
        e.report().attempts.len(),
        1,
        "the function ran; running it again cannot help"
    );
    assert_eq!(client.repeat(1, 1000).await.unwrap().len(), 1000);
}

async fn cluster_node_with_frame(cluster: &Cluster, name: &str, max_frame: usize) -> cluster::Node {
    cluster::Node::builder()
        .name(name)
        .identity(crate::support::identity(name))
        .registry(cluster.registry.clone())
        .max_frame(max_frame)
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn malformed_and_oversized_frames_cost_their_connection_not_the_node() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cluster = Cluster::tcp();
    let (provider, _engine) = cluster.provider("search-1", Mode::Answer).await;
    let client = SearchClient::new(&cluster.node("client").await);

    let frames: [(&[u8], bool); 3] = [
        (b"\x00\x00\x00\x05hello", false),   // a frame that is no request
        (b"\xff\xff\xff\xff", false),        // a length far beyond the limit
        (b"\x00\x00\x00\x10\x00\x01", true), // a frame cut short, then the peer leaves
    ];
    for (frame, leave) in frames {
        let mut raw = tokio::net::TcpStream::connect(provider.addr())
            .await
            .unwrap();
        raw.write_all(frame).await.unwrap();
        if leave {
            raw.shutdown().await.unwrap();
        }
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(10), raw.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "the node closes a connection that sent garbage: {read:?}"
        );
        assert_eq!(
            client.search("rust".into()).await.unwrap().len(),
            1,
            "and keeps serving everyone else"
        );
    }
}

#[tokio::test]
async fn a_node_that_does_not_host_the_service_refuses_it_with_a_typed_error() {
    let cluster = Cluster::tcp();
    let empty = cluster.node("empty").await;
    // A stale entry: the registry says `empty` provides search; it does not.
    let description = Arc::new(SearchClient::description().clone());
    cluster
        .registry
        .register(ServiceEntry::new(empty.info().clone(), description))
        .await
        .unwrap();
    let client = SearchClient::new(&cluster.node("client").await);
    let err = client.reindex(true).no_retry().await.unwrap_err();
    let CallError::Service(e) = &err else {
        panic!("expected a ServiceError, got {err:?}")
    };
    assert_eq!(e.reason(), Reason::NoService);
    assert_eq!(e.report().attempts[0].outcome, "refused: no service");
    assert!(!err.may_have_run());

    // Refused before running: retried for any function, and a real provider gets the call.
    let (_p, engine) = cluster.provider("search-1", Mode::Answer).await;
    assert_eq!(client.reindex(true).await.unwrap(), 42);
    assert_eq!(engine.counters.started(), 1);
}

/// Two builds of the same service: 2.1 added a defaulted field to a result type.
mod v2_0 {
    #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
    pub struct Hit {
        pub id: u64,
        pub title: String,
    }
    #[cluster::service(name = "docs", version = "2.0.0")]
    pub trait Docs {
        #[call(idempotent)]
        async fn get(&self, id: u64) -> Hit;
        #[call(idempotent)]
        async fn put(&self, hit: Hit) -> u64;
    }
}

mod v2_1 {
    #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
    pub struct Hit {
        pub id: u64,
        pub title: String,
        #[serde(default)]
        pub score: Option<f32>,
    }
    #[cluster::service(name = "docs", version = "2.1.0")]
    pub trait Docs {
        #[call(idempotent)]
        async fn get(&self, id: u64) -> Hit;
        #[call(idempotent)]
        async fn put(&self, hit: Hit) -> u64;
    }
}

struct DocsV20;
impl v2_0::Docs for DocsV20 {
    async fn get(&self, id: u64) -> v2_0::Hit {
        v2_0::Hit {
            id,
            title: "from 2.0".into(),
        }
    }
    async fn put(&self, hit: v2_0::Hit) -> u64 {
        hit.id
    }
}

struct DocsV21;
impl v2_1::Docs for DocsV21 {
    async fn get(&self, id: u64) -> v2_1::Hit {
        v2_1::Hit {
            id,
            title: "from 2.1".into(),
            score: Some(0.5),
        }
    }
    async fn put(&self, hit: v2_1::Hit) -> u64 {
        hit.id + hit.score.map_or(0, |_| 1000)
    }
}

#[tokio::test]
async fn a_minor_version_may_add_a_defaulted_field_without_breaking_either_side() {
    let cluster = Cluster::tcp();
    let client_node = cluster.node("client").await;

    // A 2.0 client and a 2.1 provider: the unknown field is skipped.
    let new = cluster.node("new").await;
    let r = new.serve(v2_1::DocsServer::new(DocsV21)).await.unwrap();
    let old_client = v2_0::DocsClient::new(&client_node);
    assert_eq!(
        old_client.get(7).await.unwrap(),
        v2_0::Hit {
            id: 7,
            title: "from 2.1".into()
        }
    );
    assert_eq!(
        old_client
            .put(v2_0::Hit {
                id: 7,
                title: "t".into()
            })
            .await
            .unwrap(),
        7,
        "score defaults to None"
    );
    r.deregister().await.unwrap();

    // A 2.1 client that accepts 2.0 and a 2.0 provider: the missing field takes its default.
    let old = cluster.node("old").await;
    let _r = old.serve(v2_0::DocsServer::new(DocsV20)).await.unwrap();
    let new_client = v2_1::DocsClient::new(&client_node).require("^2.0".parse().unwrap());
    assert_eq!(
        new_client.get(8).await.unwrap(),
        v2_1::Hit {
            id: 8,
            title: "from 2.0".into(),
            score: None
        }
    );
    let hit = v2_1::Hit {
        id: 8,
        title: "t".into(),
        score: Some(1.0),
    };
    assert_eq!(
        new_client.put(hit).await.unwrap(),
        8,
        "the 2.0 provider skipped the field it does not know"
    );
}

#[tokio::test]
async fn a_broken_pooled_connection_is_reestablished_within_the_same_attempt() {
    let cluster = Cluster::tcp();
    let (first, _engine) = cluster.provider("search-1", Mode::Answer).await;
    let client = SearchClient::new(&cluster.node("client").await);
    assert_eq!(client.reindex(true).no_retry().await.unwrap(), 42);
    // The provider restarts on the same address: the client's pooled connection is dead.
    let addr = first.addr();
    first.kill().await;
    let again = cluster::Node::builder()
        .name("search-1")
        .identity(crate::support::identity("search-1"))
        .listen(addr)
        .registry(cluster.registry.clone())
        .start()
        .await
        .unwrap();
    let engine = Arc::new(crate::support::Engine::new("search-1", Mode::Answer));
    let _r = again
        .serve(crate::support::SearchServer::new(engine.clone()))
        .await
        .unwrap();
    // Give the client's connection task a moment to read the close (on a multi-threaded
    // runtime it runs concurrently; here it runs when this task waits). Once it has, the dead
    // connection is noticed before a request is handed to it, and a new one takes the request
    // within the same attempt: no retry, safe for a non-idempotent function.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert_eq!(client.reindex(true).no_retry().await.unwrap(), 42);
    assert_eq!(engine.counters.started(), 1);
}
