//! [`Encoded`]: the bytes of an encoded value, a call's arguments or a function's return value.
//!
//! Most calls carry a few ids or a short string. Kept inside the value up to [`Encoded::INLINE`] bytes,
//! their arguments travel inside the request's own allocation and their return value inside the
//! reply, with no buffer of their own on either node. A longer value is one heap buffer, as a
//! `Vec<u8>` would be.

use std::collections::TryReserveError;
use std::fmt;
use std::ops::Deref;

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};
use serde::{Serialize, Serializer};

/// The longest value kept inline, in bytes: with its length and the variant's tag, 64 bytes.
const INLINE: usize = 62;

/// The bytes of an encoded value: inline up to [`Encoded::INLINE`] bytes, on the heap past that.
/// Serialized as bytes, as `serde_bytes` serializes a `Vec<u8>`.
#[derive(Clone)]
pub struct Encoded(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Vec<u8>),
}

impl Encoded {
    /// The longest value kept inline, in bytes.
    pub const INLINE: usize = INLINE;

    /// No bytes.
    pub const fn new() -> Self {
        Encoded(Repr::Inline {
            len: 0,
            bytes: [0; INLINE],
        })
    }

    /// A copy of `bytes`: inline if they fit.
    pub fn from_slice(bytes: &[u8]) -> Self {
        let mut encoded = Encoded::new();
        encoded.extend_from_slice(bytes);
        encoded
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Heap(bytes) => bytes,
        }
    }

    /// The bytes, as a vector of their own.
    pub fn into_vec(self) -> Vec<u8> {
        match self.0 {
            Repr::Inline { .. } => self.as_slice().to_vec(),
            Repr::Heap(bytes) => bytes,
        }
    }

    /// Appends `more`, moving the bytes to the heap once they no longer fit inline.
    pub fn extend_from_slice(&mut self, more: &[u8]) {
        if let Err(e) = self.try_extend_from_slice(more) {
            panic!("cannot grow an encoded value: {e}");
        }
    }

    /// Appends `more`, or says why the buffer cannot grow (the bytes are then unchanged).
    #[inline]
    pub fn try_extend_from_slice(&mut self, more: &[u8]) -> Result<(), TryReserveError> {
        match &mut self.0 {
            Repr::Inline { len, bytes } => {
                let (at, end) = (usize::from(*len), usize::from(*len) + more.len());
                // MessagePack is written a marker byte at a time: no call to `memcpy` for one.
                if let (&[byte], Some(slot)) = (more, bytes.get_mut(at)) {
                    *slot = byte;
                    *len += 1;
                    return Ok(());
                }
                if end <= INLINE {
                    bytes[at..end].copy_from_slice(more);
                    // At most INLINE (94): fits a u8.
                    *len = end as u8;
                    return Ok(());
                }
                // Twice what fits inline at least, so that a value growing a few bytes at a
                // time past it is not reallocated at each write.
                let mut heap = Vec::new();
                heap.try_reserve(end.max(2 * INLINE))?;
                heap.extend_from_slice(&bytes[..at]);
                heap.extend_from_slice(more);
                self.0 = Repr::Heap(heap);
                Ok(())
            }
            Repr::Heap(heap) => {
                heap.try_reserve(more.len())?;
                heap.extend_from_slice(more);
                Ok(())
            }
        }
    }

    /// Whether the bytes are kept inline (no buffer of their own).
    pub fn is_inline(&self) -> bool {
        matches!(self.0, Repr::Inline { .. })
    }
}

impl Default for Encoded {
    fn default() -> Self {
        Encoded::new()
    }
}

