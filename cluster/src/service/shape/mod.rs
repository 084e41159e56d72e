//! The canonical shape of a function: what its arguments and result look like on the wire,
//! computed at run time from the real types (`trace`), and when two shapes can talk
//! (`relation`). `docs/compatibility.md` walks through it.
//!
//! A shape knows only what MessagePack with named fields carries: struct fields by name (the
//! struct's own name and path do not matter), enum variants by name, sequences, maps, tuples and
//! primitives. A type alias is expanded by the compiler before anything here sees it.

mod relation;
mod trace;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use relation::Mismatch;
use relation::read;
#[cfg(test)]
pub(crate) use relation::readable;
pub use trace::trace;

/// What one value looks like on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Shape {
    /// `bool`.
    Bool,
    /// A signed integer of this many bits.
    Int(u8),
    /// An unsigned integer of this many bits.
    Uint(u8),
    /// A float of this many bits.
    Float(u8),
    /// A `char`.
    Char,
    /// A string.
    Str,
    /// Bytes (`serde_bytes`).
    Bytes,
    /// `()`, a unit struct.
    Unit,
    /// `Option<T>`.
    Option(Box<Shape>),
    /// A sequence: `Vec<T>`, `HashSet<T>`, `[T]`.
    Seq(Box<Shape>),
    /// A map: `HashMap<K, V>`, `BTreeMap<K, V>`.
    Map(Box<Shape>, Box<Shape>),
    /// A tuple, a tuple struct or an array of fixed length.
    Tuple(Vec<Shape>),
    /// A struct with named fields; `name` is for people, the fields are what counts.
    Struct {
        /// The struct's serde name.
        name: String,
        /// Its fields, in declaration order.
        fields: Vec<Field>,
        /// Whether it refuses fields it does not know (`#[serde(deny_unknown_fields)]`), as
        /// probed by decoding it with one field more.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        closed: bool,
    },
    /// An enum; `name` is for people, the variants are what counts.
    Enum {
        /// The enum's serde name.
        name: String,
        /// Its variants, in declaration order.
        variants: Vec<Variant>,
    },
    /// The struct or enum of this name, already open further out: a recursive type.
    Recursive(String),
    /// A type the tracer could not follow (it deserializes through `deserialize_any`, such as
    /// `serde_json::Value` or an untagged enum): its type as written, compared as text.
    Opaque(String),
}

/// A field of a struct (or of a struct variant).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Field {
    /// The field's name on the wire (after `#[serde(rename)]`).
    pub name: String,
    /// Its shape.
    pub shape: Shape,
    /// Whether the struct decodes without it: an `Option` or a `#[serde(default)]` field, as
    /// probed by decoding the struct with the field left out.
    #[serde(default)]
    pub optional: bool,
}

/// A variant of an enum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Variant {
    /// The variant's name on the wire.
    pub name: String,
    /// What it carries.
    pub content: Content,
}

/// What an enum variant carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Content {
    /// Nothing.
    Unit,
    /// One value.
    Newtype(Shape),
    /// Several values.
    Tuple(Vec<Shape>),
    /// Named fields.
    Struct(Vec<Field>),
}

/// The shape of a function: its argument tuple and its return value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FunctionShape {
    /// One shape per argument.
    pub args: Vec<Shape>,
    /// The return value (`Result<T, E>` is an enum of `Ok` and `Err`).
    pub output: Shape,
}

impl FunctionShape {
    /// A function shape from its parts, as `#[service]` builds it.
    pub fn new(args: Vec<Shape>, output: Shape) -> Self {
        Self { args, output }
    }

    /// Whether a client of this shape can call a provider of `provider`'s: the provider reads
    /// the client's arguments and the client reads the provider's result. The first thing in
    /// the way, if any.
    pub fn calls(&self, provider: &FunctionShape) -> Result<(), Mismatch> {
        self.calls_with(provider, false)
    }

    /// [`calls`](Self::calls), and with `lenient`, a type the tracer could not follow on one
    /// side calls whatever the other side traced there.
    pub(crate) fn calls_with(
        &self,
        provider: &FunctionShape,
        lenient: bool,
    ) -> Result<(), Mismatch> {
        if self.args.len() != provider.args.len() {
            return Err(Mismatch::new(
                "the arguments",
                format!("{} arguments", self.args.len()),
                format!("{} arguments", provider.args.len()),
            ));
        }
        for (n, (client, provider)) in self.args.iter().zip(&provider.args).enumerate() {
            read(client, provider, lenient)
                .map_err(|m| m.within(&format!("argument {}", n + 1)))?;
        }
        // The result travels the other way: the provider writes it, the client reads it.
        read(&provider.output, &self.output, lenient).map_err(|m| m.within("the result").swapped())
    }

