//! Keeps one instance registered: registers, heartbeats, registers again when a heartbeat
//! finds the server does not know it (a restarted server, an expiry), deregisters on shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};

use super::{ClientError, EurekaClient, Heartbeat};
use crate::model::Instance;

/// Registers an instance and keeps it registered.
#[derive(Debug)]
pub struct Registrar {
    client: EurekaClient,
    instance: Instance,
}

/// A running registrar. [`RegistrarHandle::deregister`] on shutdown: the difference between a
/// clean deploy and a lease's worth of failed calls. Dropping it stops the heartbeats without
/// deregistering (as a crash would).
#[derive(Debug)]
pub struct RegistrarHandle {
    client: EurekaClient,
    instance: Instance,
    stop: Arc<Notify>,
    registrations: watch::Receiver<u64>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Registrar {
    /// A registrar of `instance` with these servers. Its heartbeat interval is the instance's
    /// `leaseInfo.renewalIntervalInSecs` (30 s if it does not say).
    pub fn new(client: EurekaClient, instance: Instance) -> Self {
        Self { client, instance }
    }

    /// Starts registering and heartbeating in the background.
    pub fn start(mut self) -> RegistrarHandle {
        if self.instance.lease.renewal_interval_secs == 0 {
            self.instance.lease.renewal_interval_secs = 30;
        }
        if self.instance.last_dirty_timestamp == 0 {
            self.instance.last_dirty_timestamp = self.client.now_ms();
        }
        let stop = Arc::new(Notify::new());
        let (tx, rx) = watch::channel(0);
        let task = tokio::spawn(run(
            self.client.clone(),
            self.instance.clone(),
            stop.clone(),
            tx,
        ));
        RegistrarHandle {
            client: self.client,
            instance: self.instance,
            stop,
            registrations: rx,
            task: Some(task),
        }
    }
}

async fn run(
    client: EurekaClient,
    instance: Instance,
    stop: Arc<Notify>,
    registrations: watch::Sender<u64>,
) {
    let interval = Duration::from_secs(instance.lease.renewal_interval_secs);
    let mut registered = false;
    loop {
        if registered {
            match client.heartbeat(&instance).await {
                Ok(Heartbeat::Renewed) => {}
                Ok(Heartbeat::Unknown) => {
                    tracing::info!(
                        "the registry does not know {} of {}: registering again",
                        instance.id(),
                        instance.app
                    );
                    registered = false;
                }
                Err(e) => tracing::warn!("heartbeat of {} failed: {e}", instance.id()),
            }
        }
        if !registered {
            match client.register(&instance).await {
                Ok(()) => {
                    registered = true;
                    registrations.send_modify(|n| *n += 1);
                }
                Err(e) => tracing::warn!("registering {} failed: {e}", instance.id()),
            }
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = stop.notified() => return,
        }
    }
}

impl RegistrarHandle {
    /// How many times the instance has been registered so far (1 after the first, more after
    /// re-registrations).
    pub fn registrations(&self) -> u64 {
        *self.registrations.borrow()
    }

    /// Waits until the instance has been registered at least `n` times.
    pub async fn registered(&mut self, n: u64) {
        let _ = self.registrations.wait_for(|c| *c >= n).await;
    }

    /// Stops heartbeating and removes the instance from the registry.
    pub async fn deregister(mut self) -> Result<(), ClientError> {
        self.stop.notify_one();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.client
            .cancel(&self.instance.app, self.instance.id())
            .await
            .map(|_| ())
    }
}

impl Drop for RegistrarHandle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
