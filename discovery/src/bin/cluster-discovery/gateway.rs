//! `cluster-discovery gateway --config FILE`: the gateway from a file, until SIGTERM or ctrl-c,
//! then drained.

use cluster_discovery::backend::{EurekaRegistry, EurekaRegistryConfig};
use cluster_discovery::client::EurekaClient;
use cluster_discovery::gateway::{GatewayConfig, NodeConfig, error_chain};

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
    // Function routes call through a member of the cluster of the gateway's own, started only
    // once their keys are known to be there (a node that joins and exits at once would leave
    // its entry behind until its lease ends).
    let env = |name: &str| std::env::var(name).ok();
    for functions in &config.functions {
        if let Err(why) = functions.check(&env) {
            unusable(format!(
                "--config {}: route `{}`: {why}",
                args.config.display(),
                functions.path
            ));
        }
    }
    let node = match &config.node {
        Some(node) if !config.functions.is_empty() => Some(start_node(node).await),
        _ => None,
    };
    let built = match &node {
        Some(node) => config.gateway_with(node),
        None => config.gateway(),
    };
    let gateway = match built {
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
    if let Some(node) = node {
        node.shutdown().await;
    }
}

/// The gateway's node, on the Eureka servers of `[node]`, with the identity `cluster issue`
/// wrote for it.
async fn start_node(config: &NodeConfig) -> cluster::Node {
    let identity = match cluster::Identity::from_dir(&config.identity_dir, &config.name) {
        Ok(i) => i,
        Err(e) => unusable(format!(
            "[node] identity_dir {}: {}",
            config.identity_dir.display(),
            error_chain(&e)
        )),
    };
    let registry = EurekaRegistry::new(
        EurekaClient::new(config.eureka.iter().map(String::as_str)),
        EurekaRegistryConfig::default(),
    );
    match cluster::Node::builder()
        .name(&config.name)
        .identity(identity)
        .registry(registry)
        .start()
        .await
    {
        Ok(node) => node,
        Err(e) => unusable(format!("[node] {}: {}", config.name, error_chain(&e))),
    }
}
