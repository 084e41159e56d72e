//! Step 1: lookup in the local registry; NoService, NoVersion, NoFunction; waiting for a
//! provider within the budget.

use std::sync::Arc;
use std::time::Duration;

use cluster::{CallError, Reason, Source};
use tokio::time::Instant;

use crate::support::{Cluster, Hit, Mode, SearchClient, SearchError};

/// The same service in other versions, as other builds would declare it.
mod v2_0 {
    use crate::support::{Hit, SearchError};
    #[cluster::service(name = "search", version = "2.0.0")]
    pub trait Search {
        #[call(idempotent)]
        async fn search(&self, query: String) -> Result<Vec<Hit>, SearchError>;
    }
}

mod v3_0 {
    #[cluster::service(name = "search", version = "3.0.0")]
    pub trait Search {
        #[call(idempotent)]
        async fn search(&self, query: String) -> Vec<String>;
    }
}

/// 2.2 dropped `reindex` and changed `search`'s signature.
mod v2_2 {
    #[cluster::service(name = "search", version = "2.2.0")]
    pub trait Search {
        #[call(idempotent)]
        async fn search(&self, query: u32) -> Vec<String>;
    }
}

/// A client whose build misspells the service's name.
mod misspelt {
    use crate::support::{Hit, SearchError};
    #[cluster::service(name = "serch", version = "2.1.0")]
    pub trait Search {
        #[call(idempotent)]
        async fn search(&self, query: String) -> Result<Vec<Hit>, SearchError>;
    }
}

struct Old;
impl v2_0::Search for Old {
    async fn search(&self, query: String) -> Result<Vec<Hit>, SearchError> {
        Ok(vec![Hit {
            id: 20,
            title: query,
        }])
    }
}
impl v3_0::Search for Old {
    async fn search(&self, query: String) -> Vec<String> {
        vec![query]
    }
}
impl v2_2::Search for Old {
    async fn search(&self, query: u32) -> Vec<String> {
        vec![query.to_string()]
    }
}

