//! `cluster`'s command line. The doc comments below are its `--help`; clap answers a misuse
//! with exit code 2.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use cluster_cli::secrets::{InitArgs, IssueArgs};

/// What every command that reads the cluster shares, said after the options.
const NOTES: &str = "\
The commands that read the cluster join it as a node that serves nothing, under the identity
given (--certs DIR and --name NAME, as any node: `cluster issue --dir DIR --node NAME` makes
one for an operator), wait until the registry copy stops changing (at most --wait), do their
work and leave cleanly. Each option can also come from the environment: CLUSTER_CERTS,
CLUSTER_NAME, CLUSTER_SEEDS (comma-separated), CLUSTER_ID.

Exit codes: 0 done; 1 the call failed (its error on stderr, or as JSON on stdout with --json),
no seed answered, or a command failed; 2 a misuse (an unknown option, JSON arguments that do
not fit the function, an unknown service or function).";

/// The command line of a running cluster: its nodes, its services, calls from the shell with
/// JSON, its events as they happen; and the commands that make a cluster's secrets
#[derive(Debug, Parser)]
#[command(
    name = "cluster",
    version,
    after_help = NOTES,
    disable_help_subcommand = true,
    args_override_self = true
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    #[command(flatten)]
    pub(crate) join: JoinArgs,
    /// Print JSON (one document; one line per event for `watch`) instead of tables
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

/// What `cluster` does.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// The nodes the registry holds: name, address, generation, wire versions, services
    Nodes,
    /// The providers the registry holds: service, version, node, health
    Services {
        /// Only those of this node
        #[arg(long, value_name = "NAME")]
        node: Option<String>,
    },
    /// A service's versions, providers and functions: signatures, shapes, idempotence and
    /// every call option with the layer it comes from
    Describe {
        /// The service's name
        #[arg(value_name = "SERVICE")]
        service: String,
    },
    /// Call a function with JSON arguments; print its answer as JSON
    #[command(after_help = CALL_NOTES)]
    Call(CallArgs),
    /// Print the registry's events as they happen (until ctrl-c)
    Watch,
    /// Open a node's dashboard in a browser on this machine: plaintext HTTP on a loopback
    /// address, forwarded to the node's metrics endpoint over mutual TLS (until ctrl-c)
    #[command(after_help = DASHBOARD_NOTES)]
    Dashboard(DashboardArgs),
    /// Make a new cluster: DIR/ca.pem, DIR/ca.key (keep it off the nodes), DIR/gossip.key
    Init(InitArgs),
    /// Issue a certificate from the CA in DIR: DIR/NAME.pem and DIR/NAME.key, for a node or
    /// for an operator's `cluster`
    Issue(IssueArgs),
    /// Print a new gossip key, in hex: a line for gossip.key, to rotate keys
    Key,
}

/// How `call` reads its arguments and what it prints.
const CALL_NOTES: &str = "\
ARGS is a JSON array with one value per argument, checked against the function's shape in the
provider's registry entry before anything is sent: a struct is an object by field name, an enum
\"Variant\" or {\"Variant\": value}, bytes an array of numbers, map keys that are not strings
their JSON text. `-` reads it from stdin. `cluster describe SERVICE` shows each function's shape.

The answer is printed as JSON on stdout. A function returning Result prints its Ok value; its
Err value is a failed call: exit 1, the error on stderr (with --json: {\"error\": ...} on stdout,
with the call's report: its attempts, their providers and timings).";

/// What `dashboard` forwards and how it is bounded.
const DASHBOARD_NOTES: &str = "\
It does not join the cluster: it needs --certs DIR and --name NAME only, and the node's metrics
address (NodeBuilder::metrics), which the registry does not hold. GET / and GET /metrics are
fetched from the node, each over a new TLS connection that checks the node's certificate
against DIR/ca.pem and NODE; anything else is refused. A node that cannot be reached or whose
certificate does not fit is a 502 page saying why, said once on stderr too. At most 16 browser
connections at once, 10 s per fetch, an answer of at most 4 MiB.";

/// `dashboard`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct DashboardArgs {
    /// The node's name, as its certificate names it
    #[arg(value_name = "NODE")]
    pub(crate) node: String,
    /// The node's metrics endpoint (what `Node::metrics_addr` says)
    #[arg(value_name = "HOST:PORT")]
    pub(crate) addr: String,
    /// Where the browser connects; a loopback address only (the port is plaintext and reads
    /// the cluster with the operator's certificate)
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:8080", value_parser = loopback)]
    pub(crate) listen: SocketAddr,
}

/// An address of this machine's loopback: the dashboard's port is plaintext, and anyone who
/// reached it would read the cluster under the operator's certificate.
fn loopback(text: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = text
        .parse()
        .map_err(|_| format!("`{text}` is not IP:PORT (e.g. 127.0.0.1:8080)"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "`{text}` is not a loopback address: the dashboard's port is plaintext and answers \
             with the operator's certificate, so it listens on this machine only (127.0.0.1, ::1)"
        ));
    }
    Ok(addr)
}

