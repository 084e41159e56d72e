//! `cluster-node`: one node of a gossip cluster in its own process, serving `greeter`; and the
//! commands that make a cluster's secrets.
//!
//! ```text
//! cluster-node init --cluster NAME --dir DIR            a new cluster: DIR/ca.pem, ca.key, gossip.key
//! cluster-node issue --dir DIR --node NAME [--days N]   a node's DIR/NAME.pem and NAME.key (365 days)
//! cluster-node key                                      a new gossip key, in hex, for rotation
//! cluster-node [run] --name NAME --certs DIR [--seed HOST:PORT]...
//! cluster-node [run] --name NAME --insecure --cluster-id ID [--seed HOST:PORT]...
//! cluster-node compat OLD.json NEW.json                 what breaks clients between two descriptions
//! ```
//!
//! `compat` reads two service descriptions written by `ServiceDescription::to_json`, prints each
//! change (`breaking: …` or `compatible: …`, `docs/compatibility.md`) and exits 1 when one
//! breaks clients of OLD on NEW providers or clients of NEW on a rollback to OLD.
//!
//! `run` listens on loopback (ports from the OS) unless told otherwise: `--listen ADDR` and
//! `--gossip-listen ADDR` set where it serves calls and gossips, `--advertise ADDR` and
//! `--gossip-advertise ADDR` the addresses peers reach it by (required with a wildcard such as
//! `0.0.0.0:7300`; port 0 stands for the port listened on).
//!
//! `run` prints `gossip=<addr> rpc=<addr>` on its first line of stdout, then serves until
//! SIGTERM or ctrl-c (a clean leave) or SIGKILL (a crash). `--probe` serves the `probe` service
//! too (for the abuse suite). Logs (`RUST_LOG`, ERROR by default) go to stderr through a bounded
//! queue: a stderr nobody reads drops lines, counted and said, and never stops the node.

use std::path::PathBuf;

use cluster::registry::{GossipConfig, GossipRegistry};
use cluster::{Identity, Keyring, Node, ServiceDescription};
use examples::{
    BankServer, Counter, DROPPED_REPORT_PERIOD, GreeterServer, Host, ProbeServer, Teller,
};

const USAGE: &str = "usage:
  cluster-node init --cluster NAME --dir DIR
  cluster-node issue --dir DIR --node NAME [--days N]
  cluster-node key                 (prints a new gossip key: a line for gossip.key)
  cluster-node [run] --name NAME --certs DIR [--seed HOST:PORT]...
  cluster-node [run] --name NAME --insecure --cluster-id ID [--seed HOST:PORT]...
  run also takes --listen ADDR, --advertise ADDR (calls), --gossip-listen ADDR,
    --gossip-advertise ADDR (gossip): required to advertise with a wildcard such as 0.0.0.0:7300
  run also takes --probe: serve the `probe` service beside `greeter` (for tests)
  run also takes --bank: serve the `bank` service, printing `deposit ID` as each runs (for tests)
  cluster-node compat OLD.json NEW.json   (exits 1 on a breaking change)";

#[derive(Default)]
struct Args {
    name: Option<String>,
    seeds: Vec<String>,
    certs: Option<PathBuf>,
    dir: Option<PathBuf>,
    cluster: Option<String>,
    node: Option<String>,
    days: Option<u32>,
    insecure: bool,
    probe: bool,
    bank: bool,
    listen: Option<std::net::SocketAddr>,
    advertise: Option<std::net::SocketAddr>,
    gossip_listen: Option<std::net::SocketAddr>,
    gossip_advertise: Option<std::net::SocketAddr>,
}

fn fail(message: &str) -> ! {
    eprintln!("cluster-node: {message}\n\n{USAGE}");
    std::process::exit(2);
}

fn address(flag: &str, value: &str) -> std::net::SocketAddr {
    value
        .parse()
        .unwrap_or_else(|_| fail(&format!("{flag} takes IP:PORT, not `{value}`")))
}