fn service_error<E: std::fmt::Debug>(e: CallError<E>) -> cluster::ServiceError {
    match e {
        CallError::Service(e) => e,
        other => panic!("expected a ServiceError, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn no_provider_with_retries_off_is_no_service_at_once() {
    let cluster = Cluster::memory();
    let client = SearchClient::new(&cluster.node("client").await);
    let start = Instant::now();
    let e = service_error(client.search("rust".into()).no_retry().await.unwrap_err());
    assert_eq!(e.reason(), Reason::NoService);
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert!(e.report().attempts.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_misspelt_service_name_is_answered_with_the_nearest_known_one() {
    let cluster = Cluster::memory();
    let (provider, engine) = cluster.provider("search-1", Mode::Answer).await;
    let node = cluster.node("client").await;
    let client = misspelt::SearchClient::new(&node);
    let start = Instant::now();
    let e = service_error(client.search("rust".into()).await.unwrap_err());
    assert_eq!(e.reason(), Reason::NoService);
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(e.hint(), Some("did you mean \"search\"?"));
    let message = e.to_string();
    assert!(
        message.contains("no entry named `serch` in the registry; not waited for: the call's wait_for_provider is 0\n  did you mean \"search\"?\n"),
        "{message}"
    );
    assert_eq!(engine.counters.started(), 0);
    // A name nothing held is near gets no guess: with only `bank` registered, `search` is
    // five edits from it.
    provider.shutdown().await;
    let (_bank, _vault) = cluster.bank("bank-1").await;
    let e = service_error(
        SearchClient::new(&node)
            .search("rust".into())
            .await
            .unwrap_err(),
    );
    assert_eq!((e.reason(), e.hint()), (Reason::NoService, None), "{e}");
}

#[tokio::test(start_paused = true)]
async fn no_provider_fails_at_once_by_default_and_reports_the_services_declared_budget() {
    let cluster = Cluster::memory();
    let client = SearchClient::new(&cluster.node("client").await);
    let start = Instant::now();
    let e = service_error(client.search("rust".into()).await.unwrap_err());
    assert_eq!(e.reason(), Reason::NoService);
    assert_eq!(start.elapsed(), Duration::ZERO, "fails fast");
    assert!(
        e.detail().contains("wait_for_provider is 0"),
        "{}",
        e.detail()
    );
    // No provider is known, so the budget is the one the trait declares (21 s), not the
    // library's 30 s.
    assert_eq!(
        e.report().budget,
        Some((Duration::from_secs(21), Source::DeclaredService))
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_that_waits_for_a_provider_waits_that_long_within_its_budget() {
    let cluster = Cluster::memory();
    let client = SearchClient::new(&cluster.node("client").await);
    for (wait, budget, waited) in [(2, 3, 2), (10, 3, 3)] {
        let start = Instant::now();
        let e = service_error(
            client
                .search("rust".into())
                .wait_for_provider(Duration::from_secs(wait))
                .budget(Duration::from_secs(budget))
                .await
                .unwrap_err(),
        );
        assert_eq!(e.reason(), Reason::NoService);
        assert_eq!(start.elapsed(), Duration::from_secs(waited));
        assert!(e.detail().contains("waited"), "{}", e.detail());
    }
}

#[tokio::test(start_paused = true)]
async fn a_provider_that_registers_during_the_call_gets_it() {
    let cluster = Arc::new(Cluster::memory());
    let client = SearchClient::new(&cluster.node("client").await);
    let late = cluster.clone();
    let deploy = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        late.provider("search-2", Mode::Answer).await
    });
    let start = Instant::now();
    let hits = client
        .search("rust".into())
        .wait_for_provider(Duration::from_secs(10))
        .await
        .expect("served by the late provider");
    assert_eq!(hits[0].title, "rust from search-2");
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    drop(deploy.await);
}

#[tokio::test(start_paused = true)]
async fn a_2_1_client_calls_a_2_0_provider_for_what_2_0_has_and_no_3_0_provider() {
    let cluster = Cluster::memory();
    let _r3 = cluster
        .node("new")
        .await
        .serve(v3_0::SearchServer::new(Old))
        .await
        .unwrap();
    let client = SearchClient::new(&cluster.node("client").await);
    let e = service_error(client.search("rust".into()).no_retry().await.unwrap_err());
    assert_eq!(e.reason(), Reason::NoVersion);
    assert_eq!(e.available_versions(), [semver::Version::new(3, 0, 0)]);

    let old = cluster.node("old").await;
    let _r = old.serve(v2_0::SearchServer::new(Old)).await.unwrap();
    // Within the major version the shapes decide: 2.0 has `search` as 2.1 has it ...
    assert_eq!(client.search("rust".into()).await.unwrap()[0].id, 20);
    // ... and no `reindex`.
    let e = service_error(client.reindex(true).no_retry().await.unwrap_err());
    assert_eq!(e.reason(), Reason::NoFunction);

    // A client that asks for more than the major version does not get 2.0.
    let strict = client.require("^2.1".parse().unwrap());
    let e = service_error(strict.search("rust".into()).no_retry().await.unwrap_err());
    assert_eq!(e.reason(), Reason::NoVersion);
    assert_eq!(
        e.available_versions(),
        [semver::Version::new(2, 0, 0), semver::Version::new(3, 0, 0)]
    );
    assert!(
        e.to_string().contains("registered versions: 2.0.0, 3.0.0"),
        "{e}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_provider_without_the_function_or_with_another_signature_is_not_eligible() {
    let cluster = Cluster::memory();
    let _r = cluster
        .node("p")
        .await
        .serve(v2_2::SearchServer::new(Old))
        .await
        .unwrap();
    let client = SearchClient::new(&cluster.node("client").await);
    // 2.2 has no `reindex` ...
    let e = service_error(client.reindex(true).no_retry().await.unwrap_err());
    assert_eq!(e.reason(), Reason::NoFunction);
    // ... and a `search` with another signature, which is another function.
    let e = service_error(client.search("rust".into()).no_retry().await.unwrap_err());
    assert_eq!(e.reason(), Reason::NoFunction);
    assert_eq!(
        e.detail(),
        "wanted `search(String) -> Result<Vec<Hit>, SearchError>`; providers have \
         `search(u32) -> Vec<String>` (2.2.0 on p: argument 1: the client has str, the provider u32); \
         not waited for: the call's wait_for_provider is 0"
    );

    // Next to it, a provider that has both takes every call.
    let (_p, engine) = cluster.provider("search-1", Mode::Answer).await;
    for _ in 0..4 {
        client.search("rust".into()).no_retry().await.unwrap();
    }
    assert_eq!(engine.counters.started(), 4);
}

/// A service whose clients wait for a provider, and whose provider asks for overload refusals
/// to be sent again up to 3 times: declared once, in the trait.
#[cluster::service(
    name = "patient",
    version = "1.0.0",
    wait_for_provider = "2s",
    retry(overloaded = 3)
)]
pub trait Patient {
    async fn ping(&self) -> u32;
}

#[tokio::test(start_paused = true)]
async fn a_wait_declared_in_the_trait_applies_to_its_clients() {
    let cluster = Cluster::memory();
    let declared = &PatientClient::description().options;
    assert_eq!(declared.wait_for_provider, Some(Duration::from_secs(2)));
    assert_eq!(declared.overloaded_retries, Some(3));
    let client = PatientClient::new(&cluster.node("client").await);
    let start = Instant::now();
    let e = service_error(client.ping().await.unwrap_err());
    assert_eq!(e.reason(), Reason::NoService);
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    // A call's own setting wins.
    let start = Instant::now();
    let e = service_error(
        client
            .ping()
            .wait_for_provider(Duration::ZERO)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.reason(), Reason::NoService);
    assert_eq!(start.elapsed(), Duration::ZERO);
}

/// The service as a build that declares no options would describe it.
mod bare {
    use crate::support::{Hit, SearchError};
    #[cluster::service(name = "search", version = "2.1.0")]
    pub trait Search {
        #[call(idempotent)]
        async fn search(&self, query: String) -> Result<Vec<Hit>, SearchError>;
    }
}

#[tokio::test(start_paused = true)]
async fn a_provider_that_registers_during_the_call_brings_its_own_pauses_and_budget() {
    let cluster = Arc::new(Cluster::memory());
    // This client's build declares nothing: until a provider is found, the library's 30 s
    // budget stands in.
    let client = bare::SearchClient::new(&cluster.node("client").await);
    let late = cluster.clone();
    let deploy = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        late.provider("search-2", Mode::Hang).await
    });
    let start = Instant::now();
    let e = client
        .search("rust".into())
        .wait_for_provider(Duration::from_secs(10))
        .await
        .unwrap_err();
    // The provider's own policy: 6 s attempts, 1 s pauses, 21 s from the call's start.
    assert_eq!(start.elapsed(), Duration::from_secs(21), "{e}");
    let report = e.report();
    assert_eq!(
        report.budget,
        Some((Duration::from_secs(21), Source::ProviderService))
    );
    let starts: Vec<u64> = report
        .attempts
        .iter()
        .map(|a| a.started.as_secs())
        .collect();
    assert_eq!(starts, [5, 12, 19]);
    drop(deploy.await);
}

#[tokio::test(start_paused = true)]
async fn a_provider_found_after_its_own_budget_went_by_in_the_wait_still_gets_one_attempt() {
    for (mode, outcome_at) in [(Mode::Answer, 25), (Mode::Hang, 30)] {
        let cluster = Arc::new(Cluster::memory());
        let client = bare::SearchClient::new(&cluster.node("client").await);
        let late = cluster.clone();
        let name = format!("search-{outcome_at}");
        let deploy = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(25)).await;
            late.provider(&name, mode).await
        });
        let start = Instant::now();
        // The provider's budget (21 s) has gone by when it registers at 25 s; the call waited
        // under the library's 30 s.
        let result = client
            .search("rust".into())
            .wait_for_provider(Duration::from_secs(40))
            .await;
        assert_eq!(start.elapsed(), Duration::from_secs(outcome_at));
        match result {
            Ok(hits) => assert_eq!(hits[0].title, "rust from search-25"),
            Err(e) => {
                assert_eq!(e.report().attempts.len(), 1, "{e}");
                assert!(e.may_have_run(), "{e}");
            }
        }
        drop(deploy.await);
    }
}

