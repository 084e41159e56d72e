//! The table of changes in `docs/compatibility.md` ("Which changes a call survives"): for each
//! row, the check's verdict, and the codec's, on values that show the difference (a `u64`
//! field narrowed to `u32` fails only for a value above `u32::MAX`, so that value is one of
//! the samples).

use std::collections::{BTreeMap, HashMap, HashSet};

use cluster::service::{decode, encode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::check_reads;

#[derive(Serialize, Deserialize)]
struct Hit {
    id: u64,
    title: String,
}
#[derive(Serialize, Deserialize)]
struct Scored {
    id: u64,
    title: String,
    score: Option<f32>,
}
#[derive(Serialize, Deserialize)]
struct Tagged {
    id: u64,
    title: String,
    #[serde(default)]
    tags: Vec<String>,
}
#[derive(Serialize, Deserialize)]
struct Ranked {
    id: u64,
    title: String,
    rank: u32,
}
#[derive(Serialize, Deserialize)]
struct Renamed {
    id: u64,
    name: String,
}
#[derive(Serialize, Deserialize)]
struct Narrow {
    id: u32,
    title: String,
}
#[derive(Serialize, Deserialize)]
struct Wide {
    id: u128,
    title: String,
}
#[derive(Serialize, Deserialize)]
struct Signed {
    id: i64,
    title: String,
}
#[derive(Serialize, Deserialize)]
struct MaybeId {
    id: Option<u64>,
    title: String,
}
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StrictHit {
    id: u64,
    title: String,
}
#[derive(Serialize, Deserialize)]
struct Article {
    id: u64,
    title: String,
}
#[derive(Serialize, Deserialize)]
enum Two {
    A(u32),
    B { left: u32 },
}
#[derive(Serialize, Deserialize)]
enum Three {
    A(u32),
    B { left: u32 },
    C,
}
#[derive(Serialize, Deserialize)]
enum TwoText {
    A(u32),
    B { left: String },
}
#[derive(Serialize, Deserialize)]
struct Sku(String);

/// Each row: the writer's samples, the reader's type, whether the change is compatible. The
/// test asserts the check says so, and that the codec agrees on the samples: every sample
/// decodes when compatible, at least one fails when not.
macro_rules! changes {
    ($($what:literal: [$($sample:expr),+] as $reader:ty => $compatible:expr;)*) => {
        vec![$(row::<_, $reader>($what, vec![$($sample),+], $compatible)),*]
    };
}

fn hit(id: u64) -> Hit {
    Hit {
        id,
        title: "t".into(),
    }
}

fn row<W: Serialize + DeserializeOwned, R: DeserializeOwned>(
    what: &'static str,
    samples: Vec<W>,
    compatible: bool,
) -> Option<String> {
    let checked = check_reads::<W, R>();
    let decoded: Vec<bool> = samples
        .iter()
        .map(|s| decode::<R>(&encode(s).unwrap()).is_ok())
        .collect();
    let codec = decoded.iter().all(|ok| *ok);
    if checked != compatible {
        return Some(format!(
            "{what}: the check says {checked}, the table {compatible}"
        ));
    }
    if codec != compatible {
        return Some(format!(
            "{what}: the codec decoded {decoded:?}, the table says {compatible}"
        ));
    }
    None
}

#[test]
fn each_change_in_the_table_is_judged_as_the_codec_judges_it() {
    let rows = changes! {
        "an optional field added (old writer, new reader)": [hit(1)] as Scored => true;
        "an optional field added (new writer, old reader)": [Scored { id: 1, title: "t".into(), score: Some(0.5) }] as Hit => true;
        "a #[serde(default)] field added": [hit(1)] as Tagged => true;
        "a required field added": [hit(1)] as Ranked => false;
        "a field removed": [Ranked { id: 1, title: "t".into(), rank: 2 }] as Hit => true;
        "a field renamed": [hit(1)] as Renamed => false;
        "an extra field to a reader that denies unknown fields": [Scored { id: 1, title: "t".into(), score: None }] as StrictHit => false;
        "the struct renamed, the fields kept": [hit(1)] as Article => true;
        "u32 widened to u64": [Narrow { id: u32::MAX, title: "t".into() }] as Hit => true;
        "u64 narrowed to u32": [hit(1), hit(u64::MAX)] as Narrow => false;
        "u64 widened to u128": [hit(u64::MAX)] as Wide => true;
        "u128 narrowed to u64": [Wide { id: 1, title: "t".into() }] as Hit => false;
        "u64 to i64": [hit(u64::MAX)] as Signed => false;
        "u32 to i64": [Narrow { id: u32::MAX, title: "t".into() }] as Signed => true;
        "i64 to u64": [Signed { id: -1, title: "t".into() }] as Hit => false;
        "f32 widened to f64": [0.5f32] as f64 => true;
        "T made Option<T>": [hit(1)] as MaybeId => true;
        "Option<T> made T": [MaybeId { id: None, title: "t".into() }] as Hit => false;
        "a variant added (reader knows more)": [Two::A(1), Two::B { left: 2 }] as Three => true;
        "a variant added (writer sends more)": [Three::A(1), Three::C] as Two => false;
        "a struct variant's field changed type": [Two::B { left: 2 }] as TwoText => false;
        "Vec<u8> to serde_bytes": [vec![1u8, 2]] as serde_bytes::ByteBuf => true;
        "serde_bytes to Vec<u8>": [serde_bytes::ByteBuf::from(vec![1u8, 2])] as Vec<u8> => true;
        "a newtype around what was written": ["x".to_owned()] as Sku => true;
        "Vec<T> to HashSet<T>": [vec![1u32, 2]] as HashSet<u32> => true;
        "HashMap to BTreeMap": [HashMap::from([(1u8, 2u8)])] as BTreeMap<u8, u8> => true;
        "[u8; 4] to (u8, u8, u8, u8)": [[1u8, 2, 3, 4]] as (u8, u8, u8, u8) => true;
        "a tuple grown by one": [(1u8, 2u8)] as (u8, u8, u8) => false;
        "a string to a number": ["1".to_owned()] as u32 => false;
    };
    assert!(rows.len() >= 25);
    let wrong: Vec<String> = rows.into_iter().flatten().collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// An `f64` narrowed to `f32` is refused though the codec reads it: it reads it with loss.
#[test]
fn an_f64_narrowed_to_f32_is_refused_because_the_codec_reads_it_with_loss() {
    assert!(!check_reads::<f64, f32>());
    let read: f32 = decode(&encode(&1e300f64).unwrap()).unwrap();
    assert!(read.is_infinite());
}

/// Two builds whose tracers reach different types (one sees `Result<u32, Two>` as opaque, the
/// other traces it): where the shapes part only at an opaque type, equal signature texts call,
/// and the rest of the shape is still checked; different texts do not call.
#[test]
fn an_opaque_type_against_a_traced_one_is_judged_by_the_signature_text_and_the_rest_by_shape() {
    use cluster::__private::trace;
    use cluster::service::shape::{FunctionShape, Shape};
    use cluster::{CallOptions, FunctionDescription};

    let function = |signature: &str, args: Vec<Shape>, output: Shape| {
        FunctionDescription::new("reserve", signature, false, CallOptions::new())
            .with_shape(FunctionShape::new(args, output))
    };
    let signature = "reserve(Hit) -> Result<u32, Two>";
    let hit = trace::<Hit>("Hit");
    let traced = function(signature, vec![hit.clone()], trace::<Result<u32, Two>>("R"));
    let opaque = || Shape::Opaque("Result<u32, Two>".to_owned());
    let older = function(signature, vec![hit.clone()], opaque());
    assert!(traced.calls(&older).is_ok() && older.calls(&traced).is_ok());
    let renamed = function("reserve(Hit) -> Result<u32, Three>", vec![hit], opaque());
    assert!(traced.calls(&renamed).is_err() && renamed.calls(&traced).is_err());
    // The same texts, and a field changed elsewhere: still refused, at that field.
    let narrowed = function(signature, vec![trace::<Narrow>("Hit")], opaque());
    let refused = traced.calls(&narrowed).unwrap_err();
    assert_eq!(refused.at, "argument 1, field `id`");
    // Both opaque at the same place, a field changed elsewhere: refused.
    let value = || Shape::Opaque("serde_json::Value".to_owned());
    let both = function(signature, vec![trace::<Hit>("Hit"), value()], opaque());
    let both_narrowed = function(signature, vec![trace::<Narrow>("Hit"), value()], opaque());
    assert!(both.calls(&both_narrowed).is_err());
}

/// Two different types under one serde name, one inside the other where the type comes round:
/// `rec T` could name either, so the shape is opaque and the pair is judged by its text, which
/// differs. Field names holding `/` are not taken for a path.
#[test]
fn shapes_that_could_name_two_things_are_never_judged_compatible_wrongly() {
    mod first {
        use serde::{Deserialize, Serialize};
        #[derive(Serialize, Deserialize)]
        #[serde(rename = "T")]
        pub(super) struct P {
            pub(super) a: u32,
            pub(super) sub: Q,
        }
        #[derive(Serialize, Deserialize)]
        #[serde(rename = "T")]
        pub(super) struct Q {
            pub(super) b: String,
            pub(super) back: Option<Box<P>>,
        }
    }
    mod second {
        use serde::{Deserialize, Serialize};
        #[derive(Serialize, Deserialize)]
        #[serde(rename = "T")]
        pub(super) struct P {
            pub(super) a: u32,
            pub(super) sub: Q,
        }
        #[derive(Serialize, Deserialize)]
        #[serde(rename = "T")]
        pub(super) struct Q {
            pub(super) b: String,
            pub(super) back: Option<Box<Q>>,
        }
    }
    let value = first::P {
        a: 1,
        sub: first::Q {
            b: "b".into(),
            back: Some(Box::new(first::P {
                a: 2,
                sub: first::Q {
                    b: "c".into(),
                    back: None,
                },
            })),
        },
    };
    assert!(decode::<second::P>(&encode(&value).unwrap()).is_err());
    assert!(!check_reads::<first::P, second::P>());

    #[derive(Serialize, Deserialize)]
    #[serde(rename = "S")]
    struct Slash {
        #[serde(rename = "x/y")]
        a: Option<u8>,
        x: Inner,
    }
    #[derive(Serialize, Deserialize)]
    struct Inner {
        y: Option<Box<Slash>>,
    }
    #[derive(Serialize, Deserialize)]
    #[serde(rename = "S")]
    struct SlashText {
        #[serde(rename = "x/y")]
        a: Option<String>,
        x: InnerText,
    }
    #[derive(Serialize, Deserialize)]
    struct InnerText {
        y: Option<Box<SlashText>>,
    }
    let value = Slash {
        a: Some(5),
        x: Inner { y: None },
    };
    assert!(decode::<SlashText>(&encode(&value).unwrap()).is_err());
    assert!(!check_reads::<Slash, SlashText>());
}
