//! When a value written in one shape can be read in another, given how the codec behaves
//! (`service/codec.rs`): MessagePack maps with named fields, unknown fields skipped, missing
//! `Option` and `#[serde(default)]` fields filled, enum variants by name, `Some(x)` written as
//! `x`.

use std::fmt;

use super::{Content, Field, Shape};

/// Where two shapes part, and how each side has it there.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Mismatch {
    /// The place: `argument 1, field `tags``.
    pub at: String,
    /// The client's side there.
    pub client: String,
    /// The provider's side there.
    pub provider: String,
    /// Whether one side there is a type the tracer could not follow and the other is not.
    pub(crate) opaque_against_traced: bool,
}

impl Mismatch {
    pub(crate) fn new(at: &str, client: String, provider: String) -> Self {
        Self {
            at: at.to_owned(),
            client,
            provider,
            opaque_against_traced: false,
        }
    }

    /// The same, one level further out: `outer, inner`.
    pub(crate) fn within(mut self, outer: &str) -> Self {
        self.at = if self.at.is_empty() {
            outer.to_owned()
        } else {
            format!("{outer}, {}", self.at)
        };
        self
    }

    /// Found with the provider as the writer (the result): put each side in its place.
    pub(crate) fn swapped(mut self) -> Self {
        std::mem::swap(&mut self.client, &mut self.provider);
        self
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: the client has {}, the provider {}",
            self.at, self.client, self.provider
        )
    }
}

/// `read`, not lenient.
#[cfg(test)]
pub(crate) fn readable(writer: &Shape, reader: &Shape) -> Result<(), Mismatch> {
    read(writer, reader, false)
}

/// Whether every value the `writer` shape produces decodes in the `reader` shape. Mismatches
/// name the writer's side as `client` (flip with [`Mismatch::swapped`]). With `lenient`, a
/// type the tracer could not follow on one side reads whatever the other side has there
/// (for two builds whose signature texts were found equal).
pub(crate) fn read(writer: &Shape, reader: &Shape, lenient: bool) -> Result<(), Mismatch> {
    let differ = || {
        let mut mismatch = Mismatch::new("", writer.to_string(), reader.to_string());
        mismatch.opaque_against_traced =
            matches!(writer, Shape::Opaque(_)) != matches!(reader, Shape::Opaque(_));
        Err(mismatch)
    };
    match (writer, reader) {
        (Shape::Option(w), Shape::Option(r)) => read(w, r, lenient),
        // `Some(x)` is written as `x`, so a plain value reads as an option.
        (w, Shape::Option(r)) if !matches!(w, Shape::Option(_)) => read(w, r, lenient),
        (Shape::Seq(w), Shape::Seq(r)) => read(w, r, lenient).map_err(|m| m.within("the items")),
        (Shape::Map(wk, wv), Shape::Map(rk, rv)) => {
            read(wk, rk, lenient).map_err(|m| m.within("the keys"))?;
            read(wv, rv, lenient).map_err(|m| m.within("the values"))
        }
        (Shape::Tuple(w), Shape::Tuple(r)) if w.len() == r.len() => {
            for (n, (w, r)) in w.iter().zip(r).enumerate() {
                read(w, r, lenient).map_err(|m| m.within(&format!("item {n}")))?;
            }
            Ok(())
        }
        (
            Shape::Struct { fields: w, .. },
            Shape::Struct {
                fields: r, closed, ..
            },
        ) => {
            if *closed && let Some(extra) = w.iter().find(|w| !r.iter().any(|r| r.name == w.name)) {
                let at = format!("field `{}`", extra.name);
                let refused = "none, and it denies unknown fields".to_owned();
                return Err(Mismatch::new(&at, extra.shape.to_string(), refused));
            }
            fields(w, r, lenient)
        }
        (Shape::Enum { variants: w, .. }, Shape::Enum { variants: r, .. }) => {
            // Each variant the writer may send must be known to the reader; the reader may know
            // more.
            for variant in w {
                let at = format!("variant `{}`", variant.name);
                let Some(known) = r.iter().find(|v| v.name == variant.name) else {
                    return Err(Mismatch::new(&at, "it".to_owned(), "none".to_owned()));
                };
                content(&variant.content, &known.content, lenient).map_err(|m| m.within(&at))?;
            }
            Ok(())
        }
        // Names of structs do not travel, but a recursive reference is only ever compared to
        // another of the same type.
        (Shape::Recursive(w), Shape::Recursive(r)) if w == r => Ok(()),
        (Shape::Opaque(w), Shape::Opaque(r)) if w == r => Ok(()),
        (Shape::Opaque(_), _) | (_, Shape::Opaque(_)) if lenient => Ok(()),
        (w, r) if is_primitive(w) && w == r => Ok(()),
        (w, r) if widens(w, r) => Ok(()),
        _ => differ(),
    }
}

