//! The options that set the server's [`Limits`], each defaulting to `Limits::default()`'s value
//! (so that `--help` shows the defaults the server really has), and the two kinds of number they
//! take.

use std::time::Duration;

use clap::Args;
use cluster_discovery::server::Limits;

/// The longest duration an option takes: a year (timers cannot represent every duration).
const LONGEST_SECS: u64 = 365 * 24 * 3600;

/// A count: a positive integer.
fn count(v: &str) -> Result<usize, String> {
    match v.parse() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("not a positive integer".to_owned()),
    }
}

/// Seconds: 1 to a year.
pub(crate) fn secs(v: &str) -> Result<u64, String> {
    match v.parse() {
        Ok(n) if (1..=LONGEST_SECS).contains(&n) => Ok(n),
        _ => Err(format!("not a number of seconds from 1 to {LONGEST_SECS}")),
    }
}

/// `serve`'s limits.
#[derive(Debug, Args)]
#[command(next_help_heading = "Limits")]
pub(crate) struct LimitArgs {
    /// Largest request body (batches 8 times it)
    #[arg(long, value_name = "N", value_parser = count, default_value_t = Limits::default().max_body_bytes)]
    max_body_bytes: usize,
    /// Items in one replication batch
    #[arg(long, value_name = "N", value_parser = count, default_value_t = Limits::default().max_batch_items)]
    max_batch_items: usize,
    /// Applications in the registry
    #[arg(long, value_name = "N", value_parser = count, default_value_t = Limits::default().max_apps)]
    max_apps: usize,
    /// Instances of one application
    #[arg(long, value_name = "N", value_parser = count, default_value_t = Limits::default().max_instances_per_app)]
    max_instances_per_app: usize,
    /// Instances in all
    #[arg(long, value_name = "N", value_parser = count, default_value_t = Limits::default().max_instances)]
    max_instances: usize,
    /// Metadata entries of one instance
    #[arg(long, value_name = "N", value_parser = count, default_value_t = Limits::default().max_metadata_entries)]
    max_metadata_entries: usize,
    /// Text of one instance, fields and metadata
    #[arg(long, value_name = "N", value_parser = count, default_value_t = Limits::default().max_instance_bytes)]
    max_instance_bytes: usize,
    /// Longest lease or renewal interval an instance gets
    #[arg(long, value_name = "SECS", value_parser = secs, default_value_t = Limits::default().max_lease.as_secs())]
    pub(crate) max_lease: u64,
    /// How far ahead lastDirtyTimestamp may be
    #[arg(long, value_name = "SECS", value_parser = secs, default_value_t = Limits::default().max_clock_skew.as_secs())]
    max_clock_skew: u64,
    /// Connections open at once
    #[arg(long, value_name = "N", value_parser = count, default_value_t = Limits::default().max_connections)]
    max_connections: usize,
    /// A request's head, a TLS handshake, an idle connection
    #[arg(long, value_name = "SECS", value_parser = secs, default_value_t = Limits::default().header_read_timeout.as_secs())]
    header_read_timeout: u64,
    /// A request, its body included
    #[arg(long, value_name = "SECS", value_parser = secs, default_value_t = Limits::default().request_timeout.as_secs())]
    request_timeout: u64,
    /// A response its client does not read
    #[arg(long, value_name = "SECS", value_parser = secs, default_value_t = Limits::default().write_timeout.as_secs())]
    write_timeout: u64,
    /// Writes waiting for one peer
    #[arg(long, value_name = "N", value_parser = count, default_value_t = Limits::default().max_peer_queue)]
    max_peer_queue: usize,
    /// A repeated warning, per source
    #[arg(long, value_name = "SECS", value_parser = secs, default_value_t = Limits::default().warning_interval.as_secs())]
    warning_interval: u64,
    /// Log lines waiting for stderr; past it they are dropped, counted
    #[arg(long, value_name = "N", value_parser = count, default_value_t = 8_192)]
    pub(crate) log_buffer_lines: usize,
}

impl LimitArgs {
    /// The server's limits.
    pub(crate) fn limits(&self) -> Limits {
        let mut limits = Limits::default();
        limits.max_body_bytes = self.max_body_bytes;
        limits.max_batch_items = self.max_batch_items;
        limits.max_apps = self.max_apps;
        limits.max_instances_per_app = self.max_instances_per_app;
        limits.max_instances = self.max_instances;
        limits.max_metadata_entries = self.max_metadata_entries;
        limits.max_instance_bytes = self.max_instance_bytes;
        limits.max_lease = Duration::from_secs(self.max_lease);
        limits.max_clock_skew = Duration::from_secs(self.max_clock_skew);
        limits.max_connections = self.max_connections;
        limits.header_read_timeout = Duration::from_secs(self.header_read_timeout);
        limits.request_timeout = Duration::from_secs(self.request_timeout);
        limits.write_timeout = Duration::from_secs(self.write_timeout);
        limits.max_peer_queue = self.max_peer_queue;
        limits.warning_interval = Duration::from_secs(self.warning_interval);
        limits
    }
}
