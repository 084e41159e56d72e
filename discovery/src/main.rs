//! `cluster-discovery serve`: a Eureka-compatible registry server.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use cluster_discovery::server::{Dashboard, RegistryServer, ServerConfig};

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

Prints `listening on http://ADDR/eureka/` once it accepts requests.";

fn fail(message: &str) -> ! {
    eprintln!("cluster-discovery: {message}\n\n{USAGE}");
    std::process::exit(2)
}

struct Options {
    addr: SocketAddr,
    server: RegistryServer,
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
    let mut it = args.iter();
    let value = |it: &mut std::slice::Iter<'_, String>, flag: &str| -> String {
        it.next()
            .cloned()
            .unwrap_or_else(|| fail(&format!("{flag} needs a value")))
    };
    let secs = |v: String, flag: &str| -> Duration {
        v.parse()
            .map(Duration::from_secs)
            .unwrap_or_else(|_| fail(&format!("{flag}: `{v}` is not a number of seconds")))
    };
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
            "--lease-duration" => config.lease_duration = secs(value(&mut it, arg), arg),
            "--renewal-interval" => config.renewal_interval = secs(value(&mut it, arg), arg),
            "--no-self-preservation" => config.self_preservation = false,
            "--no-warm-up" => config.warm_up = false,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0)
            }
            other => fail(&format!("unknown option `{other}`")),
        }
    }
    let mut server = RegistryServer::new()
        .config(config)
        .peers(peers)
        .dashboard(dashboard);
    if let Some(own) = own {
        server = server.own_url(&own);
    }
    Options {
        addr: SocketAddr::new(bind, port),
        server,
    }
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
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
    let running = match options.server.start(options.addr).await {
        Ok(r) => r,
        Err(e) => fail(&format!("cannot listen on {}: {e}", options.addr)),
    };
    println!("listening on {}", running.url());
    let _ = tokio::signal::ctrl_c().await;
    running.shutdown().await;
}
