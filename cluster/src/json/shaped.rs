//! JSON arguments made into the MessagePack a provider expects, by the shape its registry entry
//! carries (`cluster::service::shape`): what lets `cluster call` and the gateway's function
//! routes call any service without its Rust types. Each JSON value is checked against the shape it stands for, so that a mistake is
//! said here, with the path of the value (`argument 1: .items[2].id`), rather than by the
//! provider as a decoding error.
//!
//! How JSON stands for each shape, as serde_json writes the same Rust types:
//!
//! | shape | JSON |
//! |---|---|
//! | bool, integers, floats, str | the JSON value; integers in range for their bits |
//! | `u128`, `i128` | a number within 64 bits, or a string of digits (answers past 64 bits too) |
//! | char | a string of one character |
//! | bytes | an array of numbers 0–255 |
//! | `()`, a unit struct | `null` |
//! | `Option<T>` | `null` or T |
//! | sequence, tuple | an array (a tuple of its exact length) |
//! | map | an object; keys that are not strings as their JSON text (`{"1": …}` for `u32` keys) |
//! | struct | an object by field name: every field that is not optional, no other field |
//! | enum | `"Variant"` for a unit variant, `{"Variant": content}` for the others |

use serde_json::Value as Json;

use crate::service::shape::{Content, Field, Shape};

use super::wire::Wire;

/// How deep a value may nest, counted across the map keys that are JSON text of their own:
/// the codec's bound (`cluster::service::MAX_DEPTH`). Each key is parsed afresh, so the
/// JSON parser's own bound does not hold across them, and the stack would.
const MAX_DEPTH: usize = crate::service::MAX_DEPTH;

/// An answer read without its shape, given its shape back where the codec's bytes stand for
/// something else: a `u128` or `i128` is written as 16 bytes and shown as the number.
pub fn from_wire(shape: &Shape, wire: Wire) -> Wire {
    Reshaped::default().value(shape, wire)
}

/// The structs and enums open further out, for `Shape::Recursive`, and how many shapes deep
/// the walk is.
#[derive(Default)]
struct Reshaped<'a> {
    open: Vec<&'a Shape>,
    depth: usize,
}

impl<'a> Reshaped<'a> {
    fn value(&mut self, shape: &'a Shape, wire: Wire) -> Wire {
        // A provider's shape may wrap each level of its reply in many `Option`s: past this,
        // the rest is shown as it was read.
        if self.depth >= 4 * MAX_DEPTH {
            return wire;
        }
        self.depth += 1;
        let wire = self.reshaped(shape, wire);
        self.depth -= 1;
        wire
    }

    fn reshaped(&mut self, shape: &'a Shape, wire: Wire) -> Wire {
        match (shape, wire) {
            (Shape::Uint(128), Wire::Bytes(bytes)) => match <[u8; 16]>::try_from(bytes) {
                Ok(bytes) => Wire::Uint128(u128::from_be_bytes(bytes)),
                Err(bytes) => Wire::Bytes(bytes),
            },
            (Shape::Int(128), Wire::Bytes(bytes)) => match <[u8; 16]>::try_from(bytes) {
                Ok(bytes) => Wire::Int128(i128::from_be_bytes(bytes)),
                Err(bytes) => Wire::Bytes(bytes),
            },
            (Shape::Option(inner), wire) if wire != Wire::Nil => self.value(inner, wire),
            (Shape::Seq(item), Wire::Array(items)) => {
                Wire::Array(items.into_iter().map(|w| self.value(item, w)).collect())
            }
            (Shape::Tuple(shapes), Wire::Array(items)) => self.tuple(shapes, items),
            (Shape::Map(key, value), Wire::Map(entries)) => Wire::Map(
                entries
                    .into_iter()
                    .map(|(k, v)| (self.value(key, k), self.value(value, v)))
                    .collect(),
            ),
            (Shape::Struct { fields, .. }, Wire::Map(entries)) => {
                self.open.push(shape);
                let wire = self.fields(fields, entries);
                self.open.pop();
                wire
            }
            (Shape::Enum { variants, .. }, Wire::Map(mut entries)) if entries.len() == 1 => {
                let (name, content) = entries.pop().expect("one entry");
                let variant = match &name {
                    Wire::Str(name) => variants.iter().find(|v| &v.name == name),
                    _ => None,
                };
                self.open.push(shape);
                let content = match (variant.map(|v| &v.content), content) {
                    (Some(Content::Newtype(shape)), w) => self.value(shape, w),
                    (Some(Content::Tuple(shapes)), Wire::Array(items)) => self.tuple(shapes, items),
                    (Some(Content::Struct(fields)), Wire::Map(entries)) => {
                        self.fields(fields, entries)
                    }
                    (_, w) => w,
                };
                self.open.pop();
                Wire::Map(vec![(name, content)])
            }
            (Shape::Recursive(name), wire) => match outer(&self.open, name) {
                Some(outer) => self.value(outer, wire),
                None => wire,
            },
            (_, wire) => wire,
        }
    }

