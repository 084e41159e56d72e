use serde::Serialize;
use serde::de::DeserializeOwned;

/// Arguments and results travel as MessagePack with named struct fields: self-describing, so a
/// 2.1 provider may add a `#[serde(default)]` field to a struct and a 2.0 peer still reads it
/// (unknown fields are skipped, missing ones defaulted). bincode, tarpc's default, cannot.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    // Room for a small value from the start: grown from empty, the buffer is reallocated once or
    // twice for most values, and this runs twice per call (arguments and return value).
    let mut out = Fallible(Vec::with_capacity(ENCODE_CAPACITY));
    rmp_serde::encode::write_named(&mut out, value).map_err(|e| CodecError(e.to_string()))?;
    Ok(out.0)
}

/// The capacity [`encode`] starts with, in bytes.
const ENCODE_CAPACITY: usize = 128;

/// A buffer that fails with an error, rather than aborting, when it cannot grow (as
/// `rmp_serde::to_vec_named`'s own writer does).
struct Fallible(Vec<u8>);

impl std::io::Write for Fallible {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.0
            .try_reserve(buf.len())
            .map_err(|_| std::io::ErrorKind::OutOfMemory)?;
        self.0.extend_from_slice(buf);
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
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

/// A value that could not be encoded or decoded; the message is the codec's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CodecError(pub String);

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

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
    fn the_presized_buffer_writes_what_rmp_serde_writes() {
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