/// The in-process registry, said to be still filling until `until` (as a new gossip node's copy
/// is until it has heard from its seeds: `Registry::filling_until`).
#[derive(Clone)]
struct Filling<R> {
    shared: R,
    until: Instant,
}

impl<R: cluster::Registry> cluster::Registry for Filling<R> {
    fn register(
        &self,
        entry: cluster::registry::ServiceEntry,
    ) -> cluster::registry::RegistryFuture<'_, Result<(), cluster::registry::RegistryError>> {
        self.shared.register(entry)
    }
    fn deregister(
        &self,
        node: &str,
        service: &str,
    ) -> cluster::registry::RegistryFuture<'_, Result<(), cluster::registry::RegistryError>> {
        self.shared.deregister(node, service)
    }
    fn join(
        &self,
        node: cluster::registry::NodeInfo,
    ) -> cluster::registry::RegistryFuture<'_, Result<(), cluster::registry::RegistryError>> {
        self.shared.join(node)
    }
    fn leave(
        &self,
        node: &str,
    ) -> cluster::registry::RegistryFuture<'_, Result<(), cluster::registry::RegistryError>> {
        self.shared.leave(node)
    }
    fn local_copy(&self) -> &cluster::registry::LocalCopy {
        self.shared.local_copy()
    }
    fn filling_until(&self) -> Option<Instant> {
        (self.until > Instant::now()).then_some(self.until)
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_from_a_node_whose_copy_is_still_filling_waits_for_it_and_no_longer() {
    let cluster = Arc::new(Cluster::memory());
    let start = Instant::now();
    let filling = Filling {
        shared: cluster.registry.clone(),
        until: start + Duration::from_secs(3),
    };
    let node = cluster::Node::builder()
        .name("client")
        .registry(filling)
        .memory(cluster.memory.as_ref().unwrap())
        .start()
        .await
        .unwrap();
    let arrives = cluster.clone();
    let provider = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        arrives.provider("search-1", Mode::Answer).await
    });
    // No wait_for_provider: the entry that arrives while the copy fills is waited for.
    let hits = SearchClient::new(&node)
        .search("rust".into())
        .await
        .expect("served once the entry arrived");
    assert_eq!(hits[0].title, "rust from search-1");
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    // A service that never arrives fails when the copy has filled, saying why it waited.
    let e = service_error(
        crate::support::BankClient::new(&node)
            .balance()
            .await
            .unwrap_err(),
    );
    assert_eq!(e.reason(), Reason::NoService);
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    assert!(
        e.detail().contains("registry copy filled"),
        "{}",
        e.detail()
    );
    // After that, a miss is said at once.
    let e = service_error(
        crate::support::BankClient::new(&node)
            .balance()
            .await
            .unwrap_err(),
    );
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    assert!(e.detail().contains("not waited for"), "{}", e.detail());
    drop(provider.await);
}