    fn tuple(&mut self, shapes: &'a [Shape], items: Vec<Wire>) -> Wire {
        Wire::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(n, w)| match shapes.get(n) {
                    Some(shape) => self.value(shape, w),
                    None => w,
                })
                .collect(),
        )
    }

    fn fields(&mut self, fields: &'a [Field], entries: Vec<(Wire, Wire)>) -> Wire {
        Wire::Map(
            entries
                .into_iter()
                .map(|(k, v)| {
                    let field = match &k {
                        Wire::Str(name) => fields.iter().find(|f| &f.name == name),
                        _ => None,
                    };
                    let v = match field {
                        Some(field) => self.value(&field.shape, v),
                        None => v,
                    };
                    (k, v)
                })
                .collect(),
        )
    }
}

/// `json` as the shape `shape`, or what is wrong with it, starting with `path`.
pub fn to_wire(shape: &Shape, json: &Json, path: &str) -> Result<Wire, String> {
    Shaped::default().value(shape, json, path)
}

/// The function's argument list: `args` is a JSON array of one value per argument, encoded as
/// the argument tuple the client stub sends (`()` for none, an array otherwise).
pub fn arguments(shapes: &[Shape], args: &Json) -> Result<Wire, String> {
    let Json::Array(values) = args else {
        return Err(format!(
            "the arguments are a JSON array of {} value{} (one per argument), not {}",
            shapes.len(),
            plural(shapes.len()),
            kind(args)
        ));
    };
    if values.len() != shapes.len() {
        return Err(format!(
            "the function takes {} argument{}, {} given",
            shapes.len(),
            plural(shapes.len()),
            values.len()
        ));
    }
    if shapes.is_empty() {
        return Ok(Wire::Nil);
    }
    let mut shaped = Shaped::default();
    let items = shapes
        .iter()
        .zip(values)
        .enumerate()
        .map(|(n, (shape, value))| shaped.value(shape, value, &format!("argument {}", n + 1)))
        .collect::<Result<_, _>>()?;
    Ok(Wire::Array(items))
}

/// The structs and enums open further out, for `Shape::Recursive`, and how deep the value is.
#[derive(Default)]
struct Shaped<'a> {
    open: Vec<&'a Shape>,
    /// JSON values entered, counted once each (an `Option` or a recursive shape passes the
    /// same value on).
    depth: usize,
    at: Option<*const Json>,
}

impl<'a> Shaped<'a> {
    fn value(&mut self, shape: &'a Shape, json: &Json, path: &str) -> Result<Wire, String> {
        let entered = self.at != Some(std::ptr::from_ref(json));
        if entered {
            if self.depth >= MAX_DEPTH {
                return Err(format!("{path}: nested deeper than {MAX_DEPTH} levels"));
            }
            self.depth += 1;
        }
        let outer = self.at.replace(std::ptr::from_ref(json));
        let wire = self.shaped(shape, json, path);
        self.at = outer;
        if entered {
            self.depth -= 1;
        }
        wire
    }

