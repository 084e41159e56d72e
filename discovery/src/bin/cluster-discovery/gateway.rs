//! `cluster-discovery gateway --config FILE`: the gateway from a file, until SIGTERM or ctrl-c,
//! then drained.

use cluster_discovery::gateway::{GatewayConfig, error_chain};

use crate::args::GatewayArgs;
use crate::stop::Stop;
use crate::unusable;

/// Log lines waiting for stderr before they are dropped (as `serve`'s default).
const LOG_LINES: usize = 10_000;

pub(crate) async fn run(args: GatewayArgs) {
    let text = match std::fs::read_to_string(&args.config) {
        Ok(t) => t,
        Err(e) => unusable(format!("--config {}: {e}", args.config.display())),
    };
    let config = match GatewayConfig::from_toml(&text) {
        Ok(c) => c,
        Err(e) => unusable(format!(
            "--config {}: {}",
            args.config.display(),
            error_chain(&e)
        )),
    };
    let gateway = match config.gateway() {
        Ok(g) => g,
        Err(e) => unusable(format!(
            "--config {}: {}",
            args.config.display(),
            error_chain(&e)
        )),
    };
    let (_flushed_at_exit, dropped) = crate::logging(LOG_LINES);
    tokio::spawn(crate::report_dropped(dropped));
    let addr = args.listen.unwrap_or(config.listen);
    let stop = Stop::install();
    let running = match gateway.start(addr).await {
        Ok(r) => r,
        Err(e) => unusable(format!("cannot listen on {addr}: {e}")),
    };
    println!("listening on {}", running.url());
    stop.wait().await;
    tracing::info!("draining the requests in flight");
    running.shutdown().await;
}
