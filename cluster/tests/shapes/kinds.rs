//! The shapes `#[service]` traces for the types users write: every kind in serde's data model,
//! serde's attributes, and the common crates' types (`docs/compatibility.md`, "What is traced").
//! Each row is the type and the shape's canonical text; none may be opaque.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::num::{NonZeroU32, Wrapping};
use std::sync::Arc;

use serde::Deserialize;

#[derive(Deserialize)]
struct Unit;
#[derive(Deserialize)]
struct Meters(f64);
#[derive(Deserialize)]
struct Point(i32, i32);
#[derive(Deserialize, PartialEq, Eq, Hash)]
enum Size {
    Small,
    Large,
}
#[derive(Deserialize)]
enum Shapes {
    Dot,
    Circle(f32),
    Line(Point, Point),
    Rect {
        w: u16,
        h: u16,
        label: Option<String>,
    },
}
#[derive(Deserialize)]
#[allow(clippy::enum_variant_names)]
enum Stock {
    UnknownSku(String),
    OutOfStock { sku: String, left: u32 },
    Closed,
}
#[derive(Deserialize)]
enum Outer {
    A,
    B(Stock),
}
#[derive(Deserialize)]
struct Page<T> {
    items: Vec<T>,
    next: Option<String>,
}
#[derive(Deserialize)]
enum Tree {
    Leaf(u8),
    Node(Box<Tree>, Box<Tree>),
}
#[derive(Deserialize)]
struct Category {
    name: String,
    parent: Option<Box<Category>>,
}
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Renamed {
    order_id: u64,
    #[serde(rename = "qty")]
    quantity: u32,
    #[serde(default)]
    note: String,
    #[serde(skip)]
    cache: Vec<u8>,
    #[serde(alias = "colour")]
    color: String,
}
#[derive(Deserialize)]
#[serde(tag = "t", content = "c")]
enum Adjacent {
    Ping,
    Echo(String),
    Move { x: i8 },
}
#[derive(Deserialize)]
#[serde(transparent)]
struct Sku(String);
#[derive(Deserialize)]
#[serde(try_from = "u32")]
struct Even(u32);
impl TryFrom<u32> for Even {
    type Error = String;
    fn try_from(n: u32) -> Result<Self, String> {
        if n.is_multiple_of(2) {
            Ok(Even(n))
        } else {
            Err(format!("{n} is odd"))
        }
    }
}
#[derive(Deserialize)]
enum Mode {
    Fast,
    #[serde(other)]
    Unknown,
}

use crate::shape;

macro_rules! rows {
    ($($ty:ty => $text:expr,)*) => {
        vec![$((stringify!($ty), shape::<$ty>(), $text)),*]
    };
}

