//! The response cache: `GET apps` and `GET apps/delta` served from a pre-serialised payload
//! per document and format, gzipped once per version for the clients that accept it.
//!
//! Every client polls these two reads (every 30 s each, by default), and at 100,000
//! instances the full registry is tens of megabytes of text: serialising it per request cost
//! each read the whole registry and held the store's lock meanwhile. Here:
//!
//! 1. A read asks the store for the document's version (`Store::version_of`: a counter of
//!    the changes, not of heartbeats) and, if the payload held is of that version, sends it
//!    as it is: a reference count, no copy.
//! 2. Otherwise one reader rebuilds it: the leases are copied under the store's lock (they
//!    share their instances: `store/snapshot.rs`), and serialised outside it (on the blocking pool when the registry is large, so that the
//!    runtime's threads go on answering heartbeats).
//! 3. Readers that come while a rebuild is running get the previous payload, if it was
//!    found current at most [`STALE_AT_MOST`] (1 s) ago; otherwise they wait for the rebuild.
//!    **That is the bound on staleness: a read may miss the writes of the last second and of
//!    one rebuild** (a few milliseconds at 1,000 instances, about a second at 100,000:
//!    `docs/benchmarks.md`). A payload nobody read for a while is not served once writes have
//!    changed the registry under it. A read that finds no payload at all waits for the
//!    rebuild. Eureka's read-only cache is refreshed every 30 s instead.
//! 4. A payload is made gzipped or plain, as the reader that builds it asks (gzipped as it
//!    is written, so the plain text is never held whole); the other is made from it for the
//!    first reader that asks for it, then kept (see [`Payload`]).
//!
//! Heartbeats do not change the version: the `lastRenewalTimestamp`s served are those of the
//! last change, as in Eureka's cache. The other reads (an application, an instance, a VIP)
//! are small and are answered from the store directly.

mod encoding;

use std::sync::{Arc, Mutex, OnceLock};

use axum::body::Bytes;

pub(crate) use encoding::accepts_gzip;

use super::store::{Document, Snapshot, Store};
use crate::model::Format;

/// Past this many instances a payload is large: it is built on the blocking pool, so that the
/// runtime's threads go on answering heartbeats, and made only as its reader asks (gzipped or
/// plain). Up to it, a payload is at most about 1 MiB of text and is kept both ways at once.
const LARGE_PAST: usize = 1_000;

/// One document in one format, at one version, gzipped or plain or both: what the reader
/// that built it asked for, and the other made from it for the first reader that asks for
/// the other, then kept. So a registry read only by gzip readers (every Eureka client sends
/// `Accept-Encoding: gzip`) holds no plain text: at 100,000 instances that is about 70 MiB
/// per format. Small payloads are kept both ways at once.
#[derive(Debug)]
pub(crate) struct Payload {
    version: (u64, u64),
    gzip: OnceLock<Bytes>,
    plain: OnceLock<Bytes>,
}

impl Payload {
    /// Serialises a snapshot, gzipped if `gzip` (on the calling thread).
    fn build(snapshot: &Snapshot, format: Format, gzip: bool) -> Self {
        let (packed, plain) = (OnceLock::new(), OnceLock::new());
        if gzip && snapshot.instances() > LARGE_PAST {
            // Compressed as it is written: the plain text is never held whole, so building
            // needs the gzip's 2 to 3 MiB at 100,000 instances, not the text's 70 to 100 MiB.
            // About 25 to 35 bytes of gzip per instance here; 64 leaves room.
            let capacity = snapshot.instances().saturating_mul(64);
            let _ = packed.set(encoding::gzip_from(capacity, |out| {
                snapshot.write(format, out)
            }));
        } else {
            let text = Bytes::from(snapshot.text(format));
            if snapshot.instances() <= LARGE_PAST {
                let _ = packed.set(encoding::gzip(&text));
            }
            let _ = plain.set(text);
        }
        Self {
            version: snapshot.version(),
            gzip: packed,
            plain,
        }
    }

    /// The body gzipped.
    pub(crate) async fn gzip(self: &Arc<Self>) -> Bytes {
        if let Some(g) = self.gzip.get() {
            return g.clone();
        }
        let me = self.clone();
        Self::blocking(move || {
            let plain = me.plain.get().cloned().unwrap_or_default();
            me.gzip.get_or_init(|| encoding::gzip(&plain)).clone()
        })
        .await
    }

    /// The body as it is.
    pub(crate) async fn plain(self: &Arc<Self>) -> Bytes {
        if let Some(p) = self.plain.get() {
            return p.clone();
        }
        let me = self.clone();
        Self::blocking(move || {
            let packed = me.gzip.get().cloned().unwrap_or_default();
            me.plain.get_or_init(|| encoding::gunzip(&packed)).clone()
        })
        .await
    }

