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
//! 4. A payload is made gzipped, as it is written, so that the plain text is never held
//!    whole; a small one is kept plain too, a large one is inflated for each reader that does
//!    not accept gzip, as it is sent (see [`Payload`]).
//!
//! Heartbeats do not change the version: the `lastRenewalTimestamp`s served are those of the
//! last change, as in Eureka's cache. The other reads (an application, an instance, a VIP)
//! are small and are answered from the store directly.

mod encoding;

use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};

pub(crate) use encoding::accepts_gzip;

use super::store::{Document, Snapshot, Store};
use crate::model::Format;

/// Past this many instances a payload is large: it is built on the blocking pool, so that the
/// runtime's threads go on answering heartbeats, and kept gzipped only. Up to it, a payload is
/// at most about 1 MiB of text and is kept both ways at once.
const LARGE_PAST: usize = 1_000;

/// One document in one format, at one version: gzipped, and, if small, plain too. A large one
/// is kept gzipped only, whatever its first reader asked for: every Eureka client sends
/// `Accept-Encoding: gzip`, and a reader that does not gets the gzip inflated as it is sent
/// ([`Payload::plain`]). So no reader makes the server hold the plain text, about 70 MiB of
/// JSON and 100 MiB of XML at 100,000 instances (it held both, kept, once readers without
/// gzip had asked for them: 445 MiB at its peak instead of 209, `docs/benchmarks.md`).
#[derive(Debug)]
pub(crate) struct Payload {
    version: (u64, u64),
    gzip: Bytes,
    /// Small payloads only.
    plain: Option<Bytes>,
    plain_len: u64,
}

impl Payload {
    /// Serialises a snapshot (on the calling thread).
    fn build(snapshot: &Snapshot, format: Format) -> Self {
        if snapshot.instances() > LARGE_PAST {
            // Compressed as it is written: the plain text is never held whole, so building
            // needs the gzip's 2 to 3 MiB at 100,000 instances, not the text's 70 to 100 MiB.
            // About 25 to 35 bytes of gzip per instance here; 64 leaves room.
            let capacity = snapshot.instances().saturating_mul(64);
            let gzipped = encoding::gzip_from(capacity, |out| snapshot.write(format, out));
            return Self {
                version: snapshot.version(),
                gzip: gzipped.packed,
                plain: None,
                plain_len: gzipped.plain_len,
            };
        }
        let text = Bytes::from(snapshot.text(format));
        Self {
            version: snapshot.version(),
            gzip: encoding::gzip(&text),
            plain_len: text.len() as u64,
            plain: Some(text),
        }
    }

    /// The body gzipped.
    pub(crate) fn gzip(&self) -> Bytes {
        self.gzip.clone()
    }

    /// The body as it is, and its length: the text held, or for a large payload its gzip
    /// inflated a piece at a time as the reader takes it (about 0.1 s of CPU per read at
    /// 100,000 instances, which sending 70 MiB costs anyway).
    pub(crate) fn plain(&self) -> (Body, u64) {
        let body = match &self.plain {
            Some(text) => Body::from(text.clone()),
            None => Body::from_stream(encoding::gunzip_stream(self.gzip.clone())),
        };
        (body, self.plain_len)
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
    pub(crate) async fn get(&self, store: &Store, doc: Document, format: Format) -> Arc<Payload> {
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
        let build = move || Payload::build(&snapshot, format);
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

    fn gunzip(packed: &[u8]) -> Vec<u8> {
        use std::io::Read as _;
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(packed)
            .read_to_end(&mut out)
            .expect("a gzip");
        out
    }

    impl Payload {
        /// The plain body, whole; checked against the length it says.
        async fn text(&self) -> Bytes {
            let (body, len) = self.plain();
            let text = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            assert_eq!(text.len() as u64, len);
            text
        }
    }

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
    /// what is gzipped is that text, byte for byte; a reader without gzip gets it inflated.
    #[tokio::test]
    async fn a_large_payload_is_gzipped_as_it_is_written_never_held_whole() {
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
            let payload = Payload::build(&snapshot, format);
            assert!(payload.plain.is_none(), "no plain text kept");
            assert_eq!(gunzip(&payload.gzip()), text);
            assert_eq!(payload.text().await, text, "inflated as it is sent");
        }
    }

    /// The staleness bound: a read while another reader rebuilds gets the payload before the
    /// change, at once; the first read after the rebuild gets the new one.
    #[tokio::test]
    async fn a_read_during_a_rebuild_gets_the_previous_payload() {
        let store = store(1_500); // past 1,000: a rebuild runs on the blocking pool
        let cache = ResponseCache::default();
        let first = cache.get(&store, Document::Apps, Format::Json).await;
        let again = cache.get(&store, Document::Apps, Format::Json).await;
        assert!(
            Arc::ptr_eq(&first, &again),
            "unchanged: the same payload, no copy"
        );

        store.cancel("A0", "i-0");
        let slot = &cache.slots[index(Document::Apps, Format::Json)];
        let another_reader_rebuilding = slot.building.lock().await;
        let during = cache.get(&store, Document::Apps, Format::Json).await;
        assert!(
            Arc::ptr_eq(&during, &first),
            "the previous payload, at once"
        );
        drop(another_reader_rebuilding);

        let after = cache.get(&store, Document::Apps, Format::Json).await;
        assert_ne!(after.version, first.version);
        assert!(after.plain.is_none(), "large: no plain text held");
        let text = String::from_utf8(after.text().await.to_vec()).unwrap();
        assert!(!text.contains(r#""i-0""#) && text.contains(r#""i-1""#));
    }

    /// A payload nobody found current for more than a second is not served while a rebuild
    /// runs: the read waits for the new one (the review's payload 20 s stale).
    #[tokio::test(start_paused = true)]
    async fn a_payload_long_out_of_date_is_not_served_during_a_rebuild() {
        let store = Arc::new(store(3));
        let cache = Arc::new(ResponseCache::default());
        let first = cache.get(&store, Document::Apps, Format::Json).await;
        tokio::time::advance(std::time::Duration::from_secs(20)).await;
        store.cancel("A0", "i-0");
        let slot = &cache.slots[index(Document::Apps, Format::Json)];
        let rebuilding = slot.building.lock().await;
        let waiting = {
            let (cache, store) = (cache.clone(), store.clone());
            tokio::spawn(async move { cache.get(&store, Document::Apps, Format::Json).await })
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
            tokio::spawn(async move { cache.get(&store, Document::Delta, Format::Xml).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "it waits");
        drop(rebuilding);
        let p = waiting.await.unwrap();
        assert!(p.text().await.starts_with(b"<applications>"));
    }

    #[tokio::test]
    async fn formats_and_documents_have_their_own_payloads_and_gzip_is_made_once() {
        let store = store(3);
        let cache = ResponseCache::default();
        let json = cache.get(&store, Document::Apps, Format::Json).await;
        let xml = cache.get(&store, Document::Apps, Format::Xml).await;
        let delta = cache.get(&store, Document::Delta, Format::Json).await;
        assert!(json.text().await.starts_with(b"{\"applications\""));
        assert!(xml.text().await.starts_with(b"<applications>"));
        assert!(delta.text().await.windows(5).any(|w| w == b"ADDED"));
        let (g1, g2) = (json.gzip(), json.gzip());
        assert_eq!(g1.as_ptr(), g2.as_ptr(), "made once, kept");
        assert_eq!(gunzip(&xml.gzip()), xml.text().await);
    }
}
