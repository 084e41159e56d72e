//! `cluster-discovery serve`: a Eureka-compatible registry server.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use cluster_discovery::server::{
    Access, Credentials, Dashboard, Limits, RegistryServer, ServerConfig, ServerTls,
};
use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};

const USAGE: &str = "\
usage: cluster-discovery serve [options]

  --port PORT              port to listen on (default 8761; 0: any free port)
  --bind ADDR              address to listen on (default 127.0.0.1)
  --peer URL               another registry server, e.g. http://10.0.0.2:8761/eureka/ (repeatable)
  --own-url URL            this server's URL, removed from the peers (one list for all servers)
  --dashboard-token TOKEN  the dashboard's bearer token (or DISCOVERY_DASHBOARD_TOKEN)
  --open-dashboard         serve the dashboard without authentication
  --no-dashboard           no dashboard routes
  --lease-duration SECS    lease duration for instances that do not say (default 90)
  --renewal-interval SECS  heartbeat interval for instances that do not say (default 30)
  --no-self-preservation   expire quiet instances even when most of the registry went quiet
  --no-warm-up             answer reads at once after starting with an empty registry (by
                           default they answer 503 for one renewal interval, or until an
                           instance registers, so that clients keep their copy)

Security (see `The server's security` in docs/discovery.md):
  --user USER              writes need HTTP Basic USER and its password (clients put
                           http://USER:PASSWORD@host:port/eureka/ in their server URL)
  --password-file FILE     USER's password, the file's first line (or DISCOVERY_PASSWORD)
  --peer-user USER         replication (peerreplication/batch, isReplication=true) needs this
                           user, which this server also sends to its peers
  --peer-password-file FILE  its password (or DISCOVERY_PEER_PASSWORD)
  --protect-reads          reads need a credential too (by default they are open)
  --tls-cert FILE          serve HTTPS with this certificate chain (PEM) ...
  --tls-key FILE           ... and its private key (PEM)
  --tls-ca FILE            trust this CA (PEM) for https:// peers, besides the web roots
Passwords are never taken on the command line (where `ps` shows them).

Limits (see `Limits` in docs/discovery.md; counts at least 1, seconds 1 to 31536000):
  --max-body-bytes N         largest request body (default 1048576; batches 8 times it)
  --max-batch-items N        items in one replication batch (default 1000)
  --max-apps N               applications in the registry (default 1000)
  --max-instances-per-app N  instances of one application (default 1000)
  --max-instances N          instances in all (default 10000)
  --max-metadata-entries N   metadata entries of one instance (default 128)
  --max-instance-bytes N     text of one instance, fields and metadata (default 65536)
  --max-lease SECS           longest lease or renewal interval an instance gets (default 86400)
  --max-clock-skew SECS      how far ahead lastDirtyTimestamp may be (default 86400)
  --max-connections N        connections open at once (default 1024)
  --header-read-timeout SECS a request's head, a TLS handshake, an idle connection (default 10)
  --request-timeout SECS     a request, its body included (default 30)
  --write-timeout SECS       a response its client does not read (default 30)
  --max-peer-queue N         writes waiting for one peer (default 30000)
  --warning-interval SECS    a repeated warning, per source (default 10)
  --log-buffer-lines N       log lines waiting for stderr, past which they are dropped and
                             counted (default 8192)

Prints `listening on http://ADDR/eureka/` once it accepts requests.";

fn fail(message: &str) -> ! {
    eprintln!("cluster-discovery: {message}\n\n{USAGE}");
    std::process::exit(2)
}

struct Options {
    addr: SocketAddr,
    server: RegistryServer,
    log_lines: usize,
}

/// The longest duration a flag takes: a year (timers cannot represent every duration).
const LONGEST_SECS: u64 = 365 * 24 * 3600;

/// A count: a positive integer.
fn count(v: &str, flag: &str) -> usize {
    match v.parse() {
        Ok(n) if n > 0 => n,
        _ => fail(&format!("{flag}: `{v}` is not a positive integer")),
    }
}

/// Seconds: 1 to a year.
fn secs(v: &str, flag: &str) -> Duration {
    match v.parse() {
        Ok(n) if (1..=LONGEST_SECS).contains(&n) => Duration::from_secs(n),
        _ => fail(&format!(
            "{flag}: `{v}` is not a number of seconds from 1 to {LONGEST_SECS}"
        )),
    }
}

/// A limit's flag: `Some(())` when `flag` is one and `limits` took its value.
fn limit(limits: &mut Limits, flag: &str, v: &str) -> Option<()> {
    match flag {
        "--max-body-bytes" => limits.max_body_bytes = count(v, flag),
        "--max-batch-items" => limits.max_batch_items = count(v, flag),
        "--max-apps" => limits.max_apps = count(v, flag),
        "--max-instances-per-app" => limits.max_instances_per_app = count(v, flag),
        "--max-instances" => limits.max_instances = count(v, flag),
        "--max-metadata-entries" => limits.max_metadata_entries = count(v, flag),
        "--max-instance-bytes" => limits.max_instance_bytes = count(v, flag),
        "--max-lease" => limits.max_lease = secs(v, flag),
        "--max-clock-skew" => limits.max_clock_skew = secs(v, flag),
        "--max-connections" => limits.max_connections = count(v, flag),
        "--header-read-timeout" => limits.header_read_timeout = secs(v, flag),
        "--request-timeout" => limits.request_timeout = secs(v, flag),
        "--write-timeout" => limits.write_timeout = secs(v, flag),
        "--max-peer-queue" => limits.max_peer_queue = count(v, flag),
        "--warning-interval" => limits.warning_interval = secs(v, flag),
        _ => return None,
    }
    Some(())
}

fn parse(args: &[String]) -> Options {
    let mut port: u16 = 8761;
    let mut bind: IpAddr = [127, 0, 0, 1].into();
    let mut peers = Vec::new();
    let mut own = None;
    let mut dashboard = Dashboard::Token(
        std::env::var("DISCOVERY_DASHBOARD_TOKEN")
            .ok()
            .filter(|t| !t.is_empty()),
    );
    let mut config = ServerConfig::default();
    let (mut user, mut password_file) = (None, None);
    let (mut peer_user, mut peer_password_file) = (None, None);
    let mut protect_reads = false;
    let (mut tls_cert, mut tls_key, mut tls_ca) = (None, None, None);
    let mut it = args.iter();
    let value = |it: &mut std::slice::Iter<'_, String>, flag: &str| -> String {
        it.next()
            .cloned()
            .unwrap_or_else(|| fail(&format!("{flag} needs a value")))
    };
    let mut log_lines = 8_192;
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--port" => {
                let v = value(&mut it, arg);
                port = v
                    .parse()
                    .unwrap_or_else(|_| fail(&format!("--port: `{v}` is not a port")));
            }
            "--bind" => {
                let v = value(&mut it, arg);
                bind = v
                    .parse()
                    .unwrap_or_else(|_| fail(&format!("--bind: `{v}` is not an IP address")));
            }
            "--peer" => peers.push(value(&mut it, arg)),
            "--own-url" => own = Some(value(&mut it, arg)),
            "--dashboard-token" => dashboard = Dashboard::token(value(&mut it, arg)),
            "--open-dashboard" => dashboard = Dashboard::Open,
            "--no-dashboard" => dashboard = Dashboard::Off,
            "--lease-duration" => config.lease_duration = secs(&value(&mut it, arg), arg),
            "--renewal-interval" => config.renewal_interval = secs(&value(&mut it, arg), arg),
            "--log-buffer-lines" => log_lines = count(&value(&mut it, arg), arg),
            "--no-self-preservation" => config.self_preservation = false,
            "--no-warm-up" => config.warm_up = false,
            "--user" => user = Some(value(&mut it, arg)),
            "--password-file" => password_file = Some(value(&mut it, arg)),
            "--peer-user" => peer_user = Some(value(&mut it, arg)),
            "--peer-password-file" => peer_password_file = Some(value(&mut it, arg)),
            "--protect-reads" => protect_reads = true,
            "--tls-cert" => tls_cert = Some(value(&mut it, arg)),
            "--tls-key" => tls_key = Some(value(&mut it, arg)),
            "--tls-ca" => tls_ca = Some(value(&mut it, arg)),
            "--password" | "--peer-password" => fail(&format!(
                "{arg}: a password on the command line is visible to every user (`ps`); \
                 use {arg}-file FILE or the environment variable"
            )),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0)
            }
            other
                if other.starts_with("--")
                    && limit(&mut Limits::default(), other, "1").is_some() =>
            {
                let v = value(&mut it, arg);
                let _ = limit(&mut config.limits, other, &v);
            }
            other => fail(&format!("unknown option `{other}`")),
        }
    }
    for (flag, d) in [
        ("--lease-duration", config.lease_duration),
        ("--renewal-interval", config.renewal_interval),
    ] {
        if d > config.limits.max_lease {
            fail(&format!(
                "{flag} {} is longer than --max-lease {}",
                d.as_secs(),
                config.limits.max_lease.as_secs()
            ));
        }
    }
    let mut access = Access::open();
    access.clients = credentials(user, password_file, "DISCOVERY_PASSWORD", "--user");
    access.peers = credentials(
        peer_user,
        peer_password_file,
        "DISCOVERY_PEER_PASSWORD",
        "--peer-user",
    );
    if protect_reads {
        if !access.is_secured() {
            fail("--protect-reads needs --user or --peer-user");
        }
        access = access.protect_reads();
    }
    let mut server = RegistryServer::new()
        .config(config)
        .peers(peers)
        .dashboard(dashboard)
        .access(access);
    match (tls_cert, tls_key) {
        (None, None) => {}
        (Some(cert), Some(key)) => match ServerTls::from_pem_files(&cert, &key) {
            Ok(tls) => server = server.tls(tls),
            Err(e) => fail(&e.to_string()),
        },
        _ => fail("--tls-cert and --tls-key go together"),
    }
    if let Some(ca) = tls_ca {
        match std::fs::read(&ca) {
            Ok(pem) => server = server.peer_ca(pem),
            Err(e) => fail(&format!("--tls-ca {ca}: {e}")),
        }
    }
    if let Some(own) = own {
        server = server.own_url(&own);
    }
    Options {
        addr: SocketAddr::new(bind, port),
        server,
        log_lines,
    }
}

