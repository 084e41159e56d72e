//! What stops `serve` and `gateway`: SIGTERM (what `kill`, systemd and `docker stop` send) or
//! ctrl-c (SIGINT), either way a graceful stop and exit code 0. SIGHUP, which nginx users send
//! to reload a configuration, does neither: neither command reloads, and the default action
//! (killed at once, requests in flight cut) is the worst answer to it; it is logged instead.

/// The signals, listened for from when [`Stop::install`] is called: a signal that comes
/// between the start and the wait (say, right after `listening on` is printed) is kept for
/// the wait, instead of ending the process the default way (killed, no drain).
pub(crate) struct Stop {
    #[cfg(unix)]
    signals: Option<Signals>,
}

#[cfg(unix)]
struct Signals {
    term: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Stop {
    /// Listens for SIGTERM, SIGINT and SIGHUP from now on (on a platform without them, or if
    /// the handlers cannot be installed, [`Stop::wait`] waits for ctrl-c alone).
    pub(crate) fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let signals = (|| {
                Ok::<_, std::io::Error>(Signals {
                    term: signal(SignalKind::terminate())?,
                    interrupt: signal(SignalKind::interrupt())?,
                    hangup: signal(SignalKind::hangup())?,
                })
            })()
            .ok();
            Self { signals }
        }
        #[cfg(not(unix))]
        Self {}
    }

    /// Returns at the first SIGTERM or ctrl-c, and says which.
    pub(crate) async fn wait(self) {
        #[cfg(unix)]
        if let Some(mut s) = self.signals {
            let which = loop {
                tokio::select! {
                    _ = s.term.recv() => break "SIGTERM",
                    _ = s.interrupt.recv() => break "ctrl-c",
                    _ = s.hangup.recv() => tracing::warn!(
                        "SIGHUP: nothing is reloaded; to change the configuration, start a new \
                         process (SIGTERM drains this one)"
                    ),
                }
            };
            tracing::info!("{which}: stopping");
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("ctrl-c: stopping");
    }
}
