//! `cluster dashboard NODE HOST:PORT`: a node's dashboard in a browser on this machine.
//!
//! The node serves its dashboard and metrics only over mutual TLS (`cluster/src/admin/`), and a
//! browser has no client certificate unless one is imported into it. So this command listens
//! in plaintext on a loopback address and forwards each `GET /` and `GET /metrics` to the node
//! under the operator's identity (`--certs DIR --name NAME`):
//!
//! 1. **Who may ask** (`browser.rs`): only this machine. The listener must be a loopback
//!    address (`args.rs` refuses another, exit 2: a plaintext port that reads the cluster with
//!    the operator's certificate must not be open to the network), and a request whose `Host`
//!    names a site rather than an address or `localhost` is refused (`421`), as the node's own
//!    plaintext endpoint does: a web page that made its name resolve to 127.0.0.1 (DNS
//!    rebinding) cannot read the cluster through the operator's browser.
//! 2. **What a browser can make it hold**: [`MAX_BROWSERS`] connections at once (the next waits
//!    in the listen backlog), a request head of at most 8 KiB read within 5 s, one request per
//!    connection.
//! 3. **The node** (`upstream.rs`): a new TLS connection per request, checked against the
//!    cluster's CA and the node's name; 10 s for the whole fetch; an answer past 4 MiB is
//!    refused (the node's page stays under 400 KB). A failure is a `502` saying why, and the
//!    same reason on stderr, once until it changes.

mod browser;
mod upstream;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::args::{DashboardArgs, JoinArgs};
use crate::{Failure, Stop, misuse};

/// Browser connections served at once: a browser opens up to 6 per host.
const MAX_BROWSERS: usize = 16;

/// Serves the dashboard until ctrl-c or SIGTERM.
pub(crate) async fn run(
    join: &JoinArgs,
    args: DashboardArgs,
    stop: &mut Stop,
) -> Result<(), Failure> {
    if join.insecure {
        misuse(
            "the dashboard forwards over mutual TLS: give --certs DIR and --name NAME (a plaintext \
             endpoint, `metrics_insecure`, opens in a browser as it is)",
        );
    }
    let (Some(dir), Some(name)) = (&join.certs, &join.name) else {
        misuse(
            "no identity: give --certs DIR and --name NAME (`cluster issue --dir DIR --node NAME` \
             makes one)",
        );
    };
    let upstream = Arc::new(upstream::Upstream::new(dir, name, &args.node, &args.addr)?);
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| Failure::Failed(format!("cannot listen on {}: {e}", args.listen)))?;
    let local = listener
        .local_addr()
        .map_err(|e| Failure::Failed(format!("cannot listen on {}: {e}", args.listen)))?;
    crate::out::line(format!(
        "dashboard of {} at http://{local}/ (Ctrl-C to stop)",
        crate::out::shown(&args.node)
    ));
    let places = Arc::new(Semaphore::new(MAX_BROWSERS));
    loop {
        // A place first, then the connection: past the bound, browsers wait in the backlog.
        let place = tokio::select! {
            place = places.clone().acquire_owned() => place,
            () = stop.wait() => return Ok(()),
        };
        let Ok(place) = place else {
            return Ok(());
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.wait() => return Ok(()),
        };
        let Ok((stream, _)) = accepted else {
            // Out of file handles, most likely: a pause, not a spin.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        };
        let upstream = upstream.clone();
        tokio::spawn(async move {
            browser::exchange(stream, &upstream).await;
            drop(place);
        });
    }
}
