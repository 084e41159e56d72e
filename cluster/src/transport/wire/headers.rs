//! The header map of wire version 2: a sequence of `(key, bytes)`, keys small numbers. A reader
//! skips keys it does not know, so adding a key is not a new wire version; every value is a
//! length-prefixed byte string, so a value a reader does not understand cannot break the frame.

use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeSeq;
use serde::{Deserializer, Serializer};
use serde_bytes::Bytes;

/// The calling node's name, UTF-8.
pub(super) const CALLER: u16 = 1;
/// The request id, 16 bytes little-endian.
pub(super) const REQUEST_ID: u16 = 2;
/// The attempt's number, 4 bytes little-endian.
pub(super) const ATTEMPT: u16 = 3;
/// The caller's budget left, in microseconds, 8 bytes little-endian.
pub(super) const BUDGET_LEFT: u16 = 4;
/// The largest reply the caller reads, in bytes, 8 bytes little-endian.
pub(super) const REPLY_LIMIT: u16 = 5;
/// The call's metadata: MessagePack of `[[key, value], …]`.
pub(super) const METADATA: u16 = 6;

/// Writes the headers that are present, each a key and its bytes.
pub(super) fn write<S: Serializer>(
    headers: &[Option<(u16, &[u8])>],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let present = headers.iter().flatten();
    let mut seq = serializer.serialize_seq(Some(present.clone().count()))?;
    for (key, value) in present {
        seq.serialize_element(&(key, Bytes::new(value)))?;
    }
    seq.end()
}

/// Reads a header sequence, handing each known key's bytes to `each`; unknown keys are skipped.
/// `each` returns an error message for a value it cannot read.
pub(super) fn read<'de, D, F>(deserializer: D, each: F) -> Result<(), D::Error>
where
    D: Deserializer<'de>,
    F: FnMut(u16, &[u8]) -> Result<(), String>,
{
    struct Each<F>(F);
    impl<'de, F: FnMut(u16, &[u8]) -> Result<(), String>> Visitor<'de> for Each<F> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sequence of (key, bytes) headers")
        }
        fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
            // Borrowed from the frame: reading a header allocates nothing.
            while let Some((key, value)) = seq.next_element::<(u16, &'de Bytes)>()? {
                (self.0)(key, value).map_err(de::Error::custom)?;
            }
            Ok(())
        }
    }
    deserializer.deserialize_seq(Each(each))
}

/// A fixed-size little-endian value, or why not.
pub(super) fn fixed<const N: usize>(key: u16, value: &[u8]) -> Result<[u8; N], String> {
    value
        .try_into()
        .map_err(|_| format!("header {key} has {} bytes, not {N}", value.len()))
}