    /// Whether any argument or the result holds a type the tracer could not follow.
    pub fn has_opaque(&self) -> bool {
        self.args.iter().any(Shape::has_opaque) || self.output.has_opaque()
    }
}

impl Field {
    /// A field: its name on the wire, its shape, whether the struct decodes without it.
    pub fn new(name: impl Into<String>, shape: Shape, optional: bool) -> Self {
        Self {
            name: name.into(),
            shape,
            optional,
        }
    }
}

impl Variant {
    /// A variant: its name on the wire and what it carries.
    pub fn new(name: impl Into<String>, content: Content) -> Self {
        Self {
            name: name.into(),
            content,
        }
    }
}

impl Shape {
    /// Whether this shape holds an [`Opaque`](Shape::Opaque) type anywhere.
    pub fn has_opaque(&self) -> bool {
        match self {
            Shape::Opaque(_) => true,
            Shape::Option(inner) | Shape::Seq(inner) => inner.has_opaque(),
            Shape::Map(key, value) => key.has_opaque() || value.has_opaque(),
            Shape::Tuple(items) => items.iter().any(Shape::has_opaque),
            Shape::Struct { fields, .. } => fields.iter().any(|f| f.shape.has_opaque()),
            Shape::Enum { variants, .. } => variants.iter().any(|v| match &v.content {
                Content::Unit => false,
                Content::Newtype(shape) => shape.has_opaque(),
                Content::Tuple(items) => items.iter().any(Shape::has_opaque),
                Content::Struct(fields) => fields.iter().any(|f| f.shape.has_opaque()),
            }),
            _ => false,
        }
    }
}

impl fmt::Display for FunctionShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        for (n, arg) in self.args.iter().enumerate() {
            if n > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{arg}")?;
        }
        write!(f, ") -> {}", self.output)
    }
}

/// The canonical text: `{id: u64, score?: option<f32>}` (`{…}!` when it denies unknown fields),
/// `map<str, u64>`, `enum{A, B(u8)}`.
/// Names of structs and enums are left out: they do not travel.
impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Bool => f.write_str("bool"),
            Shape::Int(bits) => write!(f, "i{bits}"),
            Shape::Uint(bits) => write!(f, "u{bits}"),
            Shape::Float(bits) => write!(f, "f{bits}"),
            Shape::Char => f.write_str("char"),
            Shape::Str => f.write_str("str"),
            Shape::Bytes => f.write_str("bytes"),
            Shape::Unit => f.write_str("()"),
            Shape::Option(inner) => write!(f, "option<{inner}>"),
            Shape::Seq(inner) => write!(f, "[{inner}]"),
            Shape::Map(key, value) => write!(f, "map<{key}, {value}>"),
            Shape::Tuple(items) => {
                f.write_str("(")?;
                list(f, items)?;
                f.write_str(")")
            }
            Shape::Struct { fields, closed, .. } => {
                fields_text(f, fields)?;
                if *closed {
                    f.write_str("!")?;
                }
                Ok(())
            }
            Shape::Enum { variants, .. } => {
                f.write_str("enum{")?;
                for (n, variant) in variants.iter().enumerate() {
                    if n > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(&variant.name)?;
                    match &variant.content {
                        Content::Unit => {}
                        Content::Newtype(shape) => write!(f, "({shape})")?,
                        Content::Tuple(items) => {
                            f.write_str("(")?;
                            list(f, items)?;
                            f.write_str(")")?;
                        }
                        Content::Struct(fields) => fields_text(f, fields)?,
                    }
                }
                f.write_str("}")
            }
            Shape::Recursive(name) => write!(f, "rec {name}"),
            Shape::Opaque(text) => write!(f, "`{text}`"),
        }
    }
}

fn list(f: &mut fmt::Formatter<'_>, items: &[Shape]) -> fmt::Result {
    for (n, item) in items.iter().enumerate() {
        if n > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
}

fn fields_text(f: &mut fmt::Formatter<'_>, fields: &[Field]) -> fmt::Result {
    f.write_str("{")?;
    for (n, field) in fields.iter().enumerate() {
        if n > 0 {
            f.write_str(", ")?;
        }
        let mark = if field.optional { "?" } else { "" };
        write!(f, "{}{mark}: {}", field.name, field.shape)?;
    }
    f.write_str("}")
}
