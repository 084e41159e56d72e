//! What stops `serve` and `gateway`: SIGTERM (what `kill`, systemd and `docker stop` send) or
//! ctrl-c (SIGINT), either way a graceful stop and exit code 0.

/// The two signals, listened for from when [`Stop::install`] is called: a signal that comes
/// between the start and the wait (say, right after `listening on` is printed) is kept for
/// the wait, instead of ending the process the default way (killed, no drain).
pub(crate) struct Stop {
    #[cfg(unix)]
    signals: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Stop {
    /// Listens for SIGTERM and SIGINT from now on (on a platform without SIGTERM, or if the
    /// handlers cannot be installed, [`Stop::wait`] waits for ctrl-c alone).
    pub(crate) fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let signals = signal(SignalKind::terminate())
                .and_then(|term| Ok((term, signal(SignalKind::interrupt())?)))
                .ok();
            Self { signals }
        }
        #[cfg(not(unix))]
        Self {}
    }

    /// Returns at the first SIGTERM or ctrl-c, and says which.
    pub(crate) async fn wait(self) {
        #[cfg(unix)]
        if let Some((mut term, mut interrupt)) = self.signals {
            let which = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = interrupt.recv() => "ctrl-c",
            };
            tracing::info!("{which}: stopping");
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("ctrl-c: stopping");
    }
}
