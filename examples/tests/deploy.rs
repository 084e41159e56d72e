//! The acceptance run of the provider lifecycle: a rolling deploy under load loses no call and
//! runs every non-idempotent call exactly once, whether replicas keep their names or not.

use std::time::Duration;

use examples::deploy::{Naming, run};

async fn deploy(naming: Naming) {
    let report = run(naming, Duration::from_millis(500)).await;
    println!("{naming:?}: {report:?}");
    assert!(
        report.failed.is_empty(),
        "{} calls failed, the first: {}",
        report.failed.len(),
        report.failed[0]
    );
    assert!(
        report.deposits > 20,
        "the load ran: {} deposits",
        report.deposits
    );
    assert!(
        report.not_exactly_once.is_empty(),
        "deposits not run exactly once: {:?}",
        report.not_exactly_once
    );
    assert!(
        report.deploy.calls > 20,
        "calls were made during the deploy: {}",
        report.deploy.calls
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaced_under_the_same_names() {
    deploy(Naming::SameNames).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaced_under_new_names() {
    deploy(Naming::NewNames).await;
}
