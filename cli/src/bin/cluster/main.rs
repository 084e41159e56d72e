//! `cluster`: the command line of a running cluster.
//!
//! ```text
//! cluster nodes                              the nodes the registry holds
//! cluster services [--node N]                the providers: service, version, node, health
//! cluster describe SERVICE                   versions, providers, functions, options and their layer
//! cluster call SERVICE.FUNCTION 'JSON'       a call from the shell, its answer as JSON
//! cluster watch                              the registry's events as they happen
//! cluster dashboard NODE HOST:PORT           a node's dashboard in a browser on this machine
//! cluster init | issue | key                 a cluster's secrets, as cluster-node makes them
//! ```
//!
//! Every command that reads the cluster joins it (`join.rs`) under `--certs DIR --name NAME`
//! and `--seed HOST:PORT`; `--json` prints JSON. What each option does and the exit codes are
//! in `args.rs`, whose doc comments are `cluster --help`; `docs/operations.md` walks through a
//! bad night with it.

mod args;
mod call;
mod dashboard;
mod describe;
mod join;
mod out;
mod show;
mod table;
mod watch;

use std::io::IsTerminal;

use clap::{CommandFactory, Parser, error::ErrorKind};

use args::{Cli, Command};

/// Why a command did not succeed, and so its exit code.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Exit 1: the call failed, no seed answered, a command could not be done. Already
    /// printed, as JSON, when the message is empty.
    Failed(String),
    /// Exit 2: what was asked cannot be done as asked (a file that cannot be read, an unknown
    /// function, arguments that do not fit).
    Usage(String),
    /// Exit 130, as a shell reports a command ended by ctrl-c: stopped before it was done.
    Interrupted,
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
                // The name claim's own error is said again, with the way out, by `join.rs`.
                .unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new("error,cluster::registry::gossip::claim=off")
                }),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let done = run(cli).await;
    match done {
        Ok(()) => {}
        Err(Failure::Failed(message)) => {
            if !message.is_empty() {
                // Messages name nodes and services, which any member of the cluster writes.
                eprintln!("cluster: {}", out::shown_lines(&message));
            }
            std::process::exit(1);
        }
        Err(Failure::Usage(message)) => {
            eprintln!("cluster: {}", out::shown_lines(&message));
            std::process::exit(2);
        }
        Err(Failure::Interrupted) => {
            eprintln!("cluster: interrupted; left the cluster cleanly");
            std::process::exit(130);
        }
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let json = cli.json;
    let command = match cli.command {
        Command::Init(init) => {
            return init
                .run("cluster")
                .map(|done| {
                    out::line(done);
                })
                .map_err(|e| Failure::Failed(e.to_string()));
        }
        Command::Issue(issue) => {
            return issue
                .run()
                .map(|done| {
                    out::line(done);
                })
                .map_err(|e| Failure::Failed(e.to_string()));
        }
        // It does not join: it forwards to one node's metrics endpoint.
        Command::Dashboard(args) => {
            return dashboard::run(&cli.join, args, &mut Stop::install()).await;
        }
        Command::Key => {
            out::line(cluster::GossipKey::generate().to_hex());
            return Ok(());
        }
        command => command,
    };
    let watching = matches!(command, Command::Watch);
    // Listening from the start: a ctrl-c while joining is not the default's abrupt exit.
    let mut stop = Stop::install();
    // What can be refused without the cluster is refused before joining it.
    let work = match command {
        Command::Call(args) => Work::Call(call::prepare(args)?),
        command => Work::Read(command),
    };
    let joined = tokio::select! {
        joined = join::join(&cli.join) => joined?,
        () = stop.wait() => return Err(Failure::Interrupted),
    };
    let node = &joined.node;
    let work = async {
        match work {
            Work::Call(prepared) => call::call(node, prepared, json).await,
            Work::Read(Command::Nodes) => show::nodes(node, json),
            Work::Read(Command::Services { node: only }) => {
                show::services(node, only.as_deref(), json)
            }
            Work::Read(Command::Describe { service }) => describe::describe(node, &service, json),
            Work::Read(Command::Watch) => watch::watch(node, json).await,
            Work::Read(_) => unreachable!("answered before joining"),
        }
    };
    // Ctrl-c or SIGTERM: the command stops, and the node still leaves cleanly. For `watch`
    // that is how it ends.
    let done = tokio::select! {
        done = work => done,
        () = stop.wait() => if watching { Ok(()) } else { Err(Failure::Interrupted) },
    };
    joined.leave().await;
    done
}

/// A command that needs the cluster.
enum Work {
    /// A call, its target and JSON already checked.
    Call(call::Prepared),
    /// A command that reads the registry copy.
    Read(Command),
}

/// Ctrl-c or SIGTERM, listened for from when it is installed.
struct Stop {
    #[cfg(unix)]
    signals: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Stop {
    fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let signals = signal(SignalKind::interrupt())
                .and_then(|interrupt| Ok((interrupt, signal(SignalKind::terminate())?)))
                .ok();
            Self { signals }
        }
        #[cfg(not(unix))]
        Self {}
    }

    async fn wait(&mut self) {
        #[cfg(unix)]
        if let Some((interrupt, terminate)) = &mut self.signals {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}
