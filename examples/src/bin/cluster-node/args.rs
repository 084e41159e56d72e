//! `cluster-node`'s command line. The doc comments below are its `--help`; clap answers a
//! misuse (an unknown option, a missing value, an address that does not parse) with exit code 2.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use cluster_cli::secrets::{InitArgs, IssueArgs};

/// What `run` does beyond its options, said after them (the help keeps each option to a line).
const RUN_NOTES: &str = "\
With no command, cluster-node runs a node: `cluster-node --name NAME --certs DIR` is
`cluster-node run --name NAME --certs DIR`. It prints `gossip=ADDR rpc=ADDR` on its first line
of stdout, then serves until SIGTERM or ctrl-c (a clean leave) or SIGKILL (a crash). Logs
(RUST_LOG, ERROR by default) go to stderr; a stderr nobody reads drops lines, counted.
An advertised address's port 0 stands for the port listened on.

Exit codes: 1 when a command fails (a node that cannot start, `compat` on a breaking change),
2 on a misuse of the command line or a file that cannot be read.";

/// One node of a gossip cluster in its own process, serving `greeter`; and the commands that
/// make a cluster's secrets
#[derive(Debug, Parser)]
#[command(
    name = "cluster-node",
    // `run` is the command when none is given, so its options stand in the place of a command
    // (and with one, they belong to that command).
    args_conflicts_with_subcommands = true,
    // A repeated option takes its last value, as before clap, rather than failing: a script
    // may append an override to a command line it was given.
    args_override_self = true,
    // `--help` shows every command's options, not only those of `run`.
    flatten_help = true,
    // `--help` already shows every command; `help` would be a command that is not one.
    disable_help_subcommand = true,
    after_help = RUN_NOTES
)]
pub(crate) struct Cli {
    /// The command; `run` when none is given.
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    /// `run`'s options, given without the word `run`.
    #[command(flatten)]
    pub(crate) run: RunArgs,
}

/// What `cluster-node` does.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Make a new cluster: DIR/ca.pem, DIR/ca.key (keep it off the nodes), DIR/gossip.key
    // `--cluster-id`, the name `run` gives it, is taken here too.
    #[command(mut_arg("cluster", |arg| arg.visible_alias("cluster-id")))]
    Init(InitArgs),
    /// Issue a node's certificate from the CA in DIR: DIR/NAME.pem and DIR/NAME.key
    Issue(IssueArgs),
    /// Print a new gossip key, in hex: a line for gossip.key, to rotate keys
    Key,
    // Hidden from the help, which shows its options once, as those of `cluster-node` itself.
    /// Run a node (the command when none is given)
    #[command(hide = true, after_help = RUN_NOTES)]
    Run(Box<RunArgs>),
    /// Print what changes between two service descriptions; exit 1 if one breaks clients
    #[command(after_help = COMPAT_NOTES)]
    Compat {
        /// The description clients were built against (ServiceDescription::to_json)
        // In order in the help, which would sort them by name.
        #[arg(value_name = "OLD.json", display_order = 0)]
        old: PathBuf,
        /// The description of the new version
        #[arg(value_name = "NEW.json", display_order = 1)]
        new: PathBuf,
    },
}

/// What `compat` prints and means, said after its arguments.
const COMPAT_NOTES: &str = "\
Each change is a line, `breaking: ...` or `compatible: ...` (docs/compatibility.md). A change
breaks when clients of OLD fail on NEW providers, or clients of NEW on a rollback to OLD.
Exit codes: 0 when nothing breaks, 1 when something does, 2 when a file cannot be read.";

/// How a node runs. It needs an identity: `--certs DIR`, or `--insecure --cluster-id ID`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The node's name, unique in the cluster [default: node-PID]
    #[arg(long, value_name = "NAME")]
    pub(crate) name: Option<String>,
    /// Mutual TLS: DIR holds ca.pem, gossip.key, NAME.pem, NAME.key
    #[arg(long, value_name = "DIR")]
    pub(crate) certs: Option<PathBuf>,
    /// Plaintext, without certificates (needs --cluster-id)
    #[arg(long)]
    pub(crate) insecure: bool,
    /// The name of a plaintext cluster, which it still needs
    #[arg(long = "cluster-id", visible_alias = "cluster", value_name = "ID")]
    pub(crate) cluster_id: Option<String>,
    /// A node to gossip with at start (repeatable)
    #[arg(long = "seed", value_name = "HOST:PORT")]
    pub(crate) seeds: Vec<String>,
    /// The registry on etcd instead of gossip (`docs/etcd.md`)
    #[command(flatten)]
    pub(crate) etcd: cluster_cli::etcd::EtcdArgs,
    /// Where to serve calls [default: 127.0.0.1:0, a free port]
    #[arg(long, value_name = "IP:PORT")]
    pub(crate) listen: Option<SocketAddr>,
    /// The address nodes call it at (needed with a wildcard --listen)
    #[arg(long, value_name = "IP:PORT")]
    pub(crate) advertise: Option<SocketAddr>,
    /// Where to gossip, over UDP [default: 127.0.0.1:0, a free port]
    #[arg(long, value_name = "IP:PORT")]
    pub(crate) gossip_listen: Option<SocketAddr>,
    /// The address nodes gossip to (needed with a wildcard --gossip-listen)
    #[arg(long, value_name = "IP:PORT")]
    pub(crate) gossip_advertise: Option<SocketAddr>,
    /// Serve `probe` beside `greeter` (for the abuse suite)
    #[arg(long)]
    pub(crate) probe: bool,
    /// Serve `bank`, printing `deposit ID` as each deposit runs (for tests)
    #[arg(long)]
    pub(crate) bank: bool,
}
