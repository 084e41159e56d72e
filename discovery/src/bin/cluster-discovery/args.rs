//! `cluster-discovery`'s command line. The doc comments below are its `--help`; clap answers a
//! misuse (an unknown option, a missing value, a number or an address that does not parse) with
//! exit code 2.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use cluster_discovery::server::ServerConfig;

use crate::limits::{LimitArgs, secs};

/// Said after the options (the help keeps each option to a line).
const NOTES: &str = "\
Warm-up: a server that starts with an empty registry (no peer gave it one) answers reads 503
for --warm-up seconds (one renewal interval by default, at most --max-lease), however many
instances register meanwhile, so that clients keep their copy until every instance has had a
heartbeat to come back; registrations and heartbeats are accepted throughout. --no-warm-up
answers reads at once (the last of the two given wins).

Security (see `The server's security` in docs/discovery.md): serve needs credentials, --user
or --peer-user (or both), or --open to let anyone who reaches the port write (behind an
authenticating proxy, or on a laptop). Passwords are never taken on the command line (where
`ps` shows them), so --password and --peer-password are refused.

Limits (see `Limits` in docs/discovery.md): counts are at least 1, seconds 1 to 31536000.

Prints `listening on http://ADDR/eureka/` once it accepts requests. On SIGTERM or ctrl-c it
stops accepting, lets the requests in flight finish, then exits 0. Logs (RUST_LOG, info by
default) go to stderr.";

/// A Eureka-compatible registry server, and a gateway routing HTTP to services by name
#[derive(Debug, Parser)]
#[command(
    name = "cluster-discovery",
    subcommand_required = true,
    // A repeated option takes its last value, as before clap, rather than failing: a script
    // may append an override to a command line it was given.
    args_override_self = true,
    // `--help` shows `serve`'s options, the only command's.
    flatten_help = true,
    // `--help` already shows every command; `help` would be a command that is not one.
    disable_help_subcommand = true,
    after_help = NOTES
)]
pub(crate) struct Cli {
    /// The command.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// What `cluster-discovery` does.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve the registry
    #[command(after_help = NOTES)]
    Serve(Box<ServeArgs>),
    /// Route HTTP by path to services by name (docs/discovery.md, "The gateway")
    #[command(after_help = GATEWAY_NOTES)]
    Gateway(GatewayArgs),
}

/// Said after `gateway`'s options.
const GATEWAY_NOTES: &str = "\
The file (TOML) names the resolvers and the routes; see `The gateway` in docs/discovery.md.
Prints `listening on http://ADDR` once it accepts requests. On SIGTERM or ctrl-c it stops
accepting, lets the requests in flight finish (up to limits.drain_timeout_secs, 30 s by
default), then exits 0. Logs (RUST_LOG, info by default) go to stderr.";

/// `gateway`'s options.
#[derive(Debug, Args)]
pub(crate) struct GatewayArgs {
    /// The gateway's configuration file (TOML)
    #[arg(long, value_name = "FILE")]
    pub(crate) config: PathBuf,
    /// Listen here instead of the file's `listen` (port 0: any free port)
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<std::net::SocketAddr>,
}

