//! `cluster-node`: one node of a gossip cluster in its own process, serving `greeter`.
//!
//! `cluster-node --name a [--seed 127.0.0.1:7280]...` prints `gossip=<addr> rpc=<addr>` on its
//! first line, then serves until SIGTERM or ctrl-c (a clean leave) or SIGKILL (a crash).

use cluster::Node;
use cluster::registry::{GossipConfig, GossipRegistry};
use examples::{GreeterServer, Host};

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(examples::log_filter())
        .init();
    let mut name = None;
    let mut seeds = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--name", Some(v)) => name = Some(v),
            ("--seed", Some(v)) => seeds.push(v),
            _ => {
                eprintln!("usage: cluster-node --name NAME [--seed HOST:PORT]...");
                std::process::exit(2);
            }
        }
    }
    let name = name.unwrap_or_else(|| format!("node-{}", std::process::id()));
    let registry = GossipRegistry::new(GossipConfig::new().seeds(seeds));
    let node = Node::builder()
        .name(&name)
        .registry(registry.clone())
        .start()
        .await
        .expect("node starts");
    let _registration = node
        .serve(GreeterServer::new(Host { node: name }))
        .await
        .expect("serves");
    println!(
        "gossip={} rpc={}",
        registry.gossip_addr().expect("gossiping"),
        node.addr()
    );

    node.shutdown_on_signal().await;
}