    /// Large payloads only get here (small ones are kept both ways).
    async fn blocking(f: impl FnOnce() -> Bytes + Send + 'static) -> Bytes {
        match tokio::task::spawn_blocking(f).await {
            Ok(b) => b,
            // Only a panic in the compressor gets here (its input is our own text).
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

/// How long ago a payload must have been found current for a read to get it while another
/// reader rebuilds it.
const STALE_AT_MOST: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Debug, Default)]
struct Slot {
    current: Mutex<Option<Arc<Payload>>>,
    /// When the payload held was last found current (built, or read at its version).
    current_at: Mutex<Option<tokio::time::Instant>>,
    /// Held by the one reader rebuilding the payload.
    building: tokio::sync::Mutex<()>,
}

impl Slot {
    fn current(&self) -> Option<Arc<Payload>> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn fresh(&self, version: (u64, u64)) -> Option<Arc<Payload>> {
        let fresh = self.current().filter(|p| p.version == version);
        if fresh.is_some() {
            self.found_current();
        }
        fresh
    }

    fn found_current(&self) {
        *self.current_at.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(tokio::time::Instant::now());
    }

    /// The payload held, if it was current at most [`STALE_AT_MOST`] ago.
    fn recent(&self) -> Option<Arc<Payload>> {
        let at = *self.current_at.lock().unwrap_or_else(|p| p.into_inner());
        at.filter(|at| at.elapsed() <= STALE_AT_MOST)
            .and_then(|_| self.current())
    }
}

/// The payloads of `GET apps` and `GET apps/delta`, in JSON and XML.
#[derive(Debug, Default)]
pub(crate) struct ResponseCache {
    /// By [`index`].
    slots: [Slot; 4],
}

fn index(doc: Document, format: Format) -> usize {
    let d = match doc {
        Document::Apps => 0,
        Document::Delta => 2,
    };
    d + usize::from(format == Format::Xml)
}

impl ResponseCache {
    /// The payload of `doc` in `format`: the one held if it is current, or the one held while
    /// another reader rebuilds it, or a new one.
    /// `gzip`: whether the reader accepts gzip (what a new payload is made as first).
    pub(crate) async fn get(
        &self,
        store: &Store,
        doc: Document,
        format: Format,
        gzip: bool,
    ) -> Arc<Payload> {
        let slot = &self.slots[index(doc, format)];
        if let Some(p) = slot.fresh(store.version_of(doc)) {
            return p;
        }
        let _building = match slot.building.try_lock() {
            Ok(guard) => guard,
            Err(_) => match slot.recent() {
                // Another reader is rebuilding it: this one is at most a second and a rebuild
                // behind.
                Some(previous) => return previous,
                None => slot.building.lock().await,
            },
        };
        // Whoever held the lock before may have rebuilt it already.
        if let Some(p) = slot.fresh(store.version_of(doc)) {
            return p;
        }
        let snapshot = store.snapshot(doc);
        let large = snapshot.instances() > LARGE_PAST;
        let build = move || Payload::build(&snapshot, format, gzip);
        let payload = Arc::new(if large {
            match tokio::task::spawn_blocking(build).await {
                Ok(p) => p,
                // Only a panic in the writer gets here; the store is untouched by it.
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        } else {
            build()
        });
        *slot.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(payload.clone());
        slot.found_current();
        payload
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Instance;
    use crate::server::{Clock, ServerConfig};

    fn store(instances: usize) -> Store {
        let store = Store::new(ServerConfig::default(), Clock::manual(1_000_000));
        for k in 0..instances {
            let app = format!("a{}", k / 1_000);
            let i = Instance::new(&app, "h", 1).with_id(format!("i-{k}"));
            store.register(&app, i).expect("registered");
        }
        store
    }

    /// Counts what it is given: its length, and the largest piece.
    #[derive(Default)]
    struct Pieces {
        total: usize,
        largest: usize,
    }

    impl std::io::Write for Pieces {
        fn write(&mut self, piece: &[u8]) -> std::io::Result<usize> {
            self.total += piece.len();
            self.largest = self.largest.max(piece.len());
            Ok(piece.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A large payload is gzipped as it is written: the document comes out an instance at a
    /// time, so its whole text (1 MiB here, 70 MiB at 100,000 instances) is never held, and
    /// what is gzipped is that text, byte for byte.
    #[test]
    fn a_large_payload_is_gzipped_as_it_is_written_never_held_whole() {
        let store = store(1_500);
        let snapshot = store.snapshot(Document::Apps);
        for format in [Format::Json, Format::Xml] {
            let mut pieces = Pieces::default();
            snapshot.write(format, &mut pieces).unwrap();
            let text = snapshot.text(format);
            assert_eq!(pieces.total, text.len());
            assert!(
                pieces.largest < 2_048,
                "{format:?}: a piece of {} bytes (an instance is under 1 KiB)",
                pieces.largest
            );
            let payload = Payload::build(&snapshot, format, true);
            assert!(payload.plain.get().is_none(), "no plain text kept");
            let packed = payload.gzip.get().expect("gzipped");
            assert_eq!(encoding::gunzip(packed), text);
        }
    }

    /// The staleness bound: a read while another reader rebuilds gets the payload before the
    /// change, at once; the first read after the rebuild gets the new one.
    #[tokio::test]
    async fn a_read_during_a_rebuild_gets_the_previous_payload() {
        let store = store(1_500); // past 1,000: a rebuild runs on the blocking pool
        let cache = ResponseCache::default();
        let first = cache.get(&store, Document::Apps, Format::Json, true).await;
        let again = cache.get(&store, Document::Apps, Format::Json, true).await;
        assert!(
            Arc::ptr_eq(&first, &again),
            "unchanged: the same payload, no copy"
        );

        store.cancel("A0", "i-0");
        let slot = &cache.slots[index(Document::Apps, Format::Json)];
        let another_reader_rebuilding = slot.building.lock().await;
        let during = cache.get(&store, Document::Apps, Format::Json, true).await;
        assert!(
            Arc::ptr_eq(&during, &first),
            "the previous payload, at once"
        );
        drop(another_reader_rebuilding);

        let after = cache.get(&store, Document::Apps, Format::Json, true).await;
        assert_ne!(after.version, first.version);
        assert!(
            after.plain.get().is_none(),
            "built for gzip: no plain text held"
        );
        let text = String::from_utf8(after.plain().await.to_vec()).unwrap();
        assert!(!text.contains(r#""i-0""#) && text.contains(r#""i-1""#));
    }

    /// A payload nobody found current for more than a second is not served while a rebuild
    /// runs: the read waits for the new one (the review's payload 20 s stale).
    #[tokio::test(start_paused = true)]
    async fn a_payload_long_out_of_date_is_not_served_during_a_rebuild() {
        let store = Arc::new(store(3));
        let cache = Arc::new(ResponseCache::default());
        let first = cache.get(&store, Document::Apps, Format::Json, true).await;
        tokio::time::advance(std::time::Duration::from_secs(20)).await;
        store.cancel("A0", "i-0");
        let slot = &cache.slots[index(Document::Apps, Format::Json)];
        let rebuilding = slot.building.lock().await;
        let waiting = {
            let (cache, store) = (cache.clone(), store.clone());
            tokio::spawn(async move { cache.get(&store, Document::Apps, Format::Json, true).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "it waits for the rebuild");
        drop(rebuilding);
        let p = waiting.await.unwrap();
        assert_ne!(p.version, first.version);
    }

    /// With no payload at all, a read waits for the rebuild rather than answer nothing.
    #[tokio::test]
    async fn a_first_read_waits_for_the_rebuild_in_progress() {
        let store = store(3);
        let cache = Arc::new(ResponseCache::default());
        let slot = &cache.slots[index(Document::Delta, Format::Xml)];
        let rebuilding = slot.building.lock().await;
        let waiting = {
            let cache = cache.clone();
            let store = Arc::new(store);
            tokio::spawn(
                async move { cache.get(&store, Document::Delta, Format::Xml, false).await },
            )
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "it waits");
        drop(rebuilding);
        let p = waiting.await.unwrap();
        assert!(p.plain().await.starts_with(b"<applications>"));
    }

    #[tokio::test]
    async fn formats_and_documents_have_their_own_payloads_and_gzip_is_made_once() {
        let store = store(3);
        let cache = ResponseCache::default();
        let json = cache.get(&store, Document::Apps, Format::Json, true).await;
        let xml = cache.get(&store, Document::Apps, Format::Xml, false).await;
        let delta = cache.get(&store, Document::Delta, Format::Json, true).await;
        assert!(json.plain().await.starts_with(b"{\"applications\""));
        assert!(xml.plain().await.starts_with(b"<applications>"));
        assert!(delta.plain().await.windows(5).any(|w| w == b"ADDED"));
        let (g1, g2) = (json.gzip().await, json.gzip().await);
        assert_eq!(g1.as_ptr(), g2.as_ptr(), "made once, kept");
        assert_eq!(encoding::gunzip(&xml.gzip().await), xml.plain().await);
    }
}