fn parse(mut args: impl Iterator<Item = String>) -> Args {
    let mut parsed = Args::default();
    while let Some(arg) = args.next() {
        if matches!(arg.as_str(), "--help" | "-h") {
            println!("{USAGE}");
            std::process::exit(0);
        }
        if arg == "--insecure" {
            parsed.insecure = true;
            continue;
        }
        if arg == "--bank" {
            parsed.bank = true;
            continue;
        }
        if arg == "--probe" {
            parsed.probe = true;
            continue;
        }
        let Some(value) = args.next() else {
            fail(&format!("{arg} needs a value"));
        };
        match arg.as_str() {
            "--name" => parsed.name = Some(value),
            "--seed" => parsed.seeds.push(value),
            "--certs" => parsed.certs = Some(value.into()),
            "--dir" => parsed.dir = Some(value.into()),
            "--cluster" | "--cluster-id" => parsed.cluster = Some(value),
            "--node" => parsed.node = Some(value),
            "--listen" => parsed.listen = Some(address(&arg, &value)),
            "--advertise" => parsed.advertise = Some(address(&arg, &value)),
            "--gossip-listen" => parsed.gossip_listen = Some(address(&arg, &value)),
            "--gossip-advertise" => parsed.gossip_advertise = Some(address(&arg, &value)),
            "--days" => {
                parsed.days = Some(
                    value
                        .parse()
                        .unwrap_or_else(|_| fail("--days takes a number")),
                )
            }
            _ => fail(&format!("unknown argument {arg}")),
        }
    }
    parsed
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).peekable();
    let command = match args.peek().map(String::as_str) {
        Some("init" | "issue" | "run" | "key" | "compat") => args.next().unwrap_or_default(),
        _ => "run".to_owned(),
    };
    if command == "compat" {
        // Two paths, not flags: parsed here rather than by `parse`.
        let files: Vec<String> = args.collect();
        let [old, new] = files.as_slice() else {
            fail("compat takes two files: OLD.json NEW.json");
        };
        std::process::exit(compat(old, new));
    }
    let parsed = parse(args);
    let done = match command.as_str() {
        "init" => {
            let (Some(dir), Some(cluster)) = (&parsed.dir, &parsed.cluster) else {
                fail("init needs --cluster and --dir");
            };
            examples::secrets::init(dir, cluster).map(|()| {
                println!(
                    "cluster `{cluster}`: wrote {0}/ca.pem, {0}/ca.key (keep it off the nodes) and {0}/gossip.key; next: cluster-node issue --dir {0} --node NAME",
                    dir.display()
                )
            })
        }
        "key" => {
            println!("{}", cluster::GossipKey::generate().to_hex());
            Ok(())
        }
        "issue" => {
            let (Some(dir), Some(node)) = (&parsed.dir, &parsed.node) else {
                fail("issue needs --dir and --node");
            };
            examples::secrets::issue(dir, node, parsed.days.unwrap_or(365)).map(|()| {
                println!(
                    "node `{node}`: wrote {0}/{node}.pem and {0}/{node}.key",
                    dir.display()
                )
            })
        }
        _ => {
            run(parsed).await;
            Ok(())
        }
    };
    if let Err(e) = done {
        eprintln!("cluster-node: {e}");
        std::process::exit(1);
    }
}

/// Prints the changes from the description in `old` to the one in `new`; the exit code: 0, 1
/// when one breaks clients, 2 when a file cannot be read.
fn compat(old: &str, new: &str) -> i32 {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|json| ServiceDescription::from_json(&json).map_err(|e| e.to_string()))
            .unwrap_or_else(|e| {
                eprintln!("cluster-node: cannot read a service description from {path}: {e}");
                std::process::exit(2);
            })
    };
    let (old, new) = (read(old), read(new));
    let changes = cluster::service::changes(&old, &new);
    if changes.is_empty() {
        println!("no change that matters to callers");
    }
    for change in &changes {
        println!("{change}");
    }
    i32::from(changes.iter().any(|c| c.is_breaking()))
}

async fn run(args: Args) {
    // Kept to the end of `run`: its drop says how many lines were dropped and flushes the rest.
    let logs = examples::init_logs();
    logs.report_every(DROPPED_REPORT_PERIOD);
    let name = args
        .name
        .unwrap_or_else(|| format!("node-{}", std::process::id()));
    let mut gossip = GossipConfig::new().seeds(args.seeds);
    if let Some(listen) = args.gossip_listen {
        gossip = gossip.listen(listen);
    }
    if let Some(advertise) = args.gossip_advertise {
        gossip = gossip.advertise(advertise);
    }
    let (builder, gossip) = match (&args.certs, args.insecure) {
        (Some(dir), false) => {
            let identity = Identity::from_dir(dir, &name).unwrap_or_else(|e| {
                fail(&format!(
                    "the identity of `{name}` in {}: {e}",
                    dir.display()
                ))
            });
            let keyring = Keyring::from_file(dir.join("gossip.key"))
                .unwrap_or_else(|e| fail(&format!("the gossip key: {e}")));
            (Node::builder().identity(identity), gossip.keyring(keyring))
        }
        (None, true) => {
            let Some(cluster) = args.cluster else {
                fail(
                    "--insecure needs --cluster-id: a plaintext cluster still has a name of its own",
                );
            };
            (
                Node::builder().name(&name).insecure(),
                gossip.insecure().cluster_id(cluster),
            )
        }
        (Some(_), true) => fail("--certs and --insecure: choose one"),
        (None, false) => fail(
            "no identity: give --certs DIR (make one with `cluster-node init --cluster NAME --dir DIR` \
             and `cluster-node issue --dir DIR --node NAME`), or --insecure to run in plaintext",
        ),
    };
    let registry = GossipRegistry::new(gossip);
    let mut builder = builder.registry(registry.clone());
    if let Some(listen) = args.listen {
        builder = builder.listen(listen);
    }
    if let Some(advertise) = args.advertise {
        builder = builder.advertise(advertise);
    }
    let node = match builder.start().await {
        Ok(node) => node,
        Err(e) => {
            eprintln!("cluster-node: {name} cannot start: {e}");
            std::process::exit(1);
        }
    };
    let _registration = node
        .serve(GreeterServer::new(Host { node: name }))
        .await
        .expect("serves");
    // Each deposit as it runs, on stdout: a test counts them across processes.
    let _bank = match args.bank {
        true => Some(
            node.serve(BankServer::new(Teller::new(|id| {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "deposit {id}");
                let _ = out.flush();
            })))
            .await
            .expect("serves"),
        ),
        false => None,
    };
    let _probe = match args.probe {
        true => Some(
            node.serve(ProbeServer::new(Counter::default()))
                .await
                .expect("serves"),
        ),
        false => None,
    };
    println!(
        "gossip={} rpc={}",
        registry.gossip_addr().expect("gossiping"),
        node.addr()
    );

    node.shutdown_on_signal().await;
    drop(logs);
}
