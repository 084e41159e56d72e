//! Generated values of the Rust types a provider writes go out through the codec, are read as
//! `cluster call` reads an answer (any MessagePack value, given its shape back, shown as JSON),
//! and come back in as `cluster call` sends arguments (JSON checked and encoded by the shape):
//! the provider decodes the same value. proptest prints the seed of a failing case.

use std::collections::BTreeMap;

use cluster::service::shape::trace;
use cluster::service::{decode, encode};
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
