//! `Accept-Encoding` and gzip, for the cached payloads.

use std::io::{self, BufWriter, Write};

use axum::body::Bytes;
use axum::http::{HeaderMap, header};
use flate2::Compression;
use flate2::write::GzEncoder;

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

/// `plain` gzipped at the fastest level: a registry's text is repetitive enough that the
/// fastest level already shrinks it about tenfold, and it is made once per version.
pub(crate) fn gzip(plain: &[u8]) -> Bytes {
    gzip_from(plain.len() / 8, |out| out.write_all(plain))
}

/// What `write` writes, gzipped as it is written (as [`gzip`]), so that the plain text is
/// never held whole: at 100,000 instances it is 70 to 100 MiB per format, its gzip 2 to 3
/// MiB. `capacity`: a guess of the gzip's length (pages of it never written cost no memory;
/// a short guess doubles the buffer as it fills).
pub(crate) fn gzip_from(
    capacity: usize,
    write: impl FnOnce(&mut BufWriter<GzEncoder<Vec<u8>>>) -> io::Result<()>,
) -> Bytes {
    // The writers pass on a token or an instance at a time; the encoder is given them in
    // pieces of 64 KiB, so that each call into it has enough to work on.
    let encoder = GzEncoder::new(Vec::with_capacity(capacity), Compression::fast());
    let mut out = BufWriter::with_capacity(64 * 1024, encoder);
    let packed = write(&mut out)
        .and_then(|()| out.into_inner().map_err(io::IntoInnerError::into_error))
        .and_then(GzEncoder::finish);
    // Writing to a Vec cannot fail.
    Bytes::from(packed.unwrap_or_default())
}

/// The inverse of [`gzip`], for our own gzip only (so it cannot fail but by a bug: then the
/// reader gets what was decoded up to it, and a warning is logged).
pub(crate) fn gunzip(packed: &[u8]) -> Bytes {
    use std::io::Read as _;
    let mut out = Vec::with_capacity(packed.len().saturating_mul(8));
    if let Err(e) = flate2::read::GzDecoder::new(packed).read_to_end(&mut out) {
        tracing::warn!("the cached payload does not decompress: {e}");
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use axum::http::HeaderValue;

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
}
