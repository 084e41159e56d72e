//! The header map of wire version 2: one byte string holding `(key, length, value)` entries,
//! key a `u16`, length a `u32`, both little-endian. A reader skips keys it does not know (the
//! length says how far), so adding a key is not a new wire version, and a value a reader does
//! not understand cannot break the frame. One byte string rather than a sequence of serde
//! values: bincode then writes and reads it in one step, not one per header.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};

/// The call's metadata: MessagePack of `[[key, value], …]`.
pub(super) const METADATA: u16 = 1;
/// The call's own id (`Head::call_id`): 16 bytes, little-endian.
pub(super) const CALL_ID: u16 = 2;
/// The provider generation the attempt must reach (`Head::pinned`): 8 bytes, little-endian.
pub(super) const PINNED: u16 = 3;
/// The attempt's W3C trace context (`Request::trace`): trace id, parent span id, flags; 25
/// bytes (`context/trace.rs`).
pub(super) const TRACE: u16 = 4;

/// In a reply: it is an earlier attempt's, from the provider's record (`Reply::Recalled`). No
/// value.
pub(super) const RECALLED: u16 = 1;

/// Bytes an entry takes besides its value.
const ENTRY: usize = 6;

/// Room for the headers of a call without metadata, on the stack.
const INLINE: usize = 96;

/// Writes the headers that are present as one byte string.
pub(super) fn write<S: Serializer>(
    headers: &[Option<(u16, &[u8])>],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    encoded(headers, |bytes| serializer.serialize_bytes(bytes))
}

/// The byte string of the headers that are present, handed to `with`.
pub(super) fn encoded<R>(headers: &[Option<(u16, &[u8])>], with: impl FnOnce(&[u8]) -> R) -> R {
    let present = || headers.iter().flatten();
    if present().next().is_none() {
        // The usual case, at once.
        return with(&[]);
    }
    let len: usize = present().map(|(_, value)| ENTRY + value.len()).sum();
    if len <= INLINE {
        let mut inline = [0u8; INLINE];
        let mut at = 0;
        for (key, value) in present() {
            at += put(&mut inline[at..], *key, value);
        }
        return with(&inline[..at]);
    }
    let mut out = vec![0u8; len];
    let mut at = 0;
    for (key, value) in present() {
        at += put(&mut out[at..], *key, value);
    }
    with(&out)
}

/// Writes one entry at the start of `out`, which has room for it; its length.
fn put(out: &mut [u8], key: u16, value: &[u8]) -> usize {
    // A value is a header's few bytes or metadata bounded far below 4 GiB.
    let len = u32::try_from(value.len()).unwrap_or(u32::MAX);
    out[..2].copy_from_slice(&key.to_le_bytes());
    out[2..ENTRY].copy_from_slice(&len.to_le_bytes());
    out[ENTRY..ENTRY + value.len()].copy_from_slice(value);
    ENTRY + value.len()
}

/// Reads a header string, handing each entry to `each`, which skips keys it does not know and
/// returns an error message for a value it cannot read. What cannot be read (a value, an entry
/// cut short) is the first problem returned, never an error of the frame: the request is then
/// refused on its own, and the connection and the other calls on it carry on. Only a header
/// field that is not a byte string at all fails the frame.
pub(super) fn read<'de, D, F>(deserializer: D, each: F) -> Result<Option<String>, D::Error>
where
    D: Deserializer<'de>,
    F: FnMut(u16, &[u8]) -> Result<(), String>,
{
    struct Entries<F>(F);
    impl<'de, F: FnMut(u16, &[u8]) -> Result<(), String>> Visitor<'de> for Entries<F> {
        type Value = Option<String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a byte string of headers")
        }
        fn visit_borrowed_bytes<E: de::Error>(
            mut self,
            bytes: &'de [u8],
        ) -> Result<Self::Value, E> {
            // Borrowed from the frame: reading the headers allocates nothing.
            Ok(walk(bytes, &mut self.0))
        }
        fn visit_bytes<E: de::Error>(mut self, bytes: &[u8]) -> Result<Self::Value, E> {
            Ok(walk(bytes, &mut self.0))
        }
    }
    deserializer.deserialize_bytes(Entries(each))
}