/// Whether every value of `writer` fits `reader`: the codec writes an integer in the fewest
/// bytes that hold its value and reads it into any integer type it fits, and reads an `f32`
/// as an `f64`. A 128-bit integer is written as 16 bytes, which only a 128-bit reader takes;
/// a 128-bit reader takes any integer too, but an unsigned one reads a negative value
/// wrapped, so only unsigned writers widen into `u128`.
fn widens(writer: &Shape, reader: &Shape) -> bool {
    match (writer, reader) {
        (Shape::Uint(w), Shape::Uint(r)) | (Shape::Int(w), Shape::Int(r)) => w <= r,
        (Shape::Uint(w), Shape::Int(r)) => w < r,
        (Shape::Float(32), Shape::Float(64)) => true,
        // `serde_bytes` reads an array of bytes as well as its own format, and the codec hands
        // its format to a `Vec<u8>` as a sequence.
        (Shape::Seq(item), Shape::Bytes) | (Shape::Bytes, Shape::Seq(item)) => {
            **item == Shape::Uint(8)
        }
        _ => false,
    }
}

fn is_primitive(shape: &Shape) -> bool {
    matches!(
        shape,
        Shape::Bool
            | Shape::Int(_)
            | Shape::Uint(_)
            | Shape::Float(_)
            | Shape::Char
            | Shape::Str
            | Shape::Bytes
            | Shape::Unit
    )
}

fn content(writer: &Content, reader: &Content, lenient: bool) -> Result<(), Mismatch> {
    match (writer, reader) {
        (Content::Unit, Content::Unit) => Ok(()),
        (Content::Newtype(w), Content::Newtype(r)) => read(w, r, lenient),
        (Content::Tuple(w), Content::Tuple(r)) => {
            read(&Shape::Tuple(w.clone()), &Shape::Tuple(r.clone()), lenient)
        }
        (Content::Struct(w), Content::Struct(r)) => fields(w, r, lenient),
        _ => Err(Mismatch::new(
            "",
            kind(writer).to_owned(),
            kind(reader).to_owned(),
        )),
    }
}

fn kind(content: &Content) -> &'static str {
    match content {
        Content::Unit => "a unit variant",
        Content::Newtype(_) => "a newtype variant",
        Content::Tuple(_) => "a tuple variant",
        Content::Struct(_) => "a struct variant",
    }
}

/// Fields the writer has and the reader lacks are skipped; fields the reader has and the
/// writer lacks must be optional to the reader; common fields must be readable.
fn fields(writer: &[Field], reader: &[Field], lenient: bool) -> Result<(), Mismatch> {
    for field in reader {
        let at = format!("field `{}`", field.name);
        match writer.iter().find(|w| w.name == field.name) {
            Some(w) => read(&w.shape, &field.shape, lenient).map_err(|m| m.within(&at))?,
            None if field.optional => {}
            None => {
                return Err(Mismatch::new(
                    &at,
                    "none".to_owned(),
                    format!("{} (required)", field.shape),
                ));
            }
        }
    }
    Ok(())
}
