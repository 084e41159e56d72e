//! The watch that keeps the local copy current: every change under the cluster's root from
//! the revision last seen, applied in order. When the stream breaks (etcd restarted, the
//! connection lost), it is opened again from the same revision; when that revision has been
//! compacted away, the whole registry is read again and the copy rebuilt from it.

use std::sync::Weak;
use std::time::Duration;

use etcd_client::{Client, EventType, WatchOptions};

use crate::keys::Keys;
use crate::registry::{Inner, lock};

const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_CAP: Duration = Duration::from_secs(2);

/// Watches from `next` until the registry is dropped or halted.
pub(crate) async fn run(inner: Weak<Inner>, client: Client, keys: Keys, mut next: i64) {
    let mut retry = RETRY_FIRST;
    loop {
        match watch(&inner, &client, &keys, next).await {
            Ended::Dropped => return,
            Ended::Broken { at, why } => {
                if at > next {
                    retry = RETRY_FIRST;
                }
                next = at;
                tracing::warn!("the etcd watch broke ({why}); watching again from revision {next}");
            }
            Ended::Compacted => {
                let Some(strong) = inner.upgrade() else {
                    return;
                };
                match strong.read_all(&client, &keys).await {
                    Ok(revision) => {
                        tracing::info!(
                            "revision {next} was compacted away: the registry was read again at {revision}"
                        );
                        next = revision + 1;
                        continue;
                    }
                    Err(e) => tracing::warn!("reading the registry again: {e}"),
                }
            }
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(RETRY_CAP);
    }
}

enum Ended {
    Dropped,
    Broken { at: i64, why: String },
    Compacted,
}

async fn watch(inner: &Weak<Inner>, client: &Client, keys: &Keys, mut next: i64) -> Ended {
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(next)
        .with_progress_notify();
    let mut watcher = client
        .watch_client()
        .max_decoding_message_size(crate::registry::MAX_MESSAGE);
    let mut stream = match watcher.watch(keys.root(), Some(options)).await {
        Ok(stream) => stream,
        Err(e) => {
            return Ended::Broken {
                at: next,
                why: e.to_string(),
            };
        }
    };
    let Some(broken) = inner.upgrade().map(|i| i.broken.clone()) else {
        return Ended::Dropped;
    };
    loop {
        // Waits holding no strong reference: a registry every clone of which is dropped goes.
        let message = tokio::select! {
            m = stream.message() => m,
            // A request failed: the connection may be dead without the stream knowing.
            () = broken.notified() => {
                return Ended::Broken { at: next, why: "a request to etcd failed".to_owned() };
            }
        };
        let Some(strong) = inner.upgrade() else {
            return Ended::Dropped;
        };
        let response = match message {
            Ok(Some(response)) => response,
            Ok(None) => {
                return Ended::Broken {
                    at: next,
                    why: "the stream ended".to_owned(),
                };
            }
            Err(e) => {
                return Ended::Broken {
                    at: next,
                    why: e.to_string(),
                };
            }
        };
        if response.compact_revision() > 0 {
            return Ended::Compacted;
        }
        if response.canceled() {
            return Ended::Broken {
                at: next,
                why: format!("etcd cancelled it: {}", response.cancel_reason()),
            };
        }
        let mut changed = false;
        {
            let mut mirror = lock(&strong.mirror);
            for event in response.events() {
                let Some(kv) = event.kv() else { continue };
                let change = match event.event_type() {
                    EventType::Put => mirror
                        .parse(keys, kv.key(), kv.value())
                        .map(|(key, value)| (key, Some(value))),
                    EventType::Delete => keys.parse(kv.key()).map(|key| (key, None)),
                };
                if let Some((key, value)) = change {
                    changed |= mirror.apply(key, kv.mod_revision(), value);
                }
                next = next.max(kv.mod_revision() + 1);
            }
            if let Some(header) = response.header() {
                next = next.max(header.revision() + 1);
                mirror.advance(header.revision());
            }
        }
        if changed {
            strong.publish();
        }
    }
}