impl Deref for Encoded {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for Encoded {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl From<Vec<u8>> for Encoded {
    /// Keeps the vector's buffer: no copy.
    fn from(bytes: Vec<u8>) -> Self {
        Encoded(Repr::Heap(bytes))
    }
}

impl From<&[u8]> for Encoded {
    fn from(bytes: &[u8]) -> Self {
        Encoded::from_slice(bytes)
    }
}

impl From<Encoded> for Vec<u8> {
    fn from(encoded: Encoded) -> Self {
        encoded.into_vec()
    }
}

impl PartialEq for Encoded {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Encoded {}

impl PartialEq<[u8]> for Encoded {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<Vec<u8>> for Encoded {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<const N: usize> PartialEq<[u8; N]> for Encoded {
    fn eq(&self, other: &[u8; N]) -> bool {
        self.as_slice() == other
    }
}

impl fmt::Debug for Encoded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_slice(), f)
    }
}

/// Where `rmp_serde` writes: fails with an error, rather than aborting, when the buffer cannot
/// grow (as `rmp_serde::to_vec_named`'s own writer would).
impl std::io::Write for Encoded {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.try_extend_from_slice(buf)
            .map_err(|_| std::io::ErrorKind::OutOfMemory.into())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Serialize for Encoded {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.as_slice())
    }
}

impl<'de> Deserialize<'de> for Encoded {
    /// Asks for bytes (not a byte buffer): a reader over a slice lends them, and a short value
    /// is copied inline, never into a buffer of its own first.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_bytes(EncodedVisitor)
    }
}

struct EncodedVisitor;

impl<'de> Visitor<'de> for EncodedVisitor {
    type Value = Encoded;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("bytes")
    }

    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<Encoded, E> {
        Ok(Encoded::from_slice(bytes))
    }

    fn visit_byte_buf<E: de::Error>(self, bytes: Vec<u8>) -> Result<Encoded, E> {
        Ok(if bytes.len() <= INLINE {
            Encoded::from_slice(&bytes)
        } else {
            Encoded::from(bytes)
        })
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Encoded, E> {
        Ok(Encoded::from_slice(text.as_bytes()))
    }

    /// A format that writes bytes as a sequence of numbers (JSON): grown as it is read, never
    /// presized from the length the input claims.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Encoded, A::Error> {
        let mut encoded = Encoded::new();
        while let Some(byte) = seq.next_element::<u8>()? {
            encoded
                .try_extend_from_slice(&[byte])
                .map_err(de::Error::custom)?;
        }
        Ok(encoded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_short_value_is_inline_and_a_long_one_on_the_heap() {
        assert!(Encoded::from_slice(&[7; INLINE]).is_inline());
        assert!(!Encoded::from_slice(&[7; INLINE + 1]).is_inline());
        let mut grown = Encoded::from_slice(&[1; INLINE - 1]);
        grown.extend_from_slice(&[2, 3]);
        assert!(!grown.is_inline());
        assert_eq!(grown.len(), INLINE + 1);
        assert_eq!(&grown[INLINE - 2..], [1, 2, 3]);
    }

    proptest! {
        /// Whatever pieces it is built from, it holds their concatenation, inline exactly when
        /// that fits; and it serializes as `serde_bytes` serializes the same bytes, in both
        /// formats the wire uses.
        #[test]
        fn it_holds_what_was_written_and_serializes_as_bytes(
            pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 0..6)
        ) {
            let mut encoded = Encoded::new();
            let mut expected = Vec::new();
            for piece in &pieces {
                encoded.extend_from_slice(piece);
                expected.extend_from_slice(piece);
            }
            prop_assert_eq!(encoded.as_slice(), &expected[..]);
            prop_assert_eq!(encoded.is_inline(), expected.len() <= INLINE);
            let as_bytes = serde_bytes::Bytes::new(&expected);
            let bincoded = bincode::serialize(&encoded).unwrap();
            prop_assert_eq!(&bincoded, &bincode::serialize(as_bytes).unwrap());
            let back: Encoded = bincode::deserialize(&bincoded).unwrap();
            prop_assert_eq!(&back, &encoded);
            let packed = rmp_serde::to_vec(&encoded).unwrap();
            prop_assert_eq!(&packed, &rmp_serde::to_vec(as_bytes).unwrap());
            let back: Encoded = rmp_serde::from_slice(&packed).unwrap();
            prop_assert_eq!(&back, &encoded);
            let json = serde_json::to_string(&encoded).unwrap();
            let back: Encoded = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(back.into_vec(), expected);
        }
    }
}
