use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Encoded;

/// Arguments and results travel as MessagePack with named struct fields: self-describing, so a
/// 2.1 provider may add a `#[serde(default)]` field to a struct and a 2.0 peer still reads it
/// (unknown fields are skipped, missing ones defaulted). bincode cannot.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    encode_value(value).map(Encoded::into_vec)
}

/// What [`encode`] writes, kept inline when it is short ([`Encoded`]): how the call path encodes
/// every call's arguments and every return value, so that a small call allocates no buffer for
/// either. A buffer that cannot grow is an error, not an abort (as `rmp_serde::to_vec_named`'s
/// own writer would).
pub fn encode_value<T: Serialize + ?Sized>(value: &T) -> Result<Encoded, CodecError> {
    let mut out = Encoded::new();
    rmp_serde::encode::write_named(&mut out, value).map_err(|e| CodecError(e.to_string()))?;
    Ok(out)
}

/// How deep values may nest in what [`decode`] reads. rmp-serde's own bound (1024) overflows a
/// tokio worker's 2 MiB stack in a debug build: a peer's kilobyte of `[[[…]]]`, even in a field
/// the receiver skips, would abort the node.
pub const MAX_DEPTH: usize = 128;

/// Decodes what [`encode`] wrote.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    decode_within(bytes, MAX_DEPTH)
}

/// Decodes MessagePack nested at most `depth` deep.
pub(crate) fn decode_within<T: DeserializeOwned>(
    bytes: &[u8],
    depth: usize,
) -> Result<T, CodecError> {
    // Each container takes at least a byte: fewer bytes than the bound cannot nest past it, so
    // a small call (most of them) skips the walk.
    if bytes.len() + 1 >= depth {
        nested_within(bytes, depth)?;
    }
    let mut reader = rmp_serde::Deserializer::from_read_ref(bytes);
    reader.set_max_depth(depth);
    T::deserialize(&mut reader).map_err(|e| {
        // Only on failure, read again keeping the path, to say where: "at [0].placed: …"
        // (the first item's field `placed`). The first read keeps no path, so that a decode that
        // succeeds costs what it did.
        let mut again = rmp_serde::Deserializer::from_read_ref(bytes);
        again.set_max_depth(depth);
        match serde_path_to_error::deserialize::<_, T>(&mut again) {
            Err(located) if located.path().iter().next().is_some() => {
                CodecError(format!("at {}: {e}", located.path()))
            }
            _ => CodecError(e.to_string()),
        }
    })
}

