//! `cluster-node`: one node of a gossip cluster in its own process, serving `greeter`; and the
//! commands that make a cluster's secrets:
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
//! What each command and option does, and the exit codes, are in `args.rs`, whose doc comments
//! are `cluster-node --help`.

mod args;

use std::path::Path;

use clap::{CommandFactory, Parser, error::ErrorKind};
use cluster::registry::{GossipConfig, GossipRegistry};
use cluster::{Identity, Keyring, Node, ServiceDescription};
use examples::{
    BankServer, Counter, DROPPED_REPORT_PERIOD, GreeterServer, Host, ProbeServer, Teller,
};

use args::{Cli, Command, RunArgs};

/// A misuse that clap cannot see in the options alone: said as clap says its own (the message,
/// the usage, a pointer to `--help`), with exit code 2.
fn misuse(kind: ErrorKind, message: impl std::fmt::Display) -> ! {
    Cli::command().error(kind, message).exit()
}

/// A file given on the command line that cannot be used: exit code 2, as a misuse, but without
/// the usage, which would not help.
fn unusable(message: impl std::fmt::Display) -> ! {
    eprintln!("cluster-node: {message}");
    std::process::exit(2);
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let done = match cli.command.unwrap_or(Command::Run(Box::new(cli.run))) {
        Command::Init(init) => init.run("cluster-node").map(|done| println!("{done}")),
        Command::Key => {
            println!("{}", cluster::GossipKey::generate().to_hex());
            Ok(())
        }
        Command::Issue(issue) => issue.run().map(|done| println!("{done}")),
        Command::Compat { old, new } => std::process::exit(compat(&old, &new)),
        Command::Run(args) => {
            run(*args).await;
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
fn compat(old: &Path, new: &Path) -> i32 {
    let read = |path: &Path| {
        std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|json| ServiceDescription::from_json(&json).map_err(|e| e.to_string()))
            .unwrap_or_else(|e| {
                unusable(format!(
                    "cannot read a service description from {}: {e}",
                    path.display()
                ))
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

async fn run(args: RunArgs) {
    // Kept to the end of `run`: its drop says how many lines were dropped and flushes the rest.
    let logs = examples::init_logs();
    logs.report_every(DROPPED_REPORT_PERIOD);
    let name = args
        .name
        .unwrap_or_else(|| format!("node-{}", std::process::id()));
    let plaintext_cluster = match args.certs {
        None => args.cluster_id.as_deref(),
        Some(_) => None,
    };
    let etcd = args
        .etcd
        .registry(plaintext_cluster)
        .unwrap_or_else(|e| misuse(ErrorKind::ArgumentConflict, &e));
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
                unusable(format!(
                    "the identity of `{name}` in {}: {e}",
                    dir.display()
                ))
            });
            // On etcd, no gossip: no gossip key.
            if etcd.is_some() {
                (Node::builder().identity(identity), gossip)
            } else {
                let keyring = Keyring::from_file(dir.join("gossip.key"))
                    .unwrap_or_else(|e| unusable(format!("the gossip key: {e}")));
                (Node::builder().identity(identity), gossip.keyring(keyring))
            }
        }
        (None, true) => {
            let Some(cluster) = args.cluster_id else {
                misuse(
                    ErrorKind::MissingRequiredArgument,
                    "--insecure needs --cluster-id: a plaintext cluster still has a name of its own",
                );
            };
            (
                Node::builder().name(&name).insecure(),
                gossip.insecure().cluster_id(cluster),
            )
        }
        (Some(_), true) => misuse(
            ErrorKind::ArgumentConflict,
            "--certs and --insecure: choose one",
        ),
        (None, false) => misuse(
            ErrorKind::MissingRequiredArgument,
            "no identity: give --certs DIR (make one with `cluster-node init --cluster NAME --dir DIR` \
             and `cluster-node issue --dir DIR --node NAME`), or --insecure to run in plaintext",
        ),
    };
    let (mut builder, gossip) = match &etcd {
        Some(etcd) => (builder.registry(etcd.clone()), None),
        None => {
            let gossip = GossipRegistry::new(gossip);
            (builder.registry(gossip.clone()), Some(gossip))
        }
    };
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
    match gossip {
        Some(gossip) => println!(
            "gossip={} rpc={}",
            gossip.gossip_addr().expect("gossiping"),
            node.addr()
        ),
        None => println!("etcd={} rpc={}", args.etcd.endpoints.join(","), node.addr()),
    }

    node.shutdown_on_signal().await;
    drop(logs);
}
