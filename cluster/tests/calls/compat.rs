//! Step 1 across builds: a provider is eligible when it has the function with a shape the
//! client can call, whatever its minor version and however its types are written
//! (docs/compatibility.md).

use std::collections::HashMap;
use std::sync::Arc;

use cluster::{CallError, Reason};
use serde::{Deserialize, Serialize};

use crate::support::{Cluster, Hit, Load, Mode, SearchClient, SearchError, until};

/// 2.0 of the shared `search` service (2.1 in `support`): `search` and `echo` as 2.1 has them,
/// none of 2.1's other functions.
mod v2_0 {
    use crate::support::{Hit, SearchError};
    #[cluster::service(name = "search", version = "2.0.0")]
    pub trait Search {
        #[call(idempotent)]
        async fn search(&self, query: String) -> Result<Vec<Hit>, SearchError>;
        #[call(idempotent)]
        async fn echo(&self, bytes: Vec<u8>) -> Vec<u8>;
    }
}

struct Old(&'static str);

impl v2_0::Search for Old {
    async fn search(&self, query: String) -> Result<Vec<Hit>, SearchError> {
        Ok(vec![Hit {
            id: 20,
            title: format!("{query} from {}", self.0),
        }])
    }

    async fn echo(&self, bytes: Vec<u8>) -> Vec<u8> {
        bytes
    }
}

fn service_error<E: std::fmt::Debug>(e: CallError<E>) -> cluster::ServiceError {
    match e {
        CallError::Service(e) => e,
        other => panic!("expected a ServiceError, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_rolling_rollback_from_2_1_to_2_0_fails_no_call_of_what_both_have() {
    let cluster = Cluster::memory();
    let mut new = Vec::new();
    for i in 0..3 {
        new.push(cluster.provider(&format!("new-{i}"), Mode::Answer).await);
    }
    let client = SearchClient::new(&cluster.node("client").await);
    let load = Load::start(client.clone());
    load.progress(10).await;
    let mut old = Vec::new();
    // Replica by replica: the 2.0 pod starts, then the 2.1 pod it replaces drains and leaves.
    for (i, (node, _)) in new.iter().enumerate() {
        let name: &'static str = ["old-0", "old-1", "old-2"][i];
        let pod = cluster.node(name).await;
        let _registration = pod.serve(v2_0::SearchServer::new(Old(name))).await.unwrap();
        old.push(pod);
        load.progress(10).await;
        // A function only 2.1 has goes to 2.1 providers only: without retries, one sent to a
        // 2.0 provider would fail.
        let left: usize = new[i..].iter().map(|(_, e)| e.counters.started()).sum();
        for _ in 0..6 {
            assert_eq!(client.reindex(true).no_retry().await.unwrap(), 42);
        }
        let now: usize = new[i..].iter().map(|(_, e)| e.counters.started()).sum();
        assert!(now >= left + 6, "reindex reached the 2.1 providers left");
        node.shutdown().await;
        load.progress(10).await;
    }
    let (ok, failed) = load.finish().await;
    assert!(failed.is_empty(), "{} failed: {failed:?}", failed.len());
    assert!(ok >= 70, "{ok}");
    let hits = client.search("rust".into()).no_retry().await.unwrap();
    assert!(hits[0].title.starts_with("rust from old-"), "{hits:?}");

    // No 2.1 provider is left: `reindex` is NoFunction, saying what is missing.
    let e = service_error(client.reindex(true).no_retry().await.unwrap_err());
    assert_eq!(e.reason(), Reason::NoFunction);
    assert_eq!(
        e.detail(),
        "wanted `reindex(bool) -> Result<u64, SearchError>`; no provider in range has `reindex`; not waited for: the call's wait_for_provider is 0"
    );
}

/// The same service written with an alias on one side and the type it names on the other.
mod tags_client {
    pub type Tags = std::collections::HashMap<String, u64>;
    #[cluster::service(name = "tags", version = "1.0.0")]
    pub trait Count {
        async fn count(&self, t: Tags) -> u64;
    }
}

mod tags_provider {
    use std::collections::HashMap;
    #[cluster::service(name = "tags", version = "1.0.0")]
    pub trait Count {
        async fn count(&self, t: HashMap<String, u64>) -> u64;
    }
}

struct Counter;

impl tags_provider::Count for Counter {
    async fn count(&self, t: HashMap<String, u64>) -> u64 {
        t.values().sum()
    }
}

#[tokio::test(start_paused = true)]
async fn an_alias_calls_a_provider_that_writes_the_type_it_names() {
    let (wanted, provided) = (
        &tags_client::CountClient::description().functions[0],
        &tags_provider::CountClient::description().functions[0],
    );
    assert_eq!(wanted.signature, "count(Tags) -> u64");
    assert_eq!(provided.signature, "count(HashMap<String, u64>) -> u64");
    assert_eq!(wanted.shape, provided.shape);
    assert_eq!(wanted.hash(), provided.hash());

    let cluster = Cluster::memory();
    let node = cluster.node("p").await;
    let _r = node
        .serve(tags_provider::CountServer::new(Counter))
        .await
        .unwrap();
    let client = tags_client::CountClient::new(&cluster.node("client").await);
    let tags = HashMap::from([("a".to_owned(), 2), ("b".to_owned(), 3)]);
    assert_eq!(client.count(tags).await.unwrap(), 5);
}

/// 2.0 providers whose `Hit` differs from the client's: one more optional field (compatible),
/// `id` a string (not).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScoredHit {
    pub id: u64,
    pub title: String,
    pub score: Option<f32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TextIdHit {
    pub id: String,
    pub title: String,
}

mod scored {
    #[cluster::service(name = "search", version = "2.0.0")]
    pub trait Search {
        #[call(idempotent)]
        async fn search(
            &self,
            query: String,
        ) -> Result<Vec<super::ScoredHit>, crate::support::SearchError>;
    }
}

mod text_id {
    #[cluster::service(name = "search", version = "2.0.0")]
    pub trait Search {
        #[call(idempotent)]
        async fn search(
            &self,
            query: String,
        ) -> Result<Vec<super::TextIdHit>, crate::support::SearchError>;
    }
}

impl scored::Search for Old {
    async fn search(&self, query: String) -> Result<Vec<ScoredHit>, SearchError> {
        Ok(vec![ScoredHit {
            id: 7,
            title: query,
            score: Some(0.5),
        }])
    }
}

impl text_id::Search for Old {
    async fn search(&self, query: String) -> Result<Vec<TextIdHit>, SearchError> {
        Ok(vec![TextIdHit {
            id: "7".into(),
            title: query,
        }])
    }
}

#[tokio::test(start_paused = true)]
async fn an_added_optional_field_is_called_and_a_changed_type_is_not() {
    let cluster = Cluster::memory();
    let node = cluster.node("text-id").await;
    let _n = node
        .serve(text_id::SearchServer::new(Old("text-id")))
        .await
        .unwrap();
    let client = SearchClient::new(&cluster.node("client").await);
    let e = service_error(client.search("rust".into()).no_retry().await.unwrap_err());
    assert_eq!(e.reason(), Reason::NoFunction);
    assert_eq!(
        e.detail(),
        "wanted `search(String) -> Result<Vec<Hit>, SearchError>`; providers have \
         `search(String) -> Result<Vec<super::TextIdHit>, crate::support::SearchError>` \
         (2.0.0 on text-id: the result, variant `Ok`, the items, field `id`: \
         the client has u64, the provider str); not waited for: the call's wait_for_provider is 0"
    );

    let node = cluster.node("scored").await;
    let _s = node
        .serve(scored::SearchServer::new(Old("scored")))
        .await
        .unwrap();
    for _ in 0..4 {
        let hits = client.search("rust".into()).no_retry().await.unwrap();
        assert_eq!(
            hits,
            [Hit {
                id: 7,
                title: "rust".into()
            }]
        );
    }
}

/// A registry entry of a build from before shapes (no `shape`): the client compares the
/// signature texts and sends the text's hash, which the provider still accepts.
#[tokio::test(start_paused = true)]
async fn an_entry_without_shapes_is_called_by_its_signature_text() {
    use cluster::Registry;
    let cluster = Cluster::memory();
    let (_p, engine) = cluster.provider("p", Mode::Answer).await;
    let entry = cluster.registry.lookup("search")[0].clone();
    let mut bare = (*entry.description).clone();
    for function in &mut bare.functions {
        function.shape = None;
    }
    let bare = cluster::registry::ServiceEntry::new(entry.node.clone(), Arc::new(bare));
    cluster.registry.register(bare).await.unwrap();
    let client = SearchClient::new(&cluster.node("client").await);
    until("the entry without shapes is read", || {
        client_sees_no_shape(&cluster.registry)
    })
    .await;
    let hits = client.search("rust".into()).no_retry().await.unwrap();
    assert_eq!(hits[0].title, "rust from p");
    assert_eq!(engine.counters.started(), 1);
}

fn client_sees_no_shape(registry: &cluster::MemoryRegistry) -> bool {
    use cluster::Registry;
    registry
        .lookup("search")
        .iter()
        .all(|e| e.description.functions.iter().all(|f| f.shape.is_none()))
}

/// An inventory whose error enum has several variants, in two builds: one variant's field is a
/// `u32` in the client's, a string in the provider's, under the same names (so the signature
/// texts are equal). The shape sees into the enum, so the client is told which field differs
/// instead of failing to decode the provider's `Err`.
mod stock {
    pub mod client {
        use serde::{Deserialize, Serialize};

        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        pub enum StockError {
            UnknownSku(String),
            OutOfStock { sku: String, left: u32 },
            Closed,
        }

        #[cluster::service(name = "inventory", version = "1.0.0")]
        pub trait Inventory {
            async fn reserve(&self, sku: String, n: u32) -> Result<u32, StockError>;
        }

        impl Inventory for super::Shop {
            async fn reserve(&self, sku: String, _: u32) -> Result<u32, StockError> {
                Err(StockError::UnknownSku(sku))
            }
        }
    }

    pub mod text {
        use serde::{Deserialize, Serialize};

        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        pub enum StockError {
            UnknownSku(String),
            OutOfStock { sku: String, left: String },
            Closed,
        }

        #[cluster::service(name = "inventory", version = "1.0.0")]
        pub trait Inventory {
            async fn reserve(&self, sku: String, n: u32) -> Result<u32, StockError>;
        }

        impl Inventory for super::Shop {
            async fn reserve(&self, sku: String, _: u32) -> Result<u32, StockError> {
                Err(StockError::OutOfStock {
                    sku,
                    left: "none".into(),
                })
            }
        }
    }

    pub struct Shop;
}

#[tokio::test(start_paused = true)]
async fn a_changed_field_inside_a_multi_variant_error_enum_is_seen_before_the_call() {
    let cluster = Cluster::memory();
    let node = cluster.node("text").await;
    let _t = node
        .serve(stock::text::InventoryServer::new(stock::Shop))
        .await
        .unwrap();
    let client = stock::client::InventoryClient::new(&cluster.node("client").await);
    let e = service_error(
        client
            .reserve("pear".into(), 2)
            .no_retry()
            .await
            .unwrap_err(),
    );
    assert_eq!(e.reason(), Reason::NoFunction);
    assert!(
        e.detail().contains(
            "the result, variant `Err`, variant `OutOfStock`, field `left`: \
             the client has u32, the provider str"
        ),
        "{}",
        e.detail()
    );

    let node = cluster.node("same").await;
    let _s = node
        .serve(stock::client::InventoryServer::new(stock::Shop))
        .await
        .unwrap();
    let answer = client.reserve("pear".into(), 2).no_retry().await;
    assert!(
        matches!(&answer, Err(CallError::App { error: stock::client::StockError::UnknownSku(s), .. }) if s == "pear"),
        "{answer:?}"
    );
}

/// Two builds whose result type is opaque to the tracer (an untagged enum) and differs under
/// the same name: the check cannot see it, the call runs, and the reply does not decode. The
/// error names the provider and the attempt, so the reader can find the build that wrote it.
mod loose {
    pub mod client {
        #[derive(Debug, serde::Serialize, serde::Deserialize)]
        #[serde(untagged)]
        pub enum Loose {
            N(u8),
        }

        #[cluster::service(name = "loose", version = "1.0.0")]
        pub trait Get {
            async fn get(&self) -> Loose;
        }
    }

    pub mod other {
        #[derive(Debug, serde::Serialize, serde::Deserialize)]
        #[serde(untagged)]
        pub enum Loose {
            S(String),
        }

        #[cluster::service(name = "loose", version = "1.0.0")]
        pub trait Get {
            async fn get(&self) -> Loose;
        }

        pub struct Words;

        impl Get for Words {
            async fn get(&self) -> Loose {
                Loose::S("x".into())
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_reply_that_does_not_decode_names_the_provider_that_wrote_it() {
    let cluster = Cluster::memory();
    let node = cluster.node("other").await;
    let _o = node
        .serve(loose::other::GetServer::new(loose::other::Words))
        .await
        .unwrap();
    let client = loose::client::GetClient::new(&cluster.node("client").await);
    let CallError::Rpc(e) = client.get().no_retry().await.unwrap_err() else {
        panic!("expected an RpcError");
    };
    assert_eq!(e.kind(), cluster::RpcErrorKind::Protocol);
    assert!(e.detail().starts_with("cannot decode the reply"), "{e}");
    let report = e.report();
    assert!(
        report
            .provider
            .as_ref()
            .is_some_and(|p| p.to_string().contains("other")),
        "{e}"
    );
    assert_eq!(report.attempts.len(), 1, "{e}");
    assert!(e.may_have_run());
}