/// Refuses MessagePack whose arrays and maps nest deeper than `depth`, before any of it is
/// decoded. rmp-serde's own bound does not count an enum's map (`{"Neg": {"Neg": …}}`), so a
/// recursive enum 5,000 levels deep, 25 KB, would overflow the decoding thread's stack. One
/// pass over the bytes: containers are counted, everything else skipped by its length; bytes
/// that are not one whole MessagePack value (cut short, trailing, the unused marker) are
/// refused too, so that nothing the decoder reads can be taken for something else here.
fn nested_within(bytes: &[u8], depth: usize) -> Result<(), CodecError> {
    // Items still to read in each open container, innermost last: on the stack, so that the
    // walk allocates nothing (it runs on every call's arguments and reply).
    let depth = depth.min(MAX_DEPTH);
    let mut open: Stack = Stack::default();
    let mut at = 0usize;
    let refuse = |what: &str| Err(CodecError(what.to_owned()));
    while at < bytes.len() {
        // One item starts here: it is counted against the innermost open container.
        while let Some(left) = open.last_mut() {
            if *left > 0 {
                *left -= 1;
                break;
            }
            open.pop();
        }
        if open.is_empty() && at > 0 {
            return refuse("bytes after the value");
        }
        let marker = bytes[at];
        at += 1;
        let be = |at: usize, n: usize| -> Option<u64> {
            let field = bytes.get(at..at.checked_add(n)?)?;
            Some(field.iter().fold(0u64, |v, b| (v << 8) | u64::from(*b)))
        };
        // (bytes of its length field, bytes of payload besides, items it opens)
        let (length_bytes, payload, items): (usize, u64, u64) = match marker {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0, 0),
            0x80..=0x8f => (0, 0, 2 * u64::from(marker & 0x0f)),
            0x90..=0x9f => (0, 0, u64::from(marker & 0x0f)),
            0xa0..=0xbf => (0, u64::from(marker & 0x1f), 0),
            0xc4 | 0xd9 => (1, 0, 0),
            0xc5 | 0xda => (2, 0, 0),
            0xc6 | 0xdb => (4, 0, 0),
            // ext: a length, then a type byte and the data.
            0xc7 => (1, 1, 0),
            0xc8 => (2, 1, 0),
            0xc9 => (4, 1, 0),
            0xca => (0, 4, 0),
            0xcb => (0, 8, 0),
            0xcc | 0xd0 => (0, 1, 0),
            0xcd | 0xd1 => (0, 2, 0),
            0xce | 0xd2 => (0, 4, 0),
            0xcf | 0xd3 => (0, 8, 0),
            0xd4 => (0, 2, 0),
            0xd5 => (0, 3, 0),
            0xd6 => (0, 5, 0),
            0xd7 => (0, 9, 0),
            0xd8 => (0, 17, 0),
            0xdc | 0xde => (2, 0, 0),
            0xdd | 0xdf => (4, 0, 0),
            _ => return refuse("not MessagePack (marker 0xc1)"),
        };
        let Some(length) = be(at, length_bytes) else {
            return refuse("cut short inside a length");
        };
        at += length_bytes;
        let (skip, items) = match marker {
            0xdc | 0xdd => (0, length),
            0xde | 0xdf => (0, length.saturating_mul(2)),
            _ if length_bytes > 0 => (length.saturating_add(payload), items),
            _ => (payload, items),
        };
        at = usize::try_from(skip)
            .ok()
            .and_then(|skip| at.checked_add(skip))
            .filter(|end| *end <= bytes.len())
            .ok_or_else(|| CodecError("cut short inside a value".to_owned()))?;
        if items > 0 {
            // The decoder refuses at its bound's level, so this does too.
            if open.len + 1 >= depth {
                return Err(CodecError(format!(
                    "values nest past the depth bound ({depth} levels)"
                )));
            }
            open.push(items);
        }
    }
    if open.holds_items() {
        return refuse("cut short: a container holds fewer items than it says");
    }
    Ok(())
}

/// The open containers' item counts, at most [`MAX_DEPTH`].
struct Stack {
    left: [u64; MAX_DEPTH],
    len: usize,
}

impl Default for Stack {
    fn default() -> Self {
        Self {
            left: [0; MAX_DEPTH],
            len: 0,
        }
    }
}

impl Stack {
    fn last_mut(&mut self) -> Option<&mut u64> {
        self.len.checked_sub(1).map(|top| &mut self.left[top])
    }

    fn pop(&mut self) {
        self.len = self.len.saturating_sub(1);
    }

    fn push(&mut self, items: u64) {
        // The caller refuses before the bound, so there is room.
        if let Some(slot) = self.left.get_mut(self.len) {
            *slot = items;
            self.len += 1;
        }
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn holds_items(&self) -> bool {
        self.left[..self.len].iter().any(|left| *left > 0)
    }
}

/// A value that could not be encoded or decoded; the message is the codec's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError(pub String);

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CodecError {}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    /// A recursive enum nested 10,000 deep (about 60 KB: `{"Neg": {"Neg": … {"Lit": 1}}}`)
    /// is refused before decoding, not decoded until the stack overflows.
    #[test]
    fn a_recursive_enum_nested_past_the_bound_is_refused_not_a_stack_overflow() {
        #[derive(Serialize, Deserialize, Debug)]
        enum Expr {
            Neg(Box<Expr>),
            Lit(u8),
        }
        let mut bytes = Vec::new();
        for _ in 0..10_000 {
            bytes.extend([0x81, 0xa3, b'N', b'e', b'g']);
        }
        bytes.extend([0x81, 0xa3, b'L', b'i', b't', 0x01]);
        let e = super::decode::<Expr>(&bytes).unwrap_err();
        assert!(e.0.contains("past the depth bound (128 levels)"), "{e}");
        // Within the bound, the same shape decodes.
        let mut value = Expr::Lit(1);
        for _ in 0..100 {
            value = Expr::Neg(Box::new(value));
        }
        let back: Expr = super::decode(&super::encode(&value).unwrap()).unwrap();
        assert!(matches!(back, Expr::Neg(_)));
    }

