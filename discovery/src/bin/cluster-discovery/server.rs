//! From `serve`'s options to a server: the checks that span options, the passwords from their
//! files or the environment, and the TLS files read.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::error::ErrorKind;
use cluster_discovery::server::{
    Access, Credentials, Dashboard, RegistryServer, ServerConfig, ServerTls,
};

use crate::args::{SecurityArgs, ServeArgs};
use crate::{misuse, unusable};

/// What `serve` runs.
pub(crate) struct Options {
    /// Where to listen.
    pub(crate) addr: SocketAddr,
    /// The server, configured.
    pub(crate) server: RegistryServer,
    /// Log lines waiting for stderr, past which they are dropped.
    pub(crate) log_lines: usize,
}

impl Options {
    /// The server that `args` describe; exits 2 on a misuse clap cannot see, or on a file that
    /// cannot be read.
    pub(crate) fn new(args: ServeArgs) -> Self {
        let mut config = ServerConfig::default();
        config.limits = args.limits.limits();
        config.lease_duration = Duration::from_secs(args.lease_duration);
        config.renewal_interval = Duration::from_secs(args.renewal_interval);
        config.self_preservation = !args.no_self_preservation;
        config.warm_up = !args.no_warm_up;
        config.warm_up_window = args.warm_up.map(Duration::from_secs);
        for (flag, d) in [
            ("--lease-duration", config.lease_duration),
            ("--renewal-interval", config.renewal_interval),
            ("--warm-up", config.warm_up_window.unwrap_or_default()),
        ] {
            if d > config.limits.max_lease {
                misuse(
                    ErrorKind::ArgumentConflict,
                    format!(
                        "{flag} {} is longer than --max-lease {}",
                        d.as_secs(),
                        config.limits.max_lease.as_secs()
                    ),
                );
            }
        }
        // The last of the three options wins (they override each other); with none, the
        // token from the environment, if any.
        let dashboard = if args.open_dashboard {
            Dashboard::Open
        } else if args.no_dashboard {
            Dashboard::Off
        } else if let Some(token) = args.dashboard_token {
            Dashboard::token(token)
        } else {
            Dashboard::Token(
                std::env::var("DISCOVERY_DASHBOARD_TOKEN")
                    .ok()
                    .filter(|t| !t.is_empty()),
            )
        };
        let mut server = RegistryServer::new()
            .config(config)
            .peers(args.peers)
            .dashboard(dashboard)
            .access(access(&args.security));
        let security = args.security;
        if let (Some(cert), Some(key)) = (security.tls_cert, security.tls_key) {
            match ServerTls::from_pem_files(&cert, &key) {
                Ok(tls) => server = server.tls(tls),
                Err(e) => unusable(e),
            }
        }
        if let Some(ca) = security.tls_ca {
            match std::fs::read(&ca) {
                Ok(pem) => server = server.peer_ca(pem),
                Err(e) => unusable(format!("--tls-ca {}: {e}", ca.display())),
            }
        }
        if let Some(own) = args.own_url {
            server = server.own_url(&own);
        }
        Options {
            addr: SocketAddr::new(args.bind, args.port),
            server,
            log_lines: args.limits.log_buffer_lines,
        }
    }
}

/// Who may write and read: credentials, or open with `--open`; neither is a misuse.
fn access(security: &SecurityArgs) -> Access {
    for (given, flag) in [
        (security.password.is_some(), "--password"),
        (security.peer_password.is_some(), "--peer-password"),
    ] {
        if given {
            misuse(
                ErrorKind::UnknownArgument,
                format!(
                    "{flag}: a password on the command line is visible to every user (`ps`); \
                     use {flag}-file FILE or the environment variable"
                ),
            );
        }
    }
    let mut access = Access::open();
    access.clients = credentials(
        &security.user,
        &security.password_file,
        "DISCOVERY_PASSWORD",
        "--user",
    );
    access.peers = credentials(
        &security.peer_user,
        &security.peer_password_file,
        "DISCOVERY_PEER_PASSWORD",
        "--peer-user",
    );
    if security.protect_reads {
        if !access.is_secured() {
            misuse(
                ErrorKind::MissingRequiredArgument,
                "--protect-reads needs --user or --peer-user",
            );
        }
        access = access.protect_reads();
    }
    // Open only when asked for by name (clap keeps --open apart from the users).
    if !access.is_secured() && !security.open {
        misuse(
            ErrorKind::MissingRequiredArgument,
            "serve needs credentials or --open: --user USER (its password in --password-file \
             FILE or DISCOVERY_PASSWORD) and/or --peer-user USER (--peer-password-file FILE or \
             DISCOVERY_PEER_PASSWORD); or --open to serve without credentials, where anyone \
             who reaches the port writes (behind an authenticating proxy, or on a laptop)",
        );
    }
    access
}

/// A user and its password: from the file if one is given, else from the environment variable.
fn credentials(
    user: &Option<String>,
    file: &Option<PathBuf>,
    env: &str,
    flag: &str,
) -> Option<Credentials> {
    // clap sees that a password file comes with its user, and that the name is one.
    let user = user.as_ref()?;
    let password = match file {
        Some(f) => match std::fs::read_to_string(f) {
            Ok(text) => text.lines().next().unwrap_or("").to_owned(),
            Err(e) => unusable(format!(
                "{flag}: cannot read the password file {}: {e}",
                f.display()
            )),
        },
        None => std::env::var(env).unwrap_or_default(),
    };
    if password.is_empty() {
        misuse(
            ErrorKind::MissingRequiredArgument,
            format!("{flag} {user} needs a password: a password file or {env}"),
        );
    }
    Some(Credentials::new(user.clone(), password))
}
