//! The watch that keeps the local copy current: every change under the cluster's root from
//! the revision last seen, applied in order. When the stream breaks (etcd restarted, the
//! connection lost), it is opened again from the same revision; when that revision has been
//! compacted away, or etcd's revision went back (restored from a snapshot), the whole registry
//! is read again and the copy rebuilt from it.

use std::sync::Weak;
use std::time::Duration;

use etcd_client::{Client, EventType, WatchOptions, WatchResponse, WatchStream};
use futures::FutureExt;

use crate::keys::Keys;
use crate::registry::{Inner, lock};

const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_CAP: Duration = Duration::from_secs(2);
/// Watch responses applied at most before the copy is shown: a flood of writes costs one
/// rebuild of the copy per batch, not one per response.
const BATCH: usize = 256;

/// Watches from `next` until the registry is dropped or halted.
pub(crate) async fn run(inner: Weak<Inner>, client: Client, keys: Keys, mut next: i64) {
    let mut retry = RETRY_FIRST;
    loop {
        let why = match watch(&inner, &client, &keys, next).await {
            Ended::Dropped => return,
            Ended::Broken { at, why } => {
                if at > next {
                    retry = RETRY_FIRST;
                }
                next = at;
                if why.contains("auth token") {
                    // The token did not survive an etcd restart, or expired: a new one.
                    let _ = client.refresh_token().await;
                }
                tracing::warn!("the etcd watch broke ({why}); watching again from revision {next}");
                None
            }
            Ended::ReadAgain(why) => Some(why),
        };
        if let Some(why) = why {
            let Some(strong) = inner.upgrade() else {
                return;
            };
            match strong.read_all(&client, &keys).await {
                Ok(revision) => {
                    tracing::info!("{why}: the registry was read again at revision {revision}");
                    next = revision + 1;
                    retry = RETRY_FIRST;
                    continue;
                }
                Err(e) => tracing::warn!("{why}; reading the registry again: {e}"),
            }
            // Still to be read again: `next` 0 makes the next watch fail over to a read.
            next = 0;
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(RETRY_CAP);
    }
}

enum Ended {
    Dropped,
    Broken {
        at: i64,
        why: String,
    },
    /// The copy must be rebuilt from a full read.
    ReadAgain(String),
}

async fn watch(inner: &Weak<Inner>, client: &Client, keys: &Keys, mut next: i64) -> Ended {
    if next == 0 {
        return Ended::ReadAgain("a read of the registry failed".to_owned());
    }
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
        let first = tokio::select! {
            m = stream.message() => m,
            // A request failed: the connection may be dead without the stream knowing.
            () = broken.notified() => {
                return Ended::Broken { at: next, why: "a request to etcd failed".to_owned() };
            }
        };
        let Some(strong) = inner.upgrade() else {
            return Ended::Dropped;
        };
        let mut changed = false;
        let mut message = first;
        let mut ended = None;
        for _ in 0..BATCH {
            let applied = match message {
                Ok(Some(response)) => apply(&strong, keys, &response, &mut next),
                Ok(None) => Err(Ended::Broken {
                    at: next,
                    why: "the stream ended".to_owned(),
                }),
                Err(e) => Err(Ended::Broken {
                    at: next,
                    why: e.to_string(),
                }),
            };
            match applied {
                Ok(c) => changed |= c,
                Err(end) => {
                    ended = Some(end);
                    break;
                }
            }
            // More already here: applied before the copy is shown.
            match next_ready(&mut stream) {
                Some(more) => message = more,
                None => break,
            }
        }
        // What was applied is shown, however the batch ended.
        if changed {
            strong.publish();
        }
        if let Some(ended) = ended {
            return ended;
        }
    }
}

fn next_ready(
    stream: &mut WatchStream,
) -> Option<Result<Option<WatchResponse>, etcd_client::Error>> {
    stream.message().now_or_never()
}

/// Applies one response to the mirror; says whether it changed, or how the watch ends.
fn apply(
    inner: &Inner,
    keys: &Keys,
    response: &WatchResponse,
    next: &mut i64,
) -> Result<bool, Ended> {
    if response.compact_revision() > 0 {
        return Err(Ended::ReadAgain(format!(
            "revision {next} was compacted away (etcd keeps from {})",
            response.compact_revision()
        )));
    }
    if response.canceled() {
        return Err(Ended::Broken {
            at: *next,
            why: format!("etcd cancelled it: {}", response.cancel_reason()),
        });
    }
    let header = response.header().map(|h| h.revision());
    if let Some(revision) = header
        && revision + 1 < *next
    {
        // etcd was restored from an older snapshot: changes we hold may never have been.
        lock(&inner.mirror).clear();
        return Err(Ended::ReadAgain(format!(
            "etcd's revision went back from {} to {revision}",
            *next - 1
        )));
    }
    let mut changed = false;
    let mut mirror = lock(&inner.mirror);
    for event in response.events() {
        let Some(kv) = event.kv() else { continue };
        let Some(key) = keys.parse(kv.key()) else {
            continue;
        };
        let value = match event.event_type() {
            // A value that does not read is as good as no value: every node then agrees (one
            // that reads the registry later skips it too), and the owner writes its own again.
            EventType::Put => mirror
                .parse(keys, kv.key(), kv.value())
                .map(|(_, value)| value),
            EventType::Delete => None,
        };
        changed |= mirror.apply(key, kv.mod_revision(), value);
        *next = (*next).max(kv.mod_revision() + 1);
    }
    // The `created` answer's header is etcd's revision when the watch was made, not how far
    // the watch has delivered: only events and progress reports say that.
    if !response.created()
        && let Some(revision) = header
    {
        *next = (*next).max(revision + 1);
        mirror.advance(revision);
    }
    Ok(changed)
}