    fn shaped(&mut self, shape: &'a Shape, json: &Json, path: &str) -> Result<Wire, String> {
        let wrong = || {
            Err(format!(
                "{path}: expected {}, found {}",
                expected(shape),
                kind(json)
            ))
        };
        Ok(match (shape, json) {
            (Shape::Bool, Json::Bool(b)) => Wire::Bool(*b),
            // JSON numbers end at 64 bits here: wider values come as a string of digits.
            (Shape::Int(128), Json::String(text)) => Wire::Int128(
                text.parse()
                    .map_err(|_| format!("{path}: {json} is not an i128"))?,
            ),
            (Shape::Uint(128), Json::String(text)) => Wire::Uint128(
                text.parse()
                    .map_err(|_| format!("{path}: {json} is not a u128"))?,
            ),
            (Shape::Int(128) | Shape::Uint(128), Json::Number(n))
                if n.as_i64().is_none() && n.as_u64().is_none() =>
            {
                return Err(format!(
                    "{path}: {n} is past 64 bits, where a JSON number loses digits; write a \
                     128-bit value as a string of digits, such as \"{}\"",
                    u128::MAX
                ));
            }
            (Shape::Int(bits), Json::Number(n)) => {
                let (min, max) = signed_range(*bits);
                match n.as_i64() {
                    Some(v) if (min..=max).contains(&v) => Wire::Int(v),
                    _ => return Err(format!("{path}: {n} is not an i{bits}")),
                }
            }
            (Shape::Uint(bits), Json::Number(n)) => match n.as_u64() {
                Some(v) if *bits >= 64 || v >> bits == 0 => Wire::Uint(v),
                _ => return Err(format!("{path}: {n} is not a u{bits}")),
            },
            (Shape::Float(bits), Json::Number(n)) => {
                let x = n.as_f64().unwrap_or(f64::NAN);
                // An f32 reads a larger f64 as infinity: say so rather than send it.
                if *bits == 32 && x.abs() > f64::from(f32::MAX) {
                    return Err(format!("{path}: {n} is past an f32's range"));
                }
                Wire::Float(x)
            }
            (Shape::Char, Json::String(text)) if text.chars().count() == 1 => {
                Wire::Str(text.clone())
            }
            (Shape::Str, Json::String(text)) => Wire::Str(text.clone()),
            (Shape::Bytes, Json::Array(items)) => Wire::Bytes(
                items
                    .iter()
                    .enumerate()
                    .map(|(n, item)| {
                        item.as_u64()
                            .and_then(|b| u8::try_from(b).ok())
                            .ok_or_else(|| format!("{path}[{n}]: expected a byte (0 to 255)"))
                    })
                    .collect::<Result<_, _>>()?,
            ),
            (Shape::Unit, Json::Null) => Wire::Nil,
            (Shape::Option(_), Json::Null) => Wire::Nil,
            (Shape::Option(inner), _) => self.value(inner, json, path)?,
            (Shape::Seq(item), Json::Array(items)) => Wire::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(n, value)| self.value(item, value, &format!("{path}[{n}]")))
                    .collect::<Result<_, _>>()?,
            ),
            (Shape::Map(key, value), Json::Object(map)) => Wire::Map(
                map.iter()
                    .map(|(k, v)| {
                        let key = self.key(key, k, path)?;
                        Ok((key, self.value(value, v, &format!("{path}.{k}"))?))
                    })
                    .collect::<Result<_, String>>()?,
            ),
            (Shape::Tuple(items), Json::Array(_)) => self.tuple(items, json, path)?,
            (Shape::Struct { fields, .. }, Json::Object(_)) => {
                self.open.push(shape);
                let fields = self.fields(fields, json, path);
                self.open.pop();
                fields?
            }
            (Shape::Enum { variants, .. }, Json::String(_) | Json::Object(_)) => {
                let (name, content) = match json {
                    Json::Object(map) if map.len() == 1 => {
                        let (name, content) = map.iter().next().expect("one entry");
                        (name.as_str(), Some(content))
                    }
                    Json::Object(_) => {
                        return Err(format!(
                            "{path}: an enum variant with content is an object of one key, the variant's name"
                        ));
                    }
                    _ => (name_of(json), None),
                };
                let Some(variant) = variants.iter().find(|v| v.name == name) else {
                    let names: Vec<_> = variants.iter().map(|v| v.name.as_str()).collect();
                    return Err(format!(
                        "{path}: no variant `{name}`; the variants are {}",
                        names.join(", ")
                    ));
                };
                self.open.push(shape);
                let wire = self.variant(&variant.content, name, content, path);
                self.open.pop();
                wire?
            }
            (Shape::Recursive(name), _) => {
                let Some(outer) = outer(&self.open, name) else {
                    return Err(format!("{path}: the shape names `{name}` outside itself"));
                };
                self.value(outer, json, path)?
            }
            // The provider's type decodes through `deserialize_any` (a `serde_json::Value`, an
            // untagged enum): it takes the JSON as it stands.
            (Shape::Opaque(_), _) => Wire::from_json(json),
            _ => return wrong(),
        })
    }

    /// A map key, given as an object's key (a string) for a key of shape `shape`.
    fn key(&mut self, shape: &'a Shape, key: &str, path: &str) -> Result<Wire, String> {
        match shape {
            Shape::Str | Shape::Char | Shape::Opaque(_) | Shape::Enum { .. } => {
                self.value(shape, &Json::String(key.to_owned()), path)
            }
            _ => {
                let parsed: Json = serde_json::from_str(key).map_err(|_| {
                    format!(
                        "{path}: the key `{key}` is not {} (keys of this map are {shape}, written as JSON text)",
                        expected(shape)
                    )
                })?;
                self.value(shape, &parsed, &format!("{path} key `{key}`"))
            }
        }
    }

    fn tuple(&mut self, items: &'a [Shape], json: &Json, path: &str) -> Result<Wire, String> {
        match json {
            Json::Array(values) if values.len() == items.len() => Ok(Wire::Array(
                items
                    .iter()
                    .zip(values)
                    .enumerate()
                    .map(|(n, (item, value))| self.value(item, value, &format!("{path}.{n}")))
                    .collect::<Result<_, _>>()?,
            )),
            _ => Err(format!(
                "{path}: expected an array of {}, found {}",
                items.len(),
                kind(json)
            )),
        }
    }

    fn fields(&mut self, fields: &'a [Field], json: &Json, path: &str) -> Result<Wire, String> {
        let Json::Object(map) = json else {
            return Err(format!("{path}: expected an object, found {}", kind(json)));
        };
        if let Some(unknown) = map.keys().find(|k| !fields.iter().any(|f| &f.name == *k)) {
            let names: Vec<_> = fields.iter().map(|f| f.name.as_str()).collect();
            return Err(format!(
                "{path}: no field `{unknown}`; the fields are {}",
                names.join(", ")
            ));
        }
        let mut entries = Vec::with_capacity(map.len());
        for field in fields {
            match map.get(&field.name) {
                Some(value) => entries.push((
                    Wire::Str(field.name.clone()),
                    self.value(&field.shape, value, &format!("{path}.{}", field.name))?,
                )),
                None if field.optional => {}
                None => {
                    return Err(format!(
                        "{path}: the field `{}` ({}) is missing",
                        field.name, field.shape
                    ));
                }
            }
        }
        Ok(Wire::Map(entries))
    }

    fn variant(
        &mut self,
        content: &'a Content,
        name: &str,
        value: Option<&Json>,
        path: &str,
    ) -> Result<Wire, String> {
        let path = format!("{path}.{name}");
        let inner = match (content, value) {
            (Content::Unit, None | Some(Json::Null)) => return Ok(Wire::Str(name.to_owned())),
            (Content::Unit, Some(other)) => {
                return Err(format!(
                    "{path}: a unit variant carries nothing, found {}",
                    kind(other)
                ));
            }
            (_, None) => {
                return Err(format!(
                    "{path}: this variant carries a value: write {{\"{name}\": …}}"
                ));
            }
            (Content::Newtype(shape), Some(value)) => self.value(shape, value, &path)?,
            (Content::Tuple(items), Some(value)) => self.tuple(items, value, &path)?,
            (Content::Struct(fields), Some(value)) => self.fields(fields, value, &path)?,
        };
        Ok(Wire::Map(vec![(Wire::Str(name.to_owned()), inner)]))
    }
}

