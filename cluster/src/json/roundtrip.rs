//! Generated values of the Rust types a provider writes go out through the codec, are read as
//! `cluster call` reads an answer (any MessagePack value, given its shape back, shown as JSON),
//! and come back in as `cluster call` sends arguments (JSON checked and encoded by the shape):
//! the provider decodes the same value. proptest prints the seed of a failing case.

use std::collections::BTreeMap;

use crate::service::shape::trace;
use crate::service::{decode, encode};
use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{Wire, from_wire, to_wire};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Wide {
    big: u128,
    signed: i128,
    small: u8,
    neg: i64,
    ratio: f64,
    letter: char,
    text: String,
    #[serde(with = "serde_bytes")]
    raw: Vec<u8>,
    maybe: Option<u32>,
    by_id: BTreeMap<u32, String>,
    pair: (u16, bool),
    state: State,
    history: Vec<State>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum State {
    Open,
    Held(String),
    Moved { to: char, at: u128 },
    Split(i8, i128),
}

fn state() -> impl Strategy<Value = State> {
    prop_oneof![
        Just(State::Open),
        any::<String>().prop_map(State::Held),
        (any::<char>(), any::<u128>()).prop_map(|(to, at)| State::Moved { to, at }),
        (any::<i8>(), any::<i128>()).prop_map(|(a, b)| State::Split(a, b)),
    ]
}

prop_compose! {
    fn wide()(
        big in any::<u128>(), signed in any::<i128>(), small in any::<u8>(), neg in any::<i64>(),
        ratio in -1e300..1e300f64, letter in any::<char>(), text in any::<String>(),
        raw in any::<Vec<u8>>(), maybe in any::<Option<u32>>(),
        by_id in any::<BTreeMap<u32, String>>(), pair in any::<(u16, bool)>(),
        state in state(), history in proptest::collection::vec(state(), 0..4),
    ) -> Wide {
        Wide { big, signed, small, neg, ratio, letter, text, raw, maybe, by_id, pair, state, history }
    }
}

/// Out as an answer, as JSON, back in as an argument. The JSON is `Wire::to_json`'s, which has
/// a 128-bit number past 64 bits as a string of digits, as a user passes it back (`AsJson`
/// prints the number itself, which a JSON parser without arbitrary precision cannot read).
fn round_trip<T: Serialize + DeserializeOwned>(value: &T) -> Result<T, String> {
    let shape = trace::<T>("T");
    let bytes = encode(value).map_err(|e| e.to_string())?;
    let answer = from_wire(&shape, decode::<Wire>(&bytes).map_err(|e| e.to_string())?);
    let json = answer.to_json();
    let wire = to_wire(&shape, &json, "value")?;
    decode(&encode(&wire).unwrap()).map_err(|e| e.to_string())
}

proptest! {
    #[test]
    fn a_value_printed_by_cluster_call_goes_back_in_unchanged(value in wide()) {
        let back = round_trip(&value);
        prop_assert_eq!(back.as_ref(), Ok(&value));
    }
}

/// Generated shapes, as any provider's entry may carry them (structs, enums of every variant
/// kind, maps with keys that are not strings, 128-bit integers, bytes), each with a generated
/// JSON value written as `cluster call` prints one: sent by the shape, read back as any
/// MessagePack value, given its shape back, it prints the same JSON.
mod generated_shapes {
    use crate::service::shape::{Content, Field, Shape, Variant};
    use crate::service::{decode, encode};
    use proptest::prelude::*;
    use serde_json::{Map, Value as Json};

    use super::super::{Wire, from_wire, to_wire};

    fn leaf() -> impl Strategy<Value = Shape> {
        prop_oneof![
            Just(Shape::Bool),
            prop::sample::select(vec![8u8, 16, 32, 64, 128]).prop_map(Shape::Int),
            prop::sample::select(vec![8u8, 16, 32, 64, 128]).prop_map(Shape::Uint),
            Just(Shape::Float(64)),
            Just(Shape::Char),
            Just(Shape::Str),
            Just(Shape::Bytes),
        ]
    }

    fn content(inner: BoxedStrategy<Shape>) -> impl Strategy<Value = Content> {
        prop_oneof![
            Just(Content::Unit),
            inner.clone().prop_map(Content::Newtype),
            prop::collection::vec(inner.clone(), 2..4).prop_map(Content::Tuple),
            fields(inner).prop_map(Content::Struct),
        ]
    }

    fn fields(inner: BoxedStrategy<Shape>) -> impl Strategy<Value = Vec<Field>> {
        prop::collection::vec((inner, any::<bool>()), 1..4).prop_map(|fields| {
            fields
                .into_iter()
                .enumerate()
                .map(|(n, (shape, optional))| Field::new(format!("f{n}"), shape, optional))
                .collect()
        })
    }

    fn shape() -> impl Strategy<Value = Shape> {
        leaf().prop_recursive(4, 48, 4, |inner| {
            let inner = inner.boxed();
            prop_oneof![
                // An option of an option, or of (), prints `null` for two values: left out.
                inner
                    .clone()
                    .prop_filter("not null-like", |s| !matches!(
                        s,
                        Shape::Option(_) | Shape::Unit
                    ))
                    .prop_map(|s| Shape::Option(Box::new(s))),
                inner.clone().prop_map(|s| Shape::Seq(Box::new(s))),
                (
                    prop_oneof![
                        Just(Shape::Str),
                        Just(Shape::Uint(32)),
                        Just(Shape::Int(64))
                    ],
                    inner.clone()
                )
                    .prop_map(|(k, v)| Shape::Map(Box::new(k), Box::new(v))),
                prop::collection::vec(inner.clone(), 1..4).prop_map(Shape::Tuple),
                fields(inner.clone()).prop_map(|fields| Shape::Struct {
                    name: "S".into(),
                    fields,
                    closed: false,
                }),
                prop::collection::vec(content(inner), 1..4).prop_map(|contents| Shape::Enum {
                    name: "E".into(),
                    variants: contents
                        .into_iter()
                        .enumerate()
                        .map(|(n, c)| Variant::new(format!("V{n}"), c))
                        .collect(),
                }),
            ]
        })
    }

    /// A 128-bit value as `cluster call` prints it: a number within 64 bits, else digits.
    fn wide(n: i128) -> Json {
        i64::try_from(n)
            .map(Json::from)
            .or_else(|_| u64::try_from(n).map(Json::from))
            .unwrap_or_else(|_| Json::String(n.to_string()))
    }

    fn value(shape: &Shape) -> BoxedStrategy<Json> {
        match shape {
            Shape::Bool => any::<bool>().prop_map(Json::Bool).boxed(),
            Shape::Int(128) => any::<i128>().prop_map(wide).boxed(),
            Shape::Uint(128) => any::<u128>()
                .prop_map(|n| match u64::try_from(n) {
                    Ok(n) => Json::from(n),
                    Err(_) => Json::String(n.to_string()),
                })
                .boxed(),
            Shape::Int(bits) => {
                let half = 1i128 << (bits - 1);
                (-half..half).prop_map(wide).boxed()
            }
            Shape::Uint(bits) => (0..(1i128 << bits)).prop_map(wide).boxed(),
            Shape::Float(_) => (-1e6..1e6f64).prop_map(Json::from).boxed(),
            Shape::Char => any::<char>().prop_map(|c| Json::String(c.into())).boxed(),
            Shape::Str => any::<String>().prop_map(Json::String).boxed(),
            Shape::Bytes => any::<Vec<u8>>()
                .prop_map(|b| Json::Array(b.into_iter().map(Json::from).collect()))
                .boxed(),
            Shape::Unit => Just(Json::Null).boxed(),
            Shape::Option(inner) => prop_oneof![Just(Json::Null), value(inner)].boxed(),
            Shape::Seq(item) => prop::collection::vec(value(item), 0..3)
                .prop_map(Json::Array)
                .boxed(),
            Shape::Map(key, item) => {
                let key = match **key {
                    Shape::Str => any::<String>().boxed(),
                    Shape::Uint(_) => any::<u32>().prop_map(|n| n.to_string()).boxed(),
                    _ => any::<i64>().prop_map(|n| n.to_string()).boxed(),
                };
                prop::collection::btree_map(key, value(item), 0..3)
                    .prop_map(|m| Json::Object(m.into_iter().collect()))
                    .boxed()
            }
            Shape::Tuple(items) => items
                .iter()
                .map(value)
                .collect::<Vec<_>>()
                .prop_map(Json::Array)
                .boxed(),
            Shape::Struct { fields, .. } => object(fields),
            Shape::Enum { variants, .. } => {
                let choices: Vec<BoxedStrategy<Json>> = variants
                    .iter()
                    .map(|v| {
                        let name = v.name.clone();
                        let content = match &v.content {
                            Content::Unit => return Just(Json::String(name)).boxed(),
                            Content::Newtype(shape) => value(shape),
                            Content::Tuple(items) => value(&Shape::Tuple(items.clone())),
                            Content::Struct(fields) => object(fields),
                        };
                        content
                            .prop_map(move |c| Json::Object(Map::from_iter([(name.clone(), c)])))
                            .boxed()
                    })
                    .collect();
                prop::strategy::Union::new(choices).boxed()
            }
            other => unreachable!("not generated: {other}"),
        }
    }

    /// A struct's object: each optional field present or left out.
    fn object(fields: &[Field]) -> BoxedStrategy<Json> {
        fields
            .iter()
            .map(|f| {
                let name = f.name.clone();
                let present = value(&f.shape).prop_map(Some);
                let value = if f.optional {
                    prop_oneof![Just(None), present].boxed()
                } else {
                    present.boxed()
                };
                value.prop_map(move |v| v.map(|v| (name.clone(), v)))
            })
            .collect::<Vec<_>>()
            .prop_map(|entries| Json::Object(entries.into_iter().flatten().collect()))
            .boxed()
    }

    fn shape_and_value() -> impl Strategy<Value = (Shape, Json)> {
        shape().prop_flat_map(|shape| {
            let value = value(&shape);
            (Just(shape), value)
        })
    }

    proptest! {
        #[test]
        fn json_sent_by_a_generated_shape_prints_back_the_same((shape, json) in shape_and_value()) {
            let wire = to_wire(&shape, &json, "value").map_err(TestCaseError::fail)?;
            let bytes = encode(&wire).unwrap();
            let read: Wire = decode(&bytes).unwrap();
            let back = from_wire(&shape, read).to_json();
            prop_assert_eq!(back, json, "shape {}", shape);
        }
    }
}
