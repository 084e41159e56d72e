//! A MessagePack value of any shape, as `cluster call` sends and receives it without the
//! service's Rust types: written through the same codec as a typed call
//! (`cluster::service::encode`, named fields), read back through `deserialize_any`.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value as Json;

/// One value on the wire.
#[derive(Debug, Clone, PartialEq)]
pub enum Wire {
    /// `nil`: `()`, `None`.
    Nil,
    /// A boolean.
    Bool(bool),
    /// A negative or signed integer.
    Int(i64),
    /// A non-negative integer.
    Uint(u64),
    /// An `i128` (written by the codec as 16 bytes; read so only where the shape says so).
    Int128(i128),
    /// A `u128`, likewise.
    Uint128(u128),
    /// A float.
    Float(f64),
    /// A string (also a unit enum variant).
    Str(String),
    /// Bytes (`serde_bytes`).
    Bytes(Vec<u8>),
    /// An array: a sequence, a tuple, the argument list.
    Array(Vec<Wire>),
    /// A map: a map, a struct (by field name), an enum variant with content (`{name: value}`).
    Map(Vec<(Wire, Wire)>),
}

impl Serialize for Wire {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Wire::Nil => s.serialize_unit(),
            Wire::Bool(b) => s.serialize_bool(*b),
            Wire::Int(n) => s.serialize_i64(*n),
            Wire::Uint(n) => s.serialize_u64(*n),
            Wire::Int128(n) => s.serialize_i128(*n),
            Wire::Uint128(n) => s.serialize_u128(*n),
            Wire::Float(x) => s.serialize_f64(*x),
            Wire::Str(text) => s.serialize_str(text),
            Wire::Bytes(bytes) => s.serialize_bytes(bytes),
            Wire::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Wire::Map(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (key, value) in entries {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Wire {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(AnyValue)
    }
}

struct AnyValue;

impl<'de> Visitor<'de> for AnyValue {
    type Value = Wire;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a MessagePack value")
    }

    fn visit_unit<E>(self) -> Result<Wire, E> {
        Ok(Wire::Nil)
    }

    fn visit_none<E>(self) -> Result<Wire, E> {
        Ok(Wire::Nil)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Wire, D::Error> {
        Wire::deserialize(d)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Wire, E> {
        Ok(Wire::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Wire, E> {
        Ok(if n < 0 {
            Wire::Int(n)
        } else {
            Wire::Uint(n as u64)
        })
    }

    fn visit_u64<E>(self, n: u64) -> Result<Wire, E> {
        Ok(Wire::Uint(n))
    }

    fn visit_f64<E>(self, x: f64) -> Result<Wire, E> {
        Ok(Wire::Float(x))
    }

    fn visit_str<E>(self, text: &str) -> Result<Wire, E> {
        Ok(Wire::Str(text.to_owned()))
    }

    fn visit_bytes<E>(self, bytes: &[u8]) -> Result<Wire, E> {
        Ok(Wire::Bytes(bytes.to_vec()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Wire, A::Error> {
        // The size hint comes from the peer: capped, so that a length prefix alone does not
        // reserve gigabytes.
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Wire::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Wire, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(1024));
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(Wire::Map(entries))
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, _: A) -> Result<Wire, A::Error> {
        Err(de::Error::custom("an enum outside a map"))
    }
}

impl Wire {
    /// The value as JSON: bytes as an array of numbers (as serde_json writes `serde_bytes`), map
    /// keys that are not strings as their JSON text (`1` → `"1"`), a float that JSON cannot
    /// hold (NaN, infinity) as `null`, a 128-bit integer past 64 bits as a string of its
    /// digits (what `cluster call` takes back; a wider JSON number loses digits in jq and
    /// JavaScript, and `serde_json::Value` holds none).
    pub fn to_json(&self) -> Json {
        match self {
            Wire::Nil => Json::Null,
            Wire::Bool(b) => Json::Bool(*b),
            Wire::Int(n) => Json::from(*n),
            Wire::Uint(n) => Json::from(*n),
            Wire::Int128(n) => {
                i64::try_from(*n).map_or_else(|_| Json::String(n.to_string()), Json::from)
            }
            Wire::Uint128(n) => {
                u64::try_from(*n).map_or_else(|_| Json::String(n.to_string()), Json::from)
            }
            Wire::Float(x) => Json::from(*x),
            Wire::Str(text) => Json::String(text.clone()),
            Wire::Bytes(bytes) => Json::Array(bytes.iter().map(|b| Json::from(*b)).collect()),
            Wire::Array(items) => Json::Array(items.iter().map(Wire::to_json).collect()),
            Wire::Map(entries) => Json::Object(
                entries
                    .iter()
                    .map(|(key, value)| {
                        let key = match key {
                            Wire::Str(text) => text.clone(),
                            other => other.to_json().to_string(),
                        };
                        (key, value.to_json())
                    })
                    .collect(),
            ),
        }
    }

    /// JSON as it stands, for a value whose shape is not known (an entry without shapes, an
    /// `Opaque` type): numbers as integers where they are, objects as maps with string keys.
    pub fn from_json(json: &Json) -> Wire {
        match json {
            Json::Null => Wire::Nil,
            Json::Bool(b) => Wire::Bool(*b),
            Json::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(n), _) => Wire::Uint(n),
                (None, Some(n)) => Wire::Int(n),
                // serde_json's numbers are u64, i64 or f64: this is an f64.
                _ => Wire::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            Json::String(text) => Wire::Str(text.clone()),
            Json::Array(items) => Wire::Array(items.iter().map(Wire::from_json).collect()),
            Json::Object(map) => Wire::Map(
                map.iter()
                    .map(|(key, value)| (Wire::Str(key.clone()), Wire::from_json(value)))
                    .collect(),
            ),
        }
    }
}

/// A value written as JSON straight to a writer, as [`Wire::to_json`] would make it, without
/// building that tree: a reply of eight million numbers is written, not held three times over.
pub struct AsJson<'a>(pub &'a Wire);

impl Serialize for AsJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Wire::Nil => s.serialize_unit(),
            Wire::Bool(b) => s.serialize_bool(*b),
            Wire::Int(n) => s.serialize_i64(*n),
            Wire::Uint(n) => s.serialize_u64(*n),
            Wire::Int128(n) => match i64::try_from(*n) {
                Ok(n) => s.serialize_i64(n),
                Err(_) => s.collect_str(n),
            },
            Wire::Uint128(n) => match u64::try_from(*n) {
                Ok(n) => s.serialize_u64(n),
                Err(_) => s.collect_str(n),
            },
            // NaN and infinities as null, as `serde_json::Value` has them.
            Wire::Float(x) if !x.is_finite() => s.serialize_unit(),
            Wire::Float(x) => s.serialize_f64(*x),
            Wire::Str(text) => s.serialize_str(text),
            Wire::Bytes(bytes) => {
                let mut seq = s.serialize_seq(Some(bytes.len()))?;
                for b in bytes {
                    seq.serialize_element(b)?;
                }
                seq.end()
            }
            Wire::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&AsJson(item))?;
                }
                seq.end()
            }
            Wire::Map(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (key, value) in entries {
                    match key {
                        Wire::Str(text) => map.serialize_key(text)?,
                        other => map.serialize_key(&other.to_json().to_string())?,
                    }
                    map.serialize_value(&AsJson(value))?;
                }
                map.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typed_value_reads_back_as_the_same_wire_value_and_json() {
        #[derive(serde::Serialize)]
        struct Hit {
            id: u64,
            score: f64,
            tags: std::collections::BTreeMap<u32, String>,
            #[serde(with = "serde_bytes")]
            raw: Vec<u8>,
        }
        let hit = Hit {
            id: 7,
            score: -0.5,
            tags: [(1, "a".to_owned())].into(),
            raw: vec![0, 255],
        };
        let bytes = crate::service::encode(&hit).unwrap();
        let wire: Wire = crate::service::decode(&bytes).unwrap();
        assert_eq!(
            wire.to_json(),
            serde_json::json!({"id": 7, "score": -0.5, "tags": {"1": "a"}, "raw": [0, 255]})
        );
        assert_eq!(crate::service::encode(&wire).unwrap(), bytes);
        assert_eq!(
            serde_json::to_value(AsJson(&wire)).unwrap(),
            wire.to_json(),
            "written as it would be built"
        );
    }
}