/// `serve`'s options.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Port to listen on (0: any free port)
    #[arg(long, value_name = "PORT", default_value_t = 8761)]
    pub(crate) port: u16,
    /// Address to listen on
    #[arg(long, value_name = "ADDR", default_value_t = IpAddr::from([127, 0, 0, 1]))]
    pub(crate) bind: IpAddr,
    /// Another registry server, e.g. http://10.0.0.2:8761/eureka/ (repeatable)
    #[arg(long = "peer", value_name = "URL")]
    pub(crate) peers: Vec<String>,
    /// This server's URL, removed from the peers (one list for all servers)
    #[arg(long, value_name = "URL")]
    pub(crate) own_url: Option<String>,
    /// The dashboard's bearer token (or DISCOVERY_DASHBOARD_TOKEN)
    // The three dashboard options override each other: the last one given wins, as before clap.
    #[arg(long, value_name = "TOKEN", overrides_with_all = ["open_dashboard", "no_dashboard"])]
    pub(crate) dashboard_token: Option<String>,
    /// Serve the dashboard without authentication
    #[arg(long, overrides_with_all = ["dashboard_token", "no_dashboard"])]
    pub(crate) open_dashboard: bool,
    /// No dashboard routes
    #[arg(long, overrides_with_all = ["dashboard_token", "open_dashboard"])]
    pub(crate) no_dashboard: bool,
    /// Lease duration for instances that do not say
    #[arg(
        long,
        value_name = "SECS",
        value_parser = secs,
        default_value_t = ServerConfig::default().lease_duration.as_secs()
    )]
    pub(crate) lease_duration: u64,
    /// Heartbeat interval for instances that do not say
    #[arg(
        long,
        value_name = "SECS",
        value_parser = secs,
        default_value_t = ServerConfig::default().renewal_interval.as_secs()
    )]
    pub(crate) renewal_interval: u64,
    /// Expire quiet instances even when most of the registry went quiet
    #[arg(long)]
    pub(crate) no_self_preservation: bool,
    /// Answer reads at once after starting with an empty registry
    #[arg(long, overrides_with = "warm_up")]
    pub(crate) no_warm_up: bool,
    /// Answer reads 503 this long after starting empty [default: the renewal interval]
    #[arg(long, value_name = "SECS", value_parser = secs, overrides_with = "no_warm_up")]
    pub(crate) warm_up: Option<u64>,
    #[command(flatten)]
    pub(crate) security: SecurityArgs,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
}

/// Who may write, and read; TLS.
#[derive(Debug, Args)]
#[command(next_help_heading = "Security")]
pub(crate) struct SecurityArgs {
    /// Writes need HTTP Basic USER (http://USER:PASSWORD@host:port/eureka/)
    #[arg(long, value_name = "USER", value_parser = user)]
    pub(crate) user: Option<String>,
    /// USER's password, the file's first line (or DISCOVERY_PASSWORD)
    #[arg(long, value_name = "FILE", requires = "user")]
    pub(crate) password_file: Option<PathBuf>,
    /// Replication (batches, isReplication=true) needs this user; sent to peers too
    #[arg(long, value_name = "USER", value_parser = user)]
    pub(crate) peer_user: Option<String>,
    /// Its password, the file's first line (or DISCOVERY_PEER_PASSWORD)
    #[arg(long, value_name = "FILE", requires = "peer_user")]
    pub(crate) peer_password_file: Option<PathBuf>,
    /// Reads need a credential too (by default they are open)
    #[arg(long)]
    pub(crate) protect_reads: bool,
    /// No credentials: anyone who reaches the port writes (behind an authenticating proxy)
    // Open only when asked for by name: without credentials and without this, `serve` refuses
    // (`access` in server.rs).
    #[arg(long, conflicts_with_all = ["user", "peer_user", "protect_reads"])]
    pub(crate) open: bool,
    /// Serve HTTPS with this certificate chain (PEM) ...
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// ... and its private key (PEM)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Trust this CA (PEM) for https:// peers, besides the web roots
    #[arg(long, value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,
    // Refused, with the reason (`access` in server.rs), rather than unknown: someone who tries
    // them learns where a password goes instead. A value, if given, is taken so that the
    // reason is what is said.
    #[arg(long, hide = true, num_args = 0..=1, value_name = "PASSWORD")]
    pub(crate) password: Option<Option<String>>,
    #[arg(long, hide = true, num_args = 0..=1, value_name = "PASSWORD")]
    pub(crate) peer_password: Option<Option<String>>,
}

/// A user name: HTTP Basic puts it before a `:`.
fn user(v: &str) -> Result<String, String> {
    if v.is_empty() || v.contains(':') {
        return Err("a user name is not empty and has no `:`".to_owned());
    }
    Ok(v.to_owned())
}