#[test]
fn every_kind_of_serde_type_is_traced() {
    let rows: Vec<(&str, String, &str)> = rows! {
        bool => "bool",
        i8 => "i8",
        u128 => "u128",
        i128 => "i128",
        char => "char",
        String => "str",
        Box<str> => "str",
        std::borrow::Cow<'static, str> => "str",
        serde_bytes::ByteBuf => "bytes",
        () => "()",
        Unit => "()",
        Meters => "f64",
        Point => "(i32, i32)",
        Option<u8> => "option<u8>",
        Vec<String> => "[str]",
        VecDeque<u8> => "[u8]",
        HashSet<u32> => "[u32]",
        BTreeSet<String> => "[str]",
        HashMap<String, u64> => "map<str, u64>",
        BTreeMap<u32, String> => "map<u32, str>",
        HashMap<(u8, u8), String> => "map<(u8, u8), str>",
        HashMap<Size, u8> => "map<enum{Small, Large}, u8>",
        [u8; 4] => "(u8, u8, u8, u8)",
        (u8, String, bool) => "(u8, str, bool)",
        Size => "enum{Small, Large}",
        Shapes => "enum{Dot, Circle(f32), Line((i32, i32), (i32, i32)), Rect{w: u16, h: u16, label?: option<str>}}",
        Result<u32, Stock> => "enum{Ok(u32), Err(enum{UnknownSku(str), OutOfStock{sku: str, left: u32}, Closed})}",
        Outer => "enum{A, B(enum{UnknownSku(str), OutOfStock{sku: str, left: u32}, Closed})}",
        (Page<u32>, Page<String>) => "({items: [u32], next?: option<str>}, {items: [str], next?: option<str>})",
        Tree => "enum{Leaf(u8), Node(rec Tree, rec Tree)}",
        Category => "{name: str, parent?: option<rec Category>}",
        Option<Box<Category>> => "option<{name: str, parent?: option<rec Category>}>",
        Renamed => "{orderId: u64, qty: u32, note?: str, color: str}",
        Sku => "str",
        Even => "u32",
        Mode => "enum{Fast, Unknown}",
        Arc<String> => "str",
        Box<Point> => "(i32, i32)",
        NonZeroU32 => "u32",
        Wrapping<u8> => "u8",
        std::cmp::Reverse<u8> => "u8",
        std::ops::Range<u32> => "{start: u32, end: u32}!",
        std::ops::Bound<u32> => "enum{Unbounded, Included(u32), Excluded(u32)}",
        std::time::Duration => "{secs: u64, nanos: u32}!",
        std::time::SystemTime => "{secs_since_epoch: u64, nanos_since_epoch: u32}!",
        std::net::IpAddr => "enum{V4((u8, u8, u8, u8)), V6((u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8))}",
        std::net::SocketAddr => "enum{V4(((u8, u8, u8, u8), u16)), V6(((u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8), u16))}",
        std::path::PathBuf => "str",
        uuid::Uuid => "bytes",
        chrono::DateTime<chrono::Utc> => "str",
        chrono::NaiveDate => "str",
        chrono::NaiveDateTime => "str",
        time::OffsetDateTime => "(i32, u16, u8, u8, u8, u32, i8, i8, i8)",
        time::Date => "(i32, u16)",
        time::Duration => "(i64, i32)",
    };
    assert!(rows.len() >= 40, "{} rows", rows.len());
    let wrong: Vec<String> = rows
        .iter()
        .filter(|(_, got, want)| got != want)
        .map(|(ty, got, want)| format!("{ty}: traced {got}, expected {want}"))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum Internal {
    A { x: u8 },
    B,
}
#[derive(Deserialize)]
#[serde(untagged)]
enum Untagged {
    N(u8),
    S(String),
}
#[derive(Deserialize)]
struct Flat {
    id: u64,
    #[serde(flatten)]
    rest: HashMap<String, String>,
}

/// What only `deserialize_any` reads has no shape the tracer can see: it is opaque, compared by
/// its type as written, and a warning says so when the description is first read.
#[test]
fn types_read_through_deserialize_any_are_opaque() {
    for (got, ty) in [
        (shape::<Adjacent>(), "shapes::kinds::Adjacent"),
        (shape::<Internal>(), "shapes::kinds::Internal"),
        (shape::<Untagged>(), "shapes::kinds::Untagged"),
        (shape::<Flat>(), "shapes::kinds::Flat"),
        (shape::<serde_json::Value>(), "serde_json::value::Value"),
    ] {
        assert_eq!(got, format!("`{ty}`"));
    }
}

#[derive(Deserialize)]
struct Forest(Vec<Forest>);
#[derive(Deserialize)]
struct Cons(u32, Option<Box<Cons>>);
#[derive(Deserialize)]
struct Doc(HashMap<String, Doc>);

/// Reads a sequence of unknown length as a tuple of `usize::MAX` items, as some crates do.
struct Unprefixed;
impl<'de> Deserialize<'de> for Unprefixed {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Items;
        impl<'de> serde::de::Visitor<'de> for Items {
            type Value = Unprefixed;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("items")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Unprefixed, A::Error> {
                while a.next_element::<u8>()?.is_some() {}
                Ok(Unprefixed)
            }
        }
        d.deserialize_tuple(usize::MAX, Items)
    }
}

/// serde lists a field's names (its own and its aliases) in alphabetical order, and `Deserialize`
/// does not say which is its own: an alias that sorts after the field's name is dropped, one
/// that sorts before it would stand in the shape for the name the field is written under, so
/// that type is opaque.
#[test]
fn an_alias_sorting_before_its_field_makes_the_type_opaque() {
    #[derive(Deserialize)]
    struct Before {
        #[serde(alias = "name")]
        title: String,
    }
    #[derive(Deserialize)]
    struct After {
        #[serde(alias = "title2")]
        title: String,
    }
    assert_eq!(
        shape::<Before>(),
        "`shapes::kinds::an_alias_sorting_before_its_field_makes_the_type_opaque::Before`"
    );
    assert_eq!(shape::<After>(), "{title: str}");
}

/// A type that contains itself with no named struct or enum in between has nothing to write
/// `rec Name` against: opaque, not a stack overflow. A tuple of `usize::MAX` items: opaque, not
/// a panic.
#[test]
fn self_containing_wrappers_and_endless_tuples_are_opaque_not_a_crash() {
    assert_eq!(shape::<Forest>(), "`shapes::kinds::Forest`");
    assert_eq!(shape::<Cons>(), "`shapes::kinds::Cons`");
    assert_eq!(shape::<Doc>(), "`shapes::kinds::Doc`");
    assert_eq!(shape::<Unprefixed>(), "`shapes::kinds::Unprefixed`");
    // Through a named struct, the wrapper is fine.
    #[derive(Deserialize)]
    struct Node {
        kids: Kids,
    }
    #[derive(Deserialize)]
    struct Kids(Vec<Node>);
    assert_eq!(shape::<Node>(), "{kids: [rec Node]}");
    // A wrapper met again inside a named struct it holds: the struct is where it is cut.
    #[derive(Deserialize)]
    struct Ring(Vec<Link>);
    #[derive(Deserialize)]
    struct Link {
        next: Ring,
    }
    assert_eq!(shape::<Ring>(), "[{next: [rec Link]}]");
}
