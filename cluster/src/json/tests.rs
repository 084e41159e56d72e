//! JSON made into what a typed client would send: each case traces a Rust type's shape, as a
//! provider's entry carries it, converts JSON by it, and decodes the bytes as that type.

use std::collections::BTreeMap;

use crate::service::shape::trace;
use crate::service::{decode, encode};
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::json;

use super::{Wire, arguments, to_wire};

#[derive(Debug, PartialEq, Deserialize)]
struct Order {
    id: u64,
    lines: Vec<Line>,
    note: Option<String>,
    #[serde(default)]
    rush: bool,
    by_store: BTreeMap<u16, i32>,
    state: State,
    #[serde(with = "serde_bytes")]
    blob: Vec<u8>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct Line {
    sku: String,
    qty: u32,
}

#[derive(Debug, PartialEq, Deserialize)]
enum State {
    Open,
    Held(String),
    Moved { to: char },
}

#[derive(Debug, PartialEq, Deserialize)]
struct Tree {
    label: String,
    children: Vec<Tree>,
}

fn through<T: DeserializeOwned>(json: serde_json::Value) -> Result<T, String> {
    let wire = to_wire(&trace::<T>("T"), &json, "value")?;
    Ok(decode(&encode(&wire).unwrap()).unwrap())
}

#[test]
fn json_by_shape_decodes_as_the_providers_type() {
    let order: Order = through(json!({
        "id": 9, "lines": [{"sku": "a-1", "qty": 2}], "note": null,
        "by_store": {"7": -3}, "state": {"Moved": {"to": "x"}}, "blob": [1, 2, 255]
    }))
    .unwrap();
    assert_eq!(
        order,
        Order {
            id: 9,
            lines: vec![Line {
                sku: "a-1".into(),
                qty: 2
            }],
            note: None,
            rush: false,
            by_store: [(7, -3)].into(),
            state: State::Moved { to: 'x' },
            blob: vec![1, 2, 255],
        }
    );
    assert_eq!(through::<State>(json!("Open")).unwrap(), State::Open);
    assert_eq!(
        through::<State>(json!({"Held": "why"})).unwrap(),
        State::Held("why".into())
    );
    let tree: Tree =
        through(json!({"label": "a", "children": [{"label": "b", "children": []}]})).unwrap();
    assert_eq!(tree.children[0].label, "b");
}

#[test]
fn each_mistake_is_named_with_its_path() {
    let base = json!({"id": 9, "lines": [], "by_store": {}, "state": "Open", "blob": []});
    let with = |key: &str, value: serde_json::Value| {
        let mut order = base.clone();
        order[key] = value;
        through::<Order>(order).unwrap_err()
    };
    assert_eq!(with("id", json!(-1)), "value.id: -1 is not a u64");
    assert_eq!(
        with("lines", json!([{"sku": "a", "qty": 1.5}])),
        "value.lines[0].qty: 1.5 is not a u32"
    );
    assert_eq!(
        with("by_store", json!({"70000": 1})),
        "value.by_store key `70000`: 70000 is not a u16"
    );
    assert_eq!(
        with("state", json!("Closed")),
        "value.state: no variant `Closed`; the variants are Open, Held, Moved"
    );
    assert_eq!(
        with("blob", json!([256])),
        "value.blob[0]: expected a byte (0 to 255)"
    );
    assert_eq!(
        with("extra", json!(1)),
        "value: no field `extra`; the fields are id, lines, note, rush, by_store, state, blob"
    );
    let mut missing = base.clone();
    missing.as_object_mut().unwrap().remove("id");
    assert_eq!(
        through::<Order>(missing).unwrap_err(),
        "value: the field `id` (u64) is missing"
    );
}

#[test]
fn arguments_are_an_array_of_one_value_per_argument() {
    let shapes = [trace::<String>("String"), trace::<u8>("u8")];
    let wire = arguments(&shapes, &json!(["rust", 3])).unwrap();
    let decoded: (String, u8) = decode(&encode(&wire).unwrap()).unwrap();
    assert_eq!(decoded, ("rust".to_owned(), 3));
    assert_eq!(
        arguments(&shapes, &json!(["rust"])).unwrap_err(),
        "the function takes 2 arguments, 1 given"
    );
    assert_eq!(
        arguments(&shapes, &json!({"q": 1})).unwrap_err(),
        "the arguments are a JSON array of 2 values (one per argument), not an object"
    );
    // No arguments: the unit the stub sends for `()`.
    assert_eq!(arguments(&[], &json!([])).unwrap(), Wire::Nil);
    let one: (u8,) =
        decode(&encode(&arguments(&shapes[1..], &json!([7])).unwrap()).unwrap()).unwrap();
    assert_eq!(one, (7,));
}

#[test]
fn keys_that_are_json_text_cannot_nest_past_the_bound() {
    // A shape (as a member could register it) that nests through a field and through the keys
    // of a map of itself: each key is JSON text, parsed on its own (within the JSON parser's
    // bound of 128), so the nesting across keys is this converter's to bound.
    let shape: crate::service::shape::Shape = serde_json::from_value(json!({"Struct": {
        "name": "A",
        "fields": [
            {"name": "next", "shape": {"Option": {"Recursive": "A"}}, "optional": true},
            {"name": "m", "shape": {"Map": [{"Recursive": "A"}, "Unit"]}, "optional": true},
        ],
    }}))
    .unwrap();
    fn nested(keys: usize) -> serde_json::Value {
        let mut value = match keys {
            0 => json!({}),
            _ => {
                let mut m = serde_json::Map::new();
                m.insert(nested(keys - 1).to_string(), serde_json::Value::Null);
                json!({ "m": m })
            }
        };
        for _ in 0..50 {
            value = json!({ "next": value });
        }
        value
    }
    let error = to_wire(&shape, &nested(4), "value").unwrap_err();
    assert!(error.contains("nested deeper than 128 levels"), "{error}");
    // Within the bound, the same shape converts, keys and all.
    let wire = to_wire(&shape, &nested(1), "value").unwrap();
    assert!(
        format!("{wire:?}").contains("Map([(Map("),
        "a key made a map: {wire:?}"
    );
}
