//! A rolling deploy under load, twice: replicas replaced under the same node names, then under
//! new ones. Prints what the client saw. `cargo run -p examples --example rolling_deploy`.

use std::time::Duration;

use examples::deploy::{Naming, run};

#[tokio::main]
async fn main() {
    let _logs = examples::init_logs();
    println!(
        "| replaced under | calls | failed | deposits run exactly once | p50 quiet | p99 quiet | p50 deploy | p99 deploy | max deploy |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for naming in [Naming::SameNames, Naming::NewNames] {
        let r = run(naming, Duration::from_secs(2)).await;
        let label = if naming == Naming::SameNames {
            "the same names"
        } else {
            "new names"
        };
        let exactly_once = format!(
            "{} of {}",
            r.deposits - r.not_exactly_once.len(),
            r.deposits
        );
        println!(
            "| {label} | {} | {} | {exactly_once} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.1} ms |",
            r.quiet.calls + r.deploy.calls + r.failed.len(),
            r.failed.len(),
            ms(r.quiet.p50),
            ms(r.quiet.p99),
            ms(r.deploy.p50),
            ms(r.deploy.p99),
            ms(r.deploy.max),
        );
        assert!(r.failed.is_empty(), "failed calls: {:?}", r.failed);
        assert!(
            r.not_exactly_once.is_empty(),
            "not exactly once: {:?}",
            r.not_exactly_once
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
