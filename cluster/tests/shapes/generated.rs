//! Generated values against every pair of field types: whenever the check says a value written
//! as `W` reads as `R`, every generated `W` value decodes as `R` through the codec. proptest
//! prints the seed of a failing case and keeps it in `proptest-regressions/`.

use cluster::service::{decode, encode};
use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::check_reads;

/// The field that changes type between the writer and the reader.
#[derive(Debug, Serialize, Deserialize)]
struct Field<T> {
    v: T,
    w: Option<T>,
}

/// For the writer type `W`: every reader type in the list, the check against the codec.
macro_rules! against_readers {
    ($w:ty, $value:expr) => {{
        let value: Field<$w> = $value;
        let bytes = encode(&value).unwrap();
        let mut failures = Vec::new();
        against_readers!(@each $w, bytes, failures;
            u8, u16, u32, u64, u128, i8, i16, i32, i64, i128, f32, f64, bool, char, String,
            Option<u32>, Option<i64>, Vec<u8>, Vec<u32>, (u8, u8), serde_bytes::ByteBuf
        );
        prop_assert!(failures.is_empty(), "{:?}: {}", value, failures.join("; "));
    }};
    (@each $w:ty, $bytes:ident, $failures:ident; $($r:ty),*) => {
        $(
            if let Some(failure) = agrees::<Field<$w>, Field<$r>>(&$bytes) {
                $failures.push(failure);
            }
        )*
    };
}

/// `None` when the check and the codec agree on these bytes (the check may refuse what these
/// particular bytes would have survived: `u64` to `u32` for a small value).
fn agrees<W: DeserializeOwned, R: DeserializeOwned>(bytes: &[u8]) -> Option<String> {
    let checked = check_reads::<W, R>();
    match decode::<R>(bytes) {
        Err(e) if checked => Some(format!(
            "the check lets {} read as {}, the codec says {e}",
            std::any::type_name::<W>(),
            std::any::type_name::<R>()
        )),
        _ => None,
    }
}

fn field<T: Clone + std::fmt::Debug>(
    values: impl Strategy<Value = T> + Clone,
) -> impl Strategy<Value = Field<T>> {
    (values.clone(), proptest::option::of(values)).prop_map(|(v, w)| Field { v, w })
}

proptest! {
    #[test]
    fn unsigned_writers(a in field(any::<u8>()), b in field(any::<u16>()), c in field(any::<u32>()),
                        d in field(any::<u64>()), e in field(any::<u128>())) {
        against_readers!(u8, a);
        against_readers!(u16, b);
        against_readers!(u32, c);
        against_readers!(u64, d);
        against_readers!(u128, e);
    }

    #[test]
    fn signed_writers(a in field(any::<i8>()), b in field(any::<i16>()), c in field(any::<i32>()),
                      d in field(any::<i64>()), e in field(any::<i128>())) {
        against_readers!(i8, a);
        against_readers!(i16, b);
        against_readers!(i32, c);
        against_readers!(i64, d);
        against_readers!(i128, e);
    }

    #[test]
    fn other_writers(a in field(any::<f32>()), b in field(any::<f64>()), c in field(any::<bool>()),
                     d in field(any::<char>()), e in field(any::<String>()),
                     f in field(any::<Option<u32>>()), g in field(any::<Vec<u8>>()),
                     h in field(any::<(u8, u8)>())) {
        against_readers!(f32, a);
        against_readers!(f64, b);
        against_readers!(bool, c);
        against_readers!(char, d);
        against_readers!(String, e);
        against_readers!(Option<u32>, f);
        against_readers!(Vec<u8>, g);
        against_readers!((u8, u8), h);
    }
}