    #[test]
    fn bytes_that_are_not_one_whole_value_are_refused_before_decoding() {
        let whole = super::encode(&(1u8, "ab", vec![1u16, 300])).unwrap();
        assert!(super::nested_within(&whole, 128).is_ok());
        let mut trailing = whole.clone();
        trailing.push(0x01);
        assert!(super::nested_within(&trailing, 128).is_err());
        for cut in 1..whole.len() {
            assert!(
                super::nested_within(&whole[..cut], 128).is_err(),
                "cut at {cut}"
            );
        }
        // A u128 the codec writes as 16 raw bytes after a fixarray marker (0x9c): a length that
        // would skip the rest of the input is refused, not skipped.
        let raw = [
            0x9c, 0xdb, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert!(super::nested_within(&raw, 128).is_err());
        assert!(super::nested_within(&[0xc1], 128).is_err());
    }

    #[test]
    fn a_value_that_does_not_decode_is_said_with_its_path() {
        #[derive(Serialize)]
        struct Sent {
            lines: Vec<(String, String)>,
        }
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct Read {
            lines: Vec<(String, u32)>,
        }
        let bytes = super::encode(&(
            "pear",
            Sent {
                lines: vec![("a".into(), "two".into())],
            },
        ))
        .unwrap();
        let e = super::decode::<(String, Read)>(&bytes).unwrap_err();
        assert!(e.0.starts_with("at [1].lines[0][1]: "), "{e}");
        assert!(
            super::decode::<(String, u8)>(&bytes)
                .unwrap_err()
                .0
                .starts_with("at [1]: ")
        );
    }

    #[test]
    fn values_nested_past_the_bound_are_an_error_even_in_a_skipped_field() {
        #[derive(Deserialize, Debug)]
        struct Small {
            #[allow(dead_code)]
            id: u64,
        }
        // A map {id: 1, x: [[[…]]]} with the array 10,000 deep: 0x91 is a one-element array.
        let mut bytes = vec![0x82, 0xa2, b'i', b'd', 0x01, 0xa1, b'x'];
        bytes.extend(std::iter::repeat_n(0x91, 10_000));
        bytes.push(0xc0);
        let read = super::decode::<Small>(&bytes);
        assert!(
            read.as_ref().is_err_and(|e| e.0.contains("depth")),
            "{read:?}"
        );
        let shallow: Vec<Vec<Vec<u8>>> =
            super::decode(&super::encode(&vec![vec![vec![1u8]]]).unwrap()).unwrap();
        assert_eq!(shallow, vec![vec![vec![1]]]);
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct HitV20 {
        id: u64,
        title: String,
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct HitV21 {
        id: u64,
        title: String,
        #[serde(default)]
        score: Option<f32>,
    }

    #[test]
    fn a_minor_version_may_add_a_defaulted_field_both_ways() {
        let old = HitV20 {
            id: 1,
            title: "rust".into(),
        };
        let new: HitV21 = super::decode(&super::encode(&old).unwrap()).unwrap();
        assert_eq!(
            new,
            HitV21 {
                id: 1,
                title: "rust".into(),
                score: None
            }
        );
        let newer = HitV21 {
            id: 2,
            title: "tokio".into(),
            score: Some(0.5),
        };
        let old: HitV20 = super::decode(&super::encode(&newer).unwrap()).unwrap();
        assert_eq!(
            old,
            HitV20 {
                id: 2,
                title: "tokio".into()
            }
        );
    }

    #[test]
    fn what_is_kept_inline_or_not_is_what_rmp_serde_writes() {
        let small = (String::from("rust"), 7u32);
        let large = (
            vec![0xa5u8; 1000],
            HitV20 {
                id: 3,
                title: "x".repeat(300),
            },
        );
        assert_eq!(
            super::encode(&small).unwrap(),
            rmp_serde::to_vec_named(&small).unwrap()
        );
        assert_eq!(
            super::encode(&large).unwrap(),
            rmp_serde::to_vec_named(&large).unwrap()
        );
        assert_eq!(
            super::encode(&()).unwrap(),
            rmp_serde::to_vec_named(&()).unwrap()
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(super::decode::<(String, u32)>(&[0xc1, 0xff, 0x00]).is_err());
        assert!(super::decode::<(String, u32)>(&[]).is_err());
    }
}
