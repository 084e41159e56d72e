//! `Accept-Encoding` and gzip, for the cached payloads.

use std::io::{self, BufWriter, Read as _, Write};

use axum::body::Bytes;
use axum::http::{HeaderMap, header};
use flate2::Compression;
use flate2::write::GzEncoder;
use futures::{Stream, TryStreamExt as _};

/// Whether the request accepts gzip (`gzip` or `x-gzip`, with a q-value other than 0).
/// Every Eureka client sends `Accept-Encoding: gzip` and decodes transparently.
pub(crate) fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';');
            let name = parts.next().unwrap_or("").trim();
            let refused = parts.any(|p| {
                let p = p.trim();
                p.strip_prefix("q=")
                    .is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0))
            });
            (name.eq_ignore_ascii_case("gzip") || name.eq_ignore_ascii_case("x-gzip")) && !refused
        })
}

/// A gzip, and the length of the text it holds.
pub(crate) struct Gzipped {
    pub(crate) packed: Bytes,
    pub(crate) plain_len: u64,
}

/// `plain` gzipped at the fastest level: a registry's text is repetitive enough that the
/// fastest level already shrinks it about tenfold, and it is made once per version.
pub(crate) fn gzip(plain: &[u8]) -> Bytes {
    gzip_from(plain.len() / 8, |out| out.write_all(plain)).packed
}

/// What `write` writes, gzipped as it is written (as [`gzip`]), so that the plain text is
/// never held whole: at 100,000 instances it is 70 to 100 MiB per format, its gzip 2 to 3
/// MiB. `capacity`: a guess of the gzip's length (pages of it never written cost no memory;
/// a short guess doubles the buffer as it fills).
pub(crate) fn gzip_from(
    capacity: usize,
    write: impl FnOnce(&mut BufWriter<Counted<GzEncoder<Vec<u8>>>>) -> io::Result<()>,
) -> Gzipped {
    // The writers pass on a token or an instance at a time; the encoder is given them in
    // pieces of 64 KiB, so that each call into it has enough to work on.
    let encoder = GzEncoder::new(Vec::with_capacity(capacity), Compression::fast());
    let mut out = BufWriter::with_capacity(64 * 1024, Counted(encoder, 0));
    let packed = write(&mut out)
        .and_then(|()| out.into_inner().map_err(io::IntoInnerError::into_error))
        .and_then(|Counted(encoder, plain_len)| Ok((encoder.finish()?, plain_len)));
    // Writing to a Vec cannot fail.
    let (packed, plain_len) = packed.unwrap_or_default();
    Gzipped {
        packed: Bytes::from(packed),
        plain_len,
    }
}

/// A writer that counts the bytes written through it.
pub(crate) struct Counted<W>(W, u64);

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.0.write(buf)?;
        self.1 += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// The pieces [`gunzip_stream`] sends: 64 KiB, inflated in about 0.1 ms, so that a
/// runtime thread inflating one is soon back to its other requests.
const PIECE: u64 = 64 * 1024;

/// The text of our own gzip, inflated a piece at a time as the reader takes it: a reader that
/// does not accept gzip costs a piece of memory, not the whole text (70 to 100 MiB per format
/// at 100,000 instances), and the server holds none of it between reads. It cannot fail but
/// by a bug: then the response ends short (its length was said) and a warning is logged.
pub(crate) fn gunzip_stream(
    packed: Bytes,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    let decoder = flate2::read::GzDecoder::new(io::Cursor::new(packed));
    futures::stream::try_unfold(decoder, |mut decoder| async move {
        let mut piece = Vec::with_capacity(PIECE as usize);
        (&mut decoder).take(PIECE).read_to_end(&mut piece)?;
        Ok((!piece.is_empty()).then(|| (Bytes::from(piece), decoder)))
    })
    .inspect_err(|e| tracing::warn!("the cached payload does not decompress: {e}"))
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use axum::http::HeaderValue;
    use futures::TryStreamExt as _;

    use super::*;

    fn with(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_str(value).unwrap(),
        );
        h
    }

    #[test]
    fn gzip_when_listed_without_a_zero_q() {
        for yes in [
            "gzip",
            "gzip, deflate",
            "deflate, GZIP;q=0.5",
            "x-gzip",
            "br;q=1, gzip",
        ] {
            assert!(accepts_gzip(&with(yes)), "{yes}");
        }
        for no in [
            "",
            "deflate",
            "identity",
            "gzip;q=0",
            "gzip; q=0.0",
            "gzipx",
        ] {
            assert!(!accepts_gzip(&with(no)), "{no}");
        }
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn what_is_gzipped_reads_back() {
        let text = b"<applications>".repeat(1000);
        let packed = gzip(&text);
        assert!(packed.len() < text.len() / 10);
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&packed[..])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, text);
    }

    /// The text comes back whole, in pieces of at most 64 KiB, and its length is counted as
    /// it is gzipped.
    #[tokio::test]
    async fn a_gzip_is_inflated_a_piece_at_a_time() {
        let text: Vec<u8> = (0..300_000u32)
            .flat_map(|k| format!("<i>{k}</i>").into_bytes())
            .collect();
        let gzipped = gzip_from(0, |out| out.write_all(&text));
        assert_eq!(gzipped.plain_len, text.len() as u64);
        let pieces: Vec<Bytes> = gunzip_stream(gzipped.packed).try_collect().await.unwrap();
        assert!(pieces.len() > 10);
        assert!(
            pieces
                .iter()
                .all(|p| p.len() as u64 <= PIECE && !p.is_empty())
        );
        assert_eq!(pieces.concat(), text);
    }
}
