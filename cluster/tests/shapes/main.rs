//! Shapes as users write their types (`docs/compatibility.md`): what is traced for each kind
//! of type (`kinds`), and whether the compatibility check agrees with the codec about which
//! changes a call survives (`changes`, `generated`).

#![allow(dead_code)]

mod changes;
mod generated;
mod kinds;
mod shop;

use cluster::__private::{FunctionShape, trace};
use serde::de::DeserializeOwned;

/// The canonical text of `T`'s shape.
fn shape<T: DeserializeOwned>() -> String {
    trace::<T>(std::any::type_name::<T>()).to_string()
}

/// Whether the check lets a value written as `W` be read as `R` (as an argument).
fn check_reads<W: DeserializeOwned, R: DeserializeOwned>() -> bool {
    let writer = FunctionShape::new(vec![trace::<W>("W")], trace::<()>("()"));
    let reader = FunctionShape::new(vec![trace::<R>("R")], trace::<()>("()"));
    writer.calls(&reader).is_ok()
}