fn name_of(json: &Json) -> &str {
    json.as_str().unwrap_or_default()
}

/// The struct or enum a `Shape::Recursive(name)` stands for: the innermost open one so named.
fn outer<'a>(open: &[&'a Shape], name: &str) -> Option<&'a Shape> {
    open.iter().rev().copied().find(|s| match s {
        Shape::Struct { name: n, .. } | Shape::Enum { name: n, .. } => n == name,
        _ => false,
    })
}

fn signed_range(bits: u8) -> (i64, i64) {
    match bits {
        0 => (0, 0),
        64.. => (i64::MIN, i64::MAX),
        bits => (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1),
    }
}

/// What JSON stands for `shape`, for messages.
fn expected(shape: &Shape) -> String {
    match shape {
        Shape::Bool => "true or false".to_owned(),
        Shape::Int(bits) => format!("an integer (i{bits})"),
        Shape::Uint(bits) => format!("a non-negative integer (u{bits})"),
        Shape::Float(bits) => format!("a number (f{bits})"),
        Shape::Char => "a string of one character".to_owned(),
        Shape::Str => "a string".to_owned(),
        Shape::Bytes => "an array of bytes".to_owned(),
        Shape::Unit => "null".to_owned(),
        Shape::Seq(_) => format!("an array ({shape})"),
        Shape::Map(..) => format!("an object ({shape})"),
        Shape::Tuple(items) => format!("an array of {} ({shape})", items.len()),
        Shape::Struct { name, .. } => format!("an object ({name} {shape})"),
        Shape::Enum { name, .. } => format!("a variant of {name}: \"Name\" or {{\"Name\": …}}"),
        other => other.to_string(),
    }
}

/// What kind of JSON value this is, for messages.
fn kind(json: &Json) -> String {
    match json {
        Json::Null => "null".to_owned(),
        Json::Bool(b) => b.to_string(),
        Json::Number(n) => format!("the number {n}"),
        Json::String(text) if text.len() <= 40 => format!("the string {json}"),
        Json::String(_) => "a string".to_owned(),
        Json::Array(items) => format!("an array of {}", items.len()),
        Json::Object(_) => "an object".to_owned(),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