/// A user and its password: from the file if one is given, else from the environment variable.
fn credentials(
    user: Option<String>,
    file: Option<String>,
    env: &str,
    flag: &str,
) -> Option<Credentials> {
    let Some(user) = user else {
        if file.is_some() {
            fail(&format!("a password file without {flag}"));
        }
        return None;
    };
    if user.is_empty() || user.contains(':') {
        fail(&format!("{flag}: a user name is not empty and has no `:`"));
    }
    let password = match file {
        Some(f) => match std::fs::read_to_string(&f) {
            Ok(text) => text.lines().next().unwrap_or("").to_owned(),
            Err(e) => fail(&format!("{flag}: cannot read the password file {f}: {e}")),
        },
        None => std::env::var(env).unwrap_or_default(),
    };
    if password.is_empty() {
        fail(&format!(
            "{flag} {user} needs a password: a password file or {env}"
        ));
    }
    Some(Credentials::new(user, password))
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve") => {}
        Some("-h" | "--help") => {
            println!("{USAGE}");
            return;
        }
        _ => fail("the only command is `serve`"),
    }
    let options = parse(&args[1..]);
    let (_flushed_at_exit, dropped) = logging(options.log_lines);
    tokio::spawn(report_dropped(dropped));
    let running = match options.server.start(options.addr).await {
        Ok(r) => r,
        Err(e) => fail(&format!("cannot start on {}: {e}", options.addr)),
    };
    println!("listening on {}", running.url());
    let _ = tokio::signal::ctrl_c().await;
    running.shutdown().await;
}