/// `call`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct CallArgs {
    /// The function, as SERVICE.FUNCTION (the service's name may hold dots: the last one splits)
    #[arg(value_name = "SERVICE.FUNCTION")]
    pub(crate) target: String,
    /// The arguments: a JSON array, one value per argument; `-` for stdin
    #[arg(value_name = "ARGS", default_value = "[]")]
    pub(crate) args: String,
    /// The versions a provider may have, as a semver requirement [default: any]
    #[arg(long = "version", value_name = "REQ")]
    pub(crate) requirement: Option<semver::VersionReq>,
    /// The per-attempt timeout, over the provider's (e.g. 500ms, 5s, 2m)
    #[arg(long, value_name = "DURATION", value_parser = positive)]
    pub(crate) timeout: Option<Duration>,
    /// The whole call's budget, all attempts and pauses, over the provider's
    #[arg(long, value_name = "DURATION", value_parser = positive)]
    pub(crate) budget: Option<Duration>,
    /// How long to wait for a provider to register when none is there yet (within the budget)
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) wait_for_provider: Option<Duration>,
    /// One attempt, whatever happens
    #[arg(long)]
    pub(crate) no_retry: bool,
    /// A metadata entry the handler reads (repeatable)
    #[arg(long = "meta", value_name = "KEY=VALUE", value_parser = key_value)]
    pub(crate) metadata: Vec<(String, String)>,
    /// Also print the report of a call that succeeded (stderr; in the JSON with --json)
    #[arg(long)]
    pub(crate) report: bool,
    /// Start a trace for this call and print its id (stderr; in the JSON with --json), to find
    /// its spans on every node it reached
    #[arg(long, conflicts_with = "traceparent")]
    pub(crate) trace: bool,
    /// Continue the trace of this W3C `traceparent` header (00-TRACE-SPAN-FLAGS)
    #[arg(long, value_name = "HEADER", value_parser = traceparent)]
    pub(crate) traceparent: Option<cluster::context::TraceParent>,
}

/// How this process joins the cluster.
#[derive(Debug, Args)]
pub(crate) struct JoinArgs {
    /// Mutual TLS: DIR holds ca.pem, gossip.key, NAME.pem, NAME.key
    #[arg(long, global = true, env = "CLUSTER_CERTS", value_name = "DIR")]
    pub(crate) certs: Option<PathBuf>,
    /// The name this process joins under: its certificate's (required with --certs) [default
    /// with --insecure: cluster-cli-PID]
    #[arg(long, global = true, env = "CLUSTER_NAME", value_name = "NAME")]
    pub(crate) name: Option<String>,
    /// Plaintext, without certificates (needs --cluster-id)
    #[arg(long, global = true)]
    pub(crate) insecure: bool,
    /// The name of a plaintext cluster
    #[arg(
        long = "cluster-id",
        global = true,
        env = "CLUSTER_ID",
        value_name = "ID"
    )]
    pub(crate) cluster_id: Option<String>,
    /// A node's gossip address (UDP; what `cluster-node` prints as `gossip=`, not the call
    /// address `cluster nodes` shows) to join through (repeatable)
    #[arg(
        long = "seed",
        global = true,
        env = "CLUSTER_SEEDS",
        value_delimiter = ',',
        value_name = "HOST:PORT"
    )]
    pub(crate) seeds: Vec<String>,
    /// Where to gossip, over UDP [default: 127.0.0.1:0, a free port]
    #[arg(long, global = true, value_name = "IP:PORT")]
    pub(crate) gossip_listen: Option<SocketAddr>,
    /// The address the nodes gossip back to (needed with a wildcard --gossip-listen)
    #[arg(long, global = true, value_name = "IP:PORT")]
    pub(crate) gossip_advertise: Option<SocketAddr>,
    /// The registry on etcd instead of gossip (`docs/etcd.md`)
    #[command(flatten)]
    pub(crate) etcd: cluster_cli::etcd::EtcdArgs,
    /// The longest wait to join and for the registry copy to fill, from the start
    #[arg(long, global = true, value_name = "DURATION", value_parser = positive, default_value = "5s")]
    pub(crate) wait: Duration,
}

/// `500ms`, `5s`, `2m`, `1h`: a number and a unit.
fn duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .ok_or_else(|| format!("`{text}` has no unit: write e.g. 500ms, 5s, 2m"))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration: write e.g. 500ms, 5s, 2m"))?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => return Err(format!("`{unit}` is not a unit: ms, s, m or h")),
    };
    // Past a year, a duration means nothing here, and added to a clock it would overflow it.
    const YEAR: f64 = 365.0 * 86_400.0;
    if seconds > YEAR {
        return Err(format!("`{text}` is over a year"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("`{text}`: {e}"))
}

/// A duration above zero: a zero timeout or budget would fail every attempt at once.
fn positive(text: &str) -> Result<Duration, String> {
    match duration(text)? {
        Duration::ZERO => Err(format!("`{text}` is zero: give a duration above it")),
        d => Ok(d),
    }
}

/// A W3C `traceparent` header.
fn traceparent(text: &str) -> Result<cluster::context::TraceParent, String> {
    cluster::context::TraceParent::parse(text)
        .ok_or_else(|| format!("`{text}` is not a traceparent: 00-<32 hex>-<16 hex>-<2 hex>"))
}

/// `KEY=VALUE`.
fn key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("`{text}` is not KEY=VALUE"))
}
