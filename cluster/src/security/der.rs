//! The two fields of an X.509 certificate that rustls-webpki parses but does not hand out: when
//! it expires, and its subject's public key. Read by walking the DER of `tbsCertificate` to its
//! `validity` and `subjectPublicKeyInfo` (RFC 5280, 4.1), nothing else.
//!
//! Everything read here comes from a certificate that is then verified against the cluster's CA
//! by webpki (`tls::verify_chain`), which parses it strictly: this reader only has to be right
//! on certificates webpki accepts, and to refuse everything else without panicking (a
//! certificate comes from another node's gossip state). Its agreement with a full X.509 parser
//! is checked on generated certificates in the tests below.

/// What the gossip authorship needs of a certificate.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Read<'a> {
    /// `notAfter`, in seconds since the Unix epoch.
    pub(crate) not_after: i64,
    /// The `subjectPublicKey` bits (for an ECDSA key, the encoded point).
    pub(crate) public_key: &'a [u8],
}

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
/// `[0] EXPLICIT Version`.
const VERSION: u8 = 0xa0;

/// A certificate's expiry and public key, or `None` if the DER is not a certificate's shape.
pub(crate) fn read(cert: &[u8]) -> Option<Read<'_>> {
    let (certificate, _) = expect(SEQUENCE, cert)?;
    let (tbs, _) = expect(SEQUENCE, certificate)?;
    let mut rest = tbs;
    if rest.first() == Some(&VERSION) {
        rest = element(rest)?.2;
    }
    let (_serial, rest) = expect(INTEGER, rest)?;
    let (_signature, rest) = expect(SEQUENCE, rest)?;
    let (_issuer, rest) = expect(SEQUENCE, rest)?;
    let (validity, rest) = expect(SEQUENCE, rest)?;
    let (_subject, rest) = expect(SEQUENCE, rest)?;
    let (spki, _) = expect(SEQUENCE, rest)?;

    let (_not_before, after) = time(validity)?;
    let (not_after, _) = time(after)?;
    let (_algorithm, rest) = expect(SEQUENCE, spki)?;
    let (bits, _) = expect(BIT_STRING, rest)?;
    // The first byte counts the unused bits of the last; a key is whole bytes.
    let (&0, public_key) = bits.split_first()? else {
        return None;
    };
    Some(Read {
        not_after,
        public_key,
    })
}

/// The next element: its tag, its content and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, input) = input.split_first()?;
    let (&first, mut input) = input.split_first()?;
    let len = match first {
        0..=0x7f => usize::from(first),
        // Long form: 1 to 4 bytes of length (a certificate value is a few KiB at most).
        0x81..=0x84 => {
            let (bytes, rest) = input.split_at_checked(usize::from(first & 0x7f))?;
            input = rest;
            bytes
                .iter()
                .fold(0usize, |len, &b| (len << 8) | usize::from(b))
        }
        _ => return None,
    };
    let (content, rest) = input.split_at_checked(len)?;
    Some((tag, content, rest))
}

/// The next element's content if it has tag `tag`, and what follows it.
fn expect(tag: u8, input: &[u8]) -> Option<(&[u8], &[u8])> {
    let (found, content, rest) = element(input)?;
    (found == tag).then_some((content, rest))
}

/// A `Time` (UTCTime or GeneralizedTime, in the forms RFC 5280 allows: `Z`, whole seconds) in
/// seconds since the Unix epoch, and what follows it.
fn time(input: &[u8]) -> Option<(i64, &[u8])> {
    let (tag, content, rest) = element(input)?;
    let digits = content.strip_suffix(b"Z")?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let number = |range: std::ops::Range<usize>| {
        digits
            .get(range)?
            .iter()
            .try_fold(0i64, |n, d| Some(n * 10 + i64::from(d - b'0')))
    };
    let (year, at) = match (tag, digits.len()) {
        // RFC 5280, 4.1.2.5.1: a two-digit year of 50 or more is 19YY, else 20YY.
        (UTC_TIME, 12) => {
            let yy = number(0..2)?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, 2)
        }
        (GENERALIZED_TIME, 14) => (number(0..4)?, 4),
        _ => return None,
    };
    let [month, day, hour, minute, second] =
        [0, 2, 4, 6, 8].map(|i| number(at + i..at + i + 2).unwrap_or(-1));
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || !(0..=23).contains(&hour)
        || !(0..=59).contains(&minute)
        || !(0..=59).contains(&second)
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some((days * 86_400 + hour * 3_600 + minute * 60 + second, rest))
}

