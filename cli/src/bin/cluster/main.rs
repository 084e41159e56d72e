//! `cluster`: the command line of a running cluster.
//!
//! ```text
//! cluster nodes                              the nodes the registry holds
//! cluster services [--node N]                the providers: service, version, node, health
//! cluster describe SERVICE                   versions, providers, functions, options and their layer
//! cluster call SERVICE.FUNCTION 'JSON'       a call from the shell, its answer as JSON
//! cluster watch                              the registry's events as they happen
//! cluster init | issue | key                 a cluster's secrets, as cluster-node makes them
//! ```
//!
//! Every command that reads the cluster joins it (`join.rs`) under `--certs DIR --name NAME`
//! and `--seed HOST:PORT`; `--json` prints JSON. What each option does and the exit codes are
//! in `args.rs`, whose doc comments are `cluster --help`; `docs/operations.md` walks through a
//! bad night with it.

mod args;
mod call;
mod describe;
mod join;
mod show;
mod table;
mod watch;

use clap::{CommandFactory, Parser, error::ErrorKind};

use args::{Cli, Command};

/// Why a command did not succeed, and so its exit code.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Exit 1: the call failed, no seed answered, a command could not be done. Already
    /// printed, as JSON, when the message is empty.
    Failed(String),
    /// Exit 2: what was asked cannot be done as asked (a file that cannot be read, an unknown
    /// service or function, arguments that do not fit).
    Usage(String),
}

/// A misuse clap cannot see in the options alone, said as clap says its own: exit code 2.
pub(crate) fn misuse(message: impl std::fmt::Display) -> ! {
    Cli::command()
        .error(ErrorKind::ValueValidation, message)
        .exit()
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    // Logs go to stderr, errors only unless RUST_LOG says otherwise: stdout is for the answer.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let json = cli.json;
    let done = match cli.command {
        Command::Init { cluster, dir } => cluster_cli::secrets::init(&dir, &cluster)
            .map(|()| {
                println!(
                    "cluster `{cluster}`: wrote {0}/ca.pem, {0}/ca.key (keep it off the nodes) and {0}/gossip.key; next: cluster issue --dir {0} --node NAME",
                    dir.display()
                )
            })
            .map_err(|e| Failure::Failed(e.to_string())),
        Command::Issue { dir, node, days } => cluster_cli::secrets::issue(&dir, &node, days)
            .map(|()| println!("`{node}`: wrote {0}/{node}.pem and {0}/{node}.key", dir.display()))
            .map_err(|e| Failure::Failed(e.to_string())),
        Command::Key => {
            println!("{}", cluster::GossipKey::generate().to_hex());
            Ok(())
        }
        command => match join::join(&cli.join).await {
            Ok(joined) => {
                let done = match command {
                    Command::Nodes => show::nodes(&joined.node, json),
                    Command::Services { node } => show::services(&joined.node, node.as_deref(), json),
                    Command::Describe { service } => describe::describe(&joined.node, &service, json),
                    Command::Call(args) => call::call(&joined.node, args, json).await,
                    Command::Watch => watch::watch(&joined.node, json).await,
                    Command::Init { .. } | Command::Issue { .. } | Command::Key => unreachable!("answered above"),
                };
                joined.leave().await;
                done
            }
            Err(e) => Err(e),
        },
    };
    match done {
        Ok(()) => {}
        Err(Failure::Failed(message)) => {
            if !message.is_empty() {
                eprintln!("cluster: {message}");
            }
            std::process::exit(1);
        }
        Err(Failure::Usage(message)) => {
            eprintln!("cluster: {message}");
            std::process::exit(2);
        }
    }
}
