use serde::Serialize;
use serde::de::DeserializeOwned;

/// Arguments and results travel as MessagePack with named struct fields: self-describing, so a
/// 2.1 provider may add a `#[serde(default)]` field to a struct and a 2.0 peer still reads it
/// (unknown fields are skipped, missing ones defaulted). bincode, tarpc's default, cannot.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    rmp_serde::to_vec_named(value).map_err(|e| CodecError(e.to_string()))
}

/// Decodes what [`encode`] wrote.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    rmp_serde::from_slice(bytes).map_err(|e| CodecError(e.to_string()))
}

/// A value that could not be encoded or decoded; the message is the codec's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CodecError(pub String);

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

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
    fn garbage_is_an_error_not_a_panic() {
        assert!(super::decode::<(String, u32)>(&[0xc1, 0xff, 0x00]).is_err());
        assert!(super::decode::<(String, u32)>(&[]).is_err());
    }
}