/// Days since 1970-01-01 of a date in the proleptic Gregorian calendar (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A certificate from rcgen, valid from `not_before` to `not_after` (Unix seconds).
    fn certificate(not_before: i64, not_after: i64) -> (Vec<u8>, Vec<u8>) {
        let key = rcgen::KeyPair::generate().expect("a key");
        let mut params = rcgen::CertificateParams::new(vec!["a.example".to_owned()]).unwrap();
        params.not_before = time::OffsetDateTime::from_unix_timestamp(not_before).unwrap();
        params.not_after = time::OffsetDateTime::from_unix_timestamp(not_after).unwrap();
        let cert = params.self_signed(&key).expect("a certificate");
        (cert.der().to_vec(), key.public_key_raw().to_vec())
    }

    /// What x509-parser, a full parser, reads of the same certificate.
    fn by_x509_parser(der: &[u8]) -> (i64, Vec<u8>) {
        let (_, parsed) = x509_parser::parse_x509_certificate(der).expect("x509-parser reads it");
        (
            parsed.validity().not_after.timestamp(),
            parsed.public_key().subject_public_key.data.to_vec(),
        )
    }

    proptest! {
        // Expiries from 1950 to 9999: UTCTime before 2050, GeneralizedTime from 2050 (rcgen
        // follows RFC 5280), across leap years and the ends of months and days.
        #[test]
        fn reads_what_a_full_x509_parser_reads(
            not_before in -631_152_000i64..4_102_444_800,
            valid_for in 0i64..253_402_300_799 - 4_102_444_800,
        ) {
            let (der, public) = certificate(not_before, not_before + valid_for);
            let read = read(&der).expect("read");
            let (not_after, key) = by_x509_parser(&der);
            prop_assert_eq!(read.not_after, not_after);
            prop_assert_eq!(read.public_key, key.as_slice());
            prop_assert_eq!(read.public_key, public.as_slice());
        }

        // A certificate cut anywhere, or with any one byte changed, is refused or read without
        // a panic; cut short it is always refused.
        #[test]
        fn a_damaged_certificate_never_panics(cut in 0usize..1000, at in 0usize..1000, byte: u8) {
            let (mut der, _) = certificate(0, 2_000_000_000);
            let cut = cut % der.len();
            prop_assert_eq!(read(&der[..cut]), None);
            let at = at % der.len();
            der[at] = byte;
            let _ = read(&der);
        }

        #[test]
        fn any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = read(&bytes);
        }
    }

    #[test]
    fn times_read_as_rfc_5280_says() {
        let utc = |s: &str| {
            let mut der = vec![UTC_TIME, s.len() as u8];
            der.extend_from_slice(s.as_bytes());
            time(&der).map(|(t, _)| t)
        };
        assert_eq!(utc("700101000000Z"), Some(0));
        assert_eq!(utc("491231235959Z"), Some(2_524_607_999), "49 is 2049");
        assert_eq!(utc("500101000000Z"), Some(-631_152_000), "50 is 1950");
        assert_eq!(
            utc("000229120000Z"),
            Some(951_825_600),
            "2000 is a leap year"
        );
        for bad in [
            "7001010000Z",
            "700101000000",
            "701301000000Z",
            "700100000000Z",
            "700101240000Z",
            "700101006000Z",
            "70010100000+Z",
        ] {
            assert_eq!(utc(bad), None, "{bad}");
        }
        let mut generalized = vec![GENERALIZED_TIME, 15];
        generalized.extend_from_slice(b"99991231235959Z");
        assert_eq!(time(&generalized).map(|(t, _)| t), Some(253_402_300_799));
    }
}
