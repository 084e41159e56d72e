//! `cluster-discovery serve`: a Eureka-compatible registry server, until SIGTERM or ctrl-c
//! (`stop.rs`, shared with `gateway`). Its options are in `args.rs` and `limits.rs`, whose doc
//! comments are `cluster-discovery --help`; `server.rs` makes a server of them.

mod args;
mod gateway;
mod limits;
mod server;
mod stop;

use std::time::Duration;

use clap::{CommandFactory, Parser, error::ErrorKind};
use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};

use args::{Cli, Command};

/// mimalloc rather than glibc's malloc: the gateway allocates a few dozen small blocks per
/// request, and glibc's allocator took a tenth of its instructions (`docs/benchmarks.md`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use server::Options;
use stop::Stop;

/// A misuse that clap cannot see in the options alone: said as clap says its own (the message,
/// the usage, a pointer to `--help`), with exit code 2.
fn misuse(kind: ErrorKind, message: impl std::fmt::Display) -> ! {
    Cli::command().error(kind, message).exit()
}

/// A file given on the command line that cannot be used, or an address that cannot be listened
/// on: exit code 2, as a misuse, but without the usage, which would not help.
fn unusable(message: impl std::fmt::Display) -> ! {
    eprintln!("cluster-discovery: {message}");
    std::process::exit(2)
}

/// Logs to stderr through a thread of its own and a buffer of `lines`: a stderr nobody reads
/// (a full pipe) then drops lines, counted, instead of blocking the runtime's workers, and so
/// every request, on a write that never returns.
fn logging(lines: usize) -> (WorkerGuard, ErrorCounter) {
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(lines)
        .thread_name("cluster-discovery-log")
        .finish(std::io::stderr());
    let dropped = writer.error_counter();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(writer)
        .init();
    (guard, dropped)
}

/// Says, every 10 s, how many log lines were dropped meanwhile (a line that may be dropped
/// too, while the reader is still behind: the count goes on).
async fn report_dropped(dropped: ErrorCounter) {
    let mut said = 0;
    let mut every = tokio::time::interval(Duration::from_secs(10));
    loop {
        every.tick().await;
        let now = dropped.dropped_lines();
        if now > said {
            tracing::warn!(
                "{} log lines dropped ({now} since start): whoever reads this server's stderr \
                 does not keep up",
                now - said
            );
            said = now;
        }
    }
}

#[tokio::main]
async fn main() {
    let args = match Cli::parse().command {
        Command::Serve(args) => *args,
        Command::Gateway(args) => return gateway::run(args).await,
    };
    let options = Options::new(args);
    let (_flushed_at_exit, dropped) = logging(options.log_lines);
    tokio::spawn(report_dropped(dropped));
    let stop = Stop::install();
    let running = match options.server.start(options.addr).await {
        Ok(r) => r,
        Err(e) => unusable(format!("cannot start on {}: {e}", options.addr)),
    };
    println!("listening on {}", running.url());
    stop.wait().await;
    tracing::info!("finishing the requests in flight");
    running.shutdown().await;
}