/// Hands every entry of `bytes` to `each`; the first problem, if any.
pub(super) fn walk(
    mut bytes: &[u8],
    each: &mut impl FnMut(u16, &[u8]) -> Result<(), String>,
) -> Option<String> {
    let mut problem = None;
    while !bytes.is_empty() {
        let (key, value, rest) = match entry(bytes) {
            Ok(entry) => entry,
            Err(cut) => return problem.or(Some(cut)),
        };
        if let Err(e) = each(key, value) {
            problem.get_or_insert(e);
        }
        bytes = rest;
    }
    problem
}

/// The first entry of `bytes`, and what follows it.
fn entry(bytes: &[u8]) -> Result<(u16, &[u8], &[u8]), String> {
    let cut = || format!("a header entry cut short ({} bytes left)", bytes.len());
    let head = bytes.get(..ENTRY).ok_or_else(cut)?;
    let key = u16::from_le_bytes([head[0], head[1]]);
    let len = u32::from_le_bytes([head[2], head[3], head[4], head[5]]) as usize;
    let end = ENTRY.checked_add(len).ok_or_else(cut)?;
    let value = bytes.get(ENTRY..end).ok_or_else(cut)?;
    Ok((key, value, &bytes[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_back_and_a_cut_entry_is_an_error_not_a_panic() {
        let mut buf = [0u8; 32];
        let n = put(&mut buf, 7, b"abc");
        let n = n + put(&mut buf[n..], 999, b"");
        let (key, value, rest) = entry(&buf[..n]).unwrap();
        assert_eq!((key, value), (7, &b"abc"[..]));
        assert_eq!(entry(rest).unwrap().0, 999);
        for cut in (1..n).filter(|&cut| cut != 9) {
            assert!(
                walk(&buf[..cut], &mut |_, _| Ok(())).is_some(),
                "cut at {cut}"
            );
        }
        let bad_first = walk(&buf[..n], &mut |key, _| {
            if key == 7 { Err("bad".into()) } else { Ok(()) }
        });
        assert_eq!(
            bad_first.as_deref(),
            Some("bad"),
            "later entries are still read"
        );
        let huge = [1, 0, 0xff, 0xff, 0xff, 0xff];
        assert!(entry(&huge).is_err());
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    fn written(entries: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut out = vec![0u8; entries.iter().map(|(_, v)| ENTRY + v.len()).sum()];
        let mut at = 0;
        for (key, value) in entries {
            at += put(&mut out[at..], *key, value);
        }
        out
    }

    proptest! {
        #[test]
        fn any_entries_read_back_in_order(
            entries in proptest::collection::vec((any::<u16>(), any::<Vec<u8>>()), 0..8)
        ) {
            let bytes = written(&entries);
            let mut read = Vec::new();
            let problem = walk(&bytes, &mut |key, value| {
                read.push((key, value.to_vec()));
                Ok(())
            });
            prop_assert_eq!(problem, None);
            prop_assert_eq!(read, entries);
        }

        #[test]
        fn a_cut_header_string_is_a_problem_not_a_panic(
            entries in proptest::collection::vec((any::<u16>(), any::<Vec<u8>>()), 1..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let bytes = written(&entries);
            // Every boundary between entries is a valid string; anywhere else is cut short.
            let mut ends = vec![0];
            for (_, value) in &entries {
                ends.push(ends.last().unwrap() + ENTRY + value.len());
            }
            let at = cut.index(bytes.len());
            let problem = walk(&bytes[..at], &mut |_, _| Ok(()));
            prop_assert_eq!(problem.is_none(), ends.contains(&at));
        }

        #[test]
        fn any_bytes_are_entries_or_a_problem_never_a_panic(bytes in any::<Vec<u8>>()) {
            let _ = walk(&bytes, &mut |_, _| Ok(()));
        }
    }
}
