//! Tracing a type's shape: its `Deserialize` impl is run against a deserializer that hands it
//! made-up values (0, "", one item per sequence) and writes down what it asks for.
//!
//! An enum is asked for one variant per run, so the type is traced again until every variant
//! of every enum met has been seen; once an enum's own variants are all seen, a run picks the
//! variant under which an enum not yet complete was met. A recursive type is cut where it comes
//! round again: a sequence there is read as empty, an `Option` or a map as absent (one run more),
//! an enum as a variant already seen. Then, for every struct and struct variant, one run per
//! field with the field left out: the struct decodes without it exactly when it is an `Option`
//! or `#[serde(default)]`, which is what the codec does with a field that a peer lacks.
//!
//! A type that refuses a made-up value (a `Uuid` given no bytes, a `chrono::DateTime` given
//! "") is run again with the next candidate at the place it refused
//! (`candidates`), so types that validate what they read are traced too.
//!
//! Structs and enums are told apart by their Rust type (`std::any::type_name` of what the
//! visitor builds) as well as their serde name and fields, so two instantiations of one generic
//! type keep their own shapes.

use std::collections::HashMap;
use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};

use super::{Content, Field, Shape, Variant};

/// Runs at most this many times per type: enough for dozens of enums and their made-up values.
const MAX_RUNS: usize = 1024;
/// Picks of one variant that failed this often end the trace (its values cannot be made up).
const MAX_ATTEMPTS: u32 = 4;
/// Structs and enums nested deeper than this end the trace: a type that recurses through a
/// new instantiation each time (`struct Deep<T>(Option<Box<Deep<Vec<T>>>>)`) never comes round.
const MAX_DEPTH: usize = 64;
/// Tuples longer than this end the trace (a type may read a sequence of unknown length as a
/// tuple of `usize::MAX`; an array of a megabyte would be a shape of megabytes).
const MAX_TUPLE: usize = 1024;

/// The shape of `T`, or `Shape::Opaque(written)` when its `Deserialize` cannot be traced (it
/// uses `deserialize_any`, as `serde_json::Value`, untagged and internally tagged enums and
/// `#[serde(flatten)]` do, or it refuses every made-up value).
pub fn trace<T: DeserializeOwned>(written: &str) -> Shape {
    traced::<T>().unwrap_or_else(|why| {
        tracing::warn!(
            r#type = written,
            %why,
            "this type's shape cannot be traced: it is compared by its text (docs/compatibility.md)"
        );
        Shape::Opaque(written.to_owned())
    })
}

fn traced<T: DeserializeOwned>() -> Result<Shape, Error> {
    let mut state = State::default();
    let mut shape = None;
    let mut runs = 0;
    loop {
        runs += 1;
        if runs > MAX_RUNS {
            return Err(Error::Unsupported("too many runs".to_owned()));
        }
        state.begin(Vec::new(), None);
        let mut slot = Shape::Unit;
        match T::deserialize(Tracer::new(&mut state, &mut slot)) {
            Ok(_) => shape = Some(slot),
            Err(Error::Restart) => {
                if let Some((path, cut)) = state.cut.take() {
                    state.cuts.insert(path, cut);
                }
                continue;
            }
            // A made-up value refused: the next candidate at that place, and the run again.
            Err(Error::Custom(_)) if state.next_candidate() => {
                state.forgive_picks();
                continue;
            }
            Err(e @ Error::Unsupported(_)) => return Err(e),
            Err(e) if state.picks.is_empty() => return Err(e),
            Err(_) => {}
        }
        if shape.is_some() && state.complete() {
            break;
        }
    }
    let mut shape = shape.ok_or_else(|| Error::Unsupported("no run completed".to_owned()))?;
    // One run per field of each struct met, with that field left out; one with a field more.
    for (key, prefix, fields) in state.structs.clone() {
        for (n, field) in fields.iter().enumerate() {
            state.begin(prefix.clone(), Some((key.clone(), Probe::Omit(n))));
            let mut slot = Shape::Unit;
            let omitted = T::deserialize(Tracer::new(&mut state, &mut slot)).is_ok();
            state
                .optional
                .insert((key.clone(), (*field).to_owned()), omitted);
        }
        state.begin(prefix.clone(), Some((key.clone(), Probe::Extra)));
        let mut slot = Shape::Unit;
        let refused = T::deserialize(Tracer::new(&mut state, &mut slot)).is_err();
        state.closed.insert(key, refused);
    }
    finish(&mut shape, &state, &mut Vec::new())?;
    Ok(shape)
}

/// Replaces the keys the runs wrote (`name\0fields`) by names, fills in each enum's variants
/// and each field's `optional`.
fn finish(shape: &mut Shape, state: &State, open: &mut Vec<String>) -> Result<(), Error> {
    match shape {
        Shape::Option(inner) | Shape::Seq(inner) => finish(inner, state, open)?,
        Shape::Map(key, value) => {
            finish(key, state, open)?;
            finish(value, state, open)?;
        }
        Shape::Tuple(items) => {
            for item in items {
                finish(item, state, open)?;
            }
        }
        Shape::Struct {
            name,
            fields,
            closed,
        } => {
            let key = std::mem::take(name);
            *name = display_name(&key).to_owned();
            *closed = state.closed.get(&key).copied().unwrap_or(false);
            for field in fields.iter_mut() {
                field.optional = state
                    .optional
                    .get(&(key.clone(), field.name.clone()))
                    .copied()
                    .unwrap_or(false);
                finish(&mut field.shape, state, open)?;
            }
        }
        Shape::Enum { name, variants } => {
            let key = std::mem::take(name);
            *name = display_name(&key).to_owned();
            if open.contains(&key) {
                if let Some(e) = ambiguous(open, &key, display_name(&key)) {
                    return Err(e);
                }
                *shape = Shape::Recursive(display_name(&key).to_owned());
                return Ok(());
            }
            let seen = state.variants.get(&key).ok_or(Error::Restart)?;
            open.push(key.clone());
            for (variant, content) in state.names[&key].iter().zip(seen) {
                let mut content = content
                    .clone()
                    .ok_or_else(|| Error::Unsupported(format!("variant {variant} unseen")))?;
                match &mut content {
                    Content::Unit => {}
                    Content::Newtype(inner) => finish(inner, state, open)?,
                    Content::Tuple(items) => {
                        for item in items {
                            finish(item, state, open)?;
                        }
                    }
                    Content::Struct(fields) => {
                        let variant_key = variant_key(&key, variant);
                        for field in fields {
                            field.optional = state
                                .optional
                                .get(&(variant_key.clone(), field.name.clone()))
                                .copied()
                                .unwrap_or(false);
                            finish(&mut field.shape, state, open)?;
                        }
                    }
                }
                variants.push(Variant {
                    name: (*variant).to_owned(),
                    content,
                });
            }
            open.pop();
        }
        _ => {}
    }
    Ok(())
}

/// `Some` error when a type opened inside `key` (in `open`, outermost first) has the display
/// name `name` too: `rec name` names the innermost one.
fn ambiguous(open: &[String], key: &str, name: &str) -> Option<Error> {
    let at = open.iter().position(|k| k == key)?;
    open[at + 1..]
        .iter()
        .any(|k| display_name(k) == name)
        .then(|| {
            Error::Unsupported(format!(
                "{name} comes round inside another type named {name}"
            ))
        })
}

fn display_name(key: &str) -> &str {
    key.split('\0').next().unwrap_or(key)
}

/// A struct's or enum's key: its serde name first (`display_name`), then its Rust type and
/// its fields or variants.
fn container_key<V>(name: &str, parts: &[&str]) -> String {
    format!(
        "{name}\0{}\0{}",
        std::any::type_name::<V>(),
        parts.join(",")
    )
}

/// The key of a struct variant, as a struct for the probes.
fn variant_key(enum_key: &str, variant: &str) -> String {
    format!("{enum_key}\0{variant}")
}

/// What the runs have learnt so far, and the state of the current run.
#[derive(Default)]
struct State {
    /// Enum key -> which variants were traced to the end, and how often each was picked.
    progress: HashMap<String, (Vec<bool>, Vec<u32>)>,
    /// Enum key -> what each variant carries, once seen.
    variants: HashMap<String, Vec<Option<Content>>>,
    /// Enum key -> its variant names.
    names: HashMap<String, &'static [&'static str]>,
    /// Keys of the structs and enums open in this run.
    stack: Vec<String>,
    /// Keys of the newtype and tuple structs open in this run, with how many structs and enums
    /// were open then: they have no name on the wire, so one that comes round again with no
    /// struct or enum opened since cannot be cut as `rec Name`.
    wrappers: Vec<(String, usize)>,
    /// Where this run is, as field names: where an `Option` or a map is cut. Kept as a list
    /// (`Place`): a field renamed `"x/y"` is not the field `y` of the field `x`.
    path: Place,
    /// Places read as absent, and the shape written there.
    cuts: HashMap<Place, Shape>,
    /// A cut found in this run: the run restarts with it.
    cut: Option<(Place, Shape)>,
    /// The variants picked in this run, in order, and the keys of their enums.
    picks: Vec<usize>,
    picked: Vec<String>,
    /// The variants open in this run, outermost first.
    choices: Vec<(String, usize)>,
    /// (enum key, variant) -> the enums met under that variant, in any run.
    reaches: HashMap<(String, usize), Vec<String>>,
    /// Place -> which of its candidates the leaf there hands out.
    candidate: HashMap<Place, usize>,
    /// The last leaf handed out in this run: its place and how many candidates it has.
    last_leaf: Option<(Place, usize)>,
    /// Struct key -> the names in its field list that are aliases (`#[serde(alias)]`, listed
    /// among the fields): found when handing out both names made a duplicate field.
    aliases: HashMap<String, Vec<usize>>,
    /// The last field name handed to a struct in this run: its key and index.
    fed: Option<(String, usize)>,
    /// Picks to make first (to reach a struct again for a probe).
    replay: Vec<usize>,
    /// Every struct met: key, the picks that led to it, its fields.
    structs: Vec<(String, Vec<usize>, &'static [&'static str])>,
    /// This run changes the first struct with this key.
    probe: Option<(String, Probe)>,
    /// (struct key, field) -> whether the struct decoded without it.
    optional: HashMap<(String, String), bool>,
    /// Struct key -> whether it refused a field more.
    closed: HashMap<String, bool>,
}

/// A place in a value: the field names, item and variant markers that lead to it.
type Place = Vec<String>;

/// How a probe run changes a struct.
#[derive(Clone, Copy)]
enum Probe {
    /// Leaves this field out.
    Omit(usize),
    /// Adds a field it does not have.
    Extra,
}

/// The field a probe adds: no struct has it.
const EXTRA_FIELD: &str = "__cluster_shape_probe";

impl State {
    fn begin(&mut self, replay: Vec<usize>, probe: Option<(String, Probe)>) {
        self.stack.clear();
        self.wrappers.clear();
        self.path.clear();
        self.cut = None;
        self.picks.clear();
        self.picked.clear();
        self.choices.clear();
        self.last_leaf = None;
        self.fed = None;
        self.replay = replay;
        self.probe = probe;
    }

    /// Whether every variant of every enum met has been traced.
    fn complete(&self) -> bool {
        self.progress
            .values()
            .all(|(done, _)| done.iter().all(|d| *d))
    }

    /// Enters a newtype or tuple struct: refused if it is already open (it contains itself with
    /// no named struct or enum between) or the value nests too deep.
    fn wrapper_entered<V>(&mut self, name: &str) -> Result<(), Error> {
        let key = container_key::<V>(name, &[]);
        let named = self.stack.len();
        if self
            .wrappers
            .iter()
            .any(|(k, at)| *k == key && *at == named)
        {
            return Err(Error::Unsupported(format!(
                "{name} contains itself through newtype or tuple structs, which have no name on the wire"
            )));
        }
        self.deeper(name)?;
        self.wrappers.push((key, named));
        Ok(())
    }

    /// Refuses to open one more container past `MAX_DEPTH`.
    fn deeper(&self, name: &str) -> Result<(), Error> {
        if self.stack.len() + self.wrappers.len() >= MAX_DEPTH {
            return Err(Error::Unsupported(format!(
                "{name} nests deeper than {MAX_DEPTH}"
            )));
        }
        Ok(())
    }

    /// The struct or enum `key` comes round again: cut there as `rec name`, unless a type
    /// opened inside it has the same name, where `rec name` would name the wrong one.
    fn came_round(&self, key: &str, name: &str) -> Error {
        ambiguous(&self.stack, key, name).unwrap_or(Error::Recursion(name.to_owned()))
    }

    fn aliases_of(&self, key: &str) -> Vec<usize> {
        self.aliases.get(key).cloned().unwrap_or_default()
    }

    /// A struct refused the last name handed to it as a duplicate of `field` (the field's own
    /// name, as serde says it): that name is an alias of a field already given, and the run
    /// starts again without it. serde lists a field's names in alphabetical order, so the name
    /// kept is the field's own only if no alias sorts before it; when one does, the shape
    /// would carry the alias, and the type is not traced.
    fn alias_found<V>(&mut self, value: Result<V, Error>, names: &[&str]) -> Result<V, Error> {
        match value {
            Err(Error::Duplicate(field)) => {
                let (key, n) = self.fed.take().ok_or(Error::Duplicate(field))?;
                if names.get(n) == Some(&field) {
                    return Err(Error::Unsupported(format!(
                        "field `{field}` has an alias that sorts before it"
                    )));
                }
                self.aliases.entry(key).or_default().push(n);
                Err(Error::Restart)
            }
            value => value,
        }
    }

    /// Notes a struct (or struct variant) met, for the probes, and says how this run changes
    /// it: the field to leave out, and whether to add one.
    fn fields_met(&mut self, key: &str, fields: &'static [&'static str]) -> (Option<usize>, bool) {
        if !self.structs.iter().any(|(k, ..)| k == key) {
            self.structs
                .push((key.to_owned(), self.picks.clone(), fields));
        }
        match &self.probe {
            // Only the first one met in the run.
            Some((probed, probe)) if probed == key => {
                let probe = *probe;
                self.probe = None;
                match probe {
                    Probe::Omit(n) => (Some(n), false),
                    Probe::Extra => (None, true),
                }
            }
            _ => (None, false),
        }
    }

    /// Whether an enum not yet complete was met under this variant.
    fn leads_on(&self, key: &str, variant: usize) -> bool {
        self.reaches
            .get(&(key.to_owned(), variant))
            .is_some_and(|met| {
                met.iter().any(|k| {
                    self.progress
                        .get(k)
                        .is_some_and(|(done, _)| !done.iter().all(|d| *d))
                })
            })
    }

    /// The variant to hand out for this enum in this run.
    fn pick(&mut self, key: &str, on_stack: bool) -> Result<usize, Error> {
        let turn = self.picks.len();
        let count = self.progress.get(key).map_or(0, |(done, _)| done.len());
        let onward = (0..count).find(|&v| self.leads_on(key, v));
        let (done, attempts) = self.progress.get_mut(key).ok_or(Error::Restart)?;
        let pick = if let Some(&replayed) = self.replay.get(turn) {
            replayed
        } else if let Some(first_done) = done.iter().position(|d| *d).filter(|_| on_stack) {
            // Inside itself: a variant known to end, so the value ends.
            first_done
        } else if let Some(next) = (0..done.len())
            .filter(|&n| !done[n])
            .min_by_key(|&n| attempts[n])
        {
            if attempts[next] >= MAX_ATTEMPTS {
                return Err(Error::Unsupported(format!(
                    "variant {next} of {} refuses every value made up for it",
                    display_name(key)
                )));
            }
            next
        } else {
            // All seen: the way to an enum that is not, if any.
            onward.unwrap_or(0)
        };
        attempts[pick] += 1;
        self.picks.push(pick);
        self.picked.push(key.to_owned());
        Ok(pick)
    }

    /// Notes that the enum `key` was met under every variant open in this run.
    fn met(&mut self, key: &str) {
        for choice in &self.choices {
            let met = self.reaches.entry(choice.clone()).or_default();
            if !met.iter().any(|k| k == key) {
                met.push(key.to_owned());
            }
        }
    }

    /// A run refused a made-up value: its picks do not count as failed attempts.
    fn forgive_picks(&mut self) {
        for (key, pick) in self.picked.iter().zip(&self.picks) {
            if let Some((_, attempts)) = self.progress.get_mut(key) {
                attempts[*pick] = attempts[*pick].saturating_sub(1);
            }
        }
    }

    /// Which of `count` candidates the leaf here hands out; remembered as the run's last leaf.
    fn candidate(&mut self, count: usize) -> usize {
        let here = self.here();
        let n = self
            .candidate
            .get(&here)
            .copied()
            .unwrap_or(0)
            .min(count - 1);
        self.last_leaf = Some((here, count));
        n
    }

    /// Moves the last leaf of this run to its next candidate; false when it had no more.
    fn next_candidate(&mut self) -> bool {
        let Some((place, count)) = self.last_leaf.take() else {
            return false;
        };
        let n = self.candidate.entry(place).or_insert(0);
        if *n + 1 < count {
            *n += 1;
            true
        } else {
            false
        }
    }

    fn here(&self) -> Place {
        self.path.clone()
    }
}

/// Why a run stopped.
#[derive(Debug)]
enum Error {
    /// The struct of this name is already open: the caller cuts here.
    Recursion(String),
    /// A cut was found; the run starts again with it.
    Restart,
    /// The type cannot be traced.
    Unsupported(String),
    /// The type refused a made-up value.
    Custom(String),
    /// A struct was handed this field twice (one of the names given is an alias).
    Duplicate(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Recursion(name) => write!(f, "{name} comes round again"),
            Error::Restart => f.write_str("a cut was found"),
            Error::Duplicate(field) => write!(f, "field `{field}` was given twice"),
            Error::Unsupported(what) | Error::Custom(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error::Custom(msg.to_string())
    }

    fn duplicate_field(field: &'static str) -> Self {
        Error::Duplicate(field)
    }
}

/// The deserializer of one value, writing its shape to `out`.
struct Tracer<'s> {
    state: &'s mut State,
    out: &'s mut Shape,
}

impl<'s> Tracer<'s> {
    fn new(state: &'s mut State, out: &'s mut Shape) -> Self {
        Self { state, out }
    }

    fn leaf<V>(self, shape: Shape, value: Result<V, Error>) -> Result<V, Error> {
        *self.out = shape;
        value
    }
}

/// What a leaf hands out, in turn, each time the type refused the one before (see
/// `State::candidate`): 1 before 0 (a `NonZero`, a day of the year), then text that common
/// types parse (dates and times of chrono, a UUID, addresses, a URL), then byte lengths of
/// UUIDs, addresses and keys.
mod candidates {
    pub(super) const BOOLS: [bool; 2] = [false, true];
    pub(super) const CHARS: [char; 2] = ['a', '0'];
    pub(super) const STRS: [&str; 12] = [
        "",
        "1970-01-01T00:00:00Z",
        "1970-01-01T00:00:00",
        "1970-01-01",
        "00:00:00",
        "00000000-0000-0000-0000-000000000000",
        "127.0.0.1",
        "127.0.0.1:1",
        "http://localhost/",
        "1",
        "a",
        "1s",
    ];
    pub(super) const BYTES: [&[u8]; 6] = [&[], &[0; 16], &[0; 4], &[0; 8], &[0; 32], &[0; 64]];
}

macro_rules! primitive {
    ($($method:ident => $shape:expr, $visit:ident($values:expr, $ty:ty);)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
                let values: &[$ty] = &$values;
                let n = self.state.candidate(values.len());
                let value = visitor.$visit(values[n].into());
                self.leaf($shape, value)
            }
        )*
    };
}

impl<'de> de::Deserializer<'de> for Tracer<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
        Err(Error::Unsupported("deserialize_any".to_owned()))
    }

    primitive! {
        deserialize_bool => Shape::Bool, visit_bool(candidates::BOOLS, bool);
        deserialize_i8 => Shape::Int(8), visit_i8([1, 0], i8);
        deserialize_i16 => Shape::Int(16), visit_i16([1, 0], i16);
        deserialize_i32 => Shape::Int(32), visit_i32([1, 0], i32);
        deserialize_i64 => Shape::Int(64), visit_i64([1, 0], i64);
        deserialize_i128 => Shape::Int(128), visit_i128([1, 0], i128);
        deserialize_u8 => Shape::Uint(8), visit_u8([1, 0], u8);
        deserialize_u16 => Shape::Uint(16), visit_u16([1, 0], u16);
        deserialize_u32 => Shape::Uint(32), visit_u32([1, 0], u32);
        deserialize_u64 => Shape::Uint(64), visit_u64([1, 0], u64);
        deserialize_u128 => Shape::Uint(128), visit_u128([1, 0], u128);
        deserialize_f32 => Shape::Float(32), visit_f32([1.0, 0.0], f32);
        deserialize_f64 => Shape::Float(64), visit_f64([1.0, 0.0], f64);
        deserialize_char => Shape::Char, visit_char(candidates::CHARS, char);
        deserialize_str => Shape::Str, visit_string(candidates::STRS, &str);
        deserialize_string => Shape::Str, visit_string(candidates::STRS, &str);
        deserialize_bytes => Shape::Bytes, visit_byte_buf(candidates::BYTES, &[u8]);
        deserialize_byte_buf => Shape::Bytes, visit_byte_buf(candidates::BYTES, &[u8]);
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let value = visitor.visit_unit();
        self.leaf(Shape::Unit, value)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
        Err(Error::Unsupported("deserialize_identifier".to_owned()))
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        let value = visitor.visit_unit();
        self.leaf(Shape::Unit, value)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        // The codec writes a newtype as what it wraps.
        let Tracer { state, out } = self;
        state.wrapper_entered::<V::Value>(name)?;
        let value = visitor.visit_newtype_struct(Tracer::new(&mut *state, out));
        state.wrappers.pop();
        value
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let here = self.state.here();
        if let Some(cut) = self.state.cuts.get(&here) {
            *self.out = cut.clone();
            return visitor.visit_none();
        }
        let mut inner = Shape::Unit;
        match visitor.visit_some(Tracer::new(self.state, &mut inner)) {
            Err(Error::Recursion(name)) => {
                let cut = Shape::Option(Box::new(Shape::Recursive(name)));
                self.state.cut = Some((here, cut));
                Err(Error::Restart)
            }
            value => {
                *self.out = Shape::Option(Box::new(inner));
                value
            }
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let mut item = Shape::Unit;
        let value = visitor.visit_seq(One {
            state: self.state,
            item: &mut item,
            left: true,
        });
        *self.out = Shape::Seq(Box::new(item));
        value
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, Error> {
        if len > MAX_TUPLE {
            return Err(Error::Unsupported(format!("a tuple of {len} items")));
        }
        let mut items = vec![Shape::Unit; len];
        let value = visitor.visit_seq(Items {
            state: self.state,
            items: &mut items,
            next: 0,
        });
        *self.out = Shape::Tuple(items);
        value
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        let Tracer { state, out } = self;
        state.wrapper_entered::<V::Value>(name)?;
        let value = Tracer::new(&mut *state, out).deserialize_tuple(len, visitor);
        state.wrappers.pop();
        value
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let here = self.state.here();
        if let Some(cut) = self.state.cuts.get(&here) {
            *self.out = cut.clone();
            return visitor.visit_map(Entry {
                state: self.state,
                key: &mut Shape::Unit,
                value: &mut Shape::Unit,
                left: false,
                here,
            });
        }
        let (mut key, mut value) = (Shape::Unit, Shape::Unit);
        let read = visitor.visit_map(Entry {
            state: self.state,
            key: &mut key,
            value: &mut value,
            left: true,
            here,
        });
        *self.out = Shape::Map(Box::new(key), Box::new(value));
        read
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let key = container_key::<V::Value>(name, fields);
        if self.state.stack.contains(&key) {
            return Err(self.state.came_round(&key, name));
        }
        self.state.deeper(name)?;
        let (omit, extra) = self.state.fields_met(&key, fields);
        self.state.stack.push(key.clone());
        let mut shapes = vec![Shape::Unit; fields.len()];
        let aliases = self.state.aliases_of(&key);
        let value = visitor.visit_map(Fields {
            state: &mut *self.state,
            key: key.clone(),
            aliases: aliases.clone(),
            names: fields,
            shapes: &mut shapes,
            next: 0,
            omit,
            extra,
        });
        self.state.stack.pop();
        let value = self.state.alias_found(value, fields)?;
        *self.out = Shape::Struct {
            name: key,
            fields: fields_of(fields, shapes, &aliases),
            closed: false,
        };
        Ok(value)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        if variants.is_empty() {
            return Err(Error::Unsupported(format!("enum {name} has no variant")));
        }
        let key = container_key::<V::Value>(name, variants);
        let on_stack = self.state.stack.contains(&key);
        if on_stack && let Some(e) = ambiguous(&self.state.stack, &key, name) {
            return Err(e);
        }
        self.state.deeper(name)?;
        self.state
            .progress
            .entry(key.clone())
            .or_insert_with(|| (vec![false; variants.len()], vec![0; variants.len()]));
        self.state
            .variants
            .entry(key.clone())
            .or_insert_with(|| vec![None; variants.len()]);
        self.state.names.insert(key.clone(), variants);
        self.state.met(&key);
        let pick = self.state.pick(&key, on_stack)?;
        self.state.stack.push(key.clone());
        self.state.choices.push((key.clone(), pick));
        let value = visitor.visit_enum(Choice {
            state: &mut *self.state,
            key: key.clone(),
            name: variants[pick],
            pick,
        });
        self.state.choices.pop();
        self.state.stack.pop();
        *self.out = if on_stack {
            Shape::Recursive(name.to_owned())
        } else {
            // Filled in from `State::variants` once every variant has been seen.
            Shape::Enum {
                name: key,
                variants: Vec::new(),
            }
        };
        value
    }

    fn is_human_readable(&self) -> bool {
        // As the codec: rmp-serde's default configuration is not human-readable.
        false
    }
}

fn fields_of(names: &[&str], shapes: Vec<Shape>, aliases: &[usize]) -> Vec<Field> {
    names
        .iter()
        .zip(shapes)
        .enumerate()
        .filter(|(n, _)| !aliases.contains(n))
        .map(|(_, (name, shape))| Field {
            name: (*name).to_owned(),
            shape,
            optional: false,
        })
        .collect()
}

/// Traces one value at `place` in the path.
fn traced_at<'de, T: DeserializeSeed<'de>>(
    state: &mut State,
    place: &str,
    out: &mut Shape,
    seed: T,
) -> Result<T::Value, Error> {
    state.path.push(place.to_owned());
    let value = seed.deserialize(Tracer::new(state, out));
    state.path.pop();
    value
}

/// A sequence of one item, or none where the item's type comes round again.
struct One<'s> {
    state: &'s mut State,
    item: &'s mut Shape,
    left: bool,
}

impl<'de> de::SeqAccess<'de> for One<'_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        if !std::mem::take(&mut self.left) {
            return Ok(None);
        }
        match traced_at(self.state, "[]", self.item, seed) {
            Ok(value) => Ok(Some(value)),
            Err(Error::Recursion(name)) => {
                *self.item = Shape::Recursive(name);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// The items of a tuple, each traced.
struct Items<'s> {
    state: &'s mut State,
    items: &'s mut [Shape],
    next: usize,
}

impl<'de> de::SeqAccess<'de> for Items<'_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let n = self.next;
        let Some(item) = self.items.get_mut(n) else {
            return Ok(None);
        };
        self.next += 1;
        traced_at(self.state, &n.to_string(), item, seed).map(Some)
    }
}

/// A map of one entry, or none where the value's type comes round again.
struct Entry<'s> {
    state: &'s mut State,
    key: &'s mut Shape,
    value: &'s mut Shape,
    left: bool,
    here: Place,
}

impl<'de> de::MapAccess<'de> for Entry<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        if !std::mem::take(&mut self.left) {
            return Ok(None);
        }
        traced_at(self.state, "{key}", self.key, seed).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        match traced_at(self.state, "{value}", self.value, seed) {
            Err(Error::Recursion(name)) => {
                let cut = Shape::Map(Box::new(self.key.clone()), Box::new(Shape::Recursive(name)));
                self.state.cut = Some((self.here.clone(), cut));
                Err(Error::Restart)
            }
            value => value,
        }
    }
}

/// The fields of a struct, by name, maybe less one or plus one for a probe.
struct Fields<'s> {
    state: &'s mut State,
    /// The struct's key, and the names in `names` that are aliases of another field.
    key: String,
    aliases: Vec<usize>,
    names: &'static [&'static str],
    shapes: &'s mut [Shape],
    next: usize,
    omit: Option<usize>,
    extra: bool,
}

impl<'de> de::MapAccess<'de> for Fields<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        while Some(self.next) == self.omit || self.aliases.contains(&self.next) {
            self.next += 1;
        }
        self.state.fed = Some((self.key.clone(), self.next));
        let name = match self.names.get(self.next) {
            Some(name) => *name,
            None if self.next == self.names.len() && self.extra => EXTRA_FIELD,
            None => return Ok(None),
        };
        seed.deserialize(name.into_deserializer()).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let n = self.next;
        self.next += 1;
        let mut ignored = Shape::Unit;
        match (self.names.get(n), self.shapes.get_mut(n)) {
            (Some(name), Some(out)) => traced_at(self.state, name, out, seed),
            _ => traced_at(self.state, EXTRA_FIELD, &mut ignored, seed),
        }
    }
}

/// One variant handed to an enum's visitor.
struct Choice<'s> {
    state: &'s mut State,
    key: String,
    name: &'static str,
    pick: usize,
}

impl Choice<'_> {
    /// The variant was traced to the end: what it carries is known.
    fn seen(self, content: Content) {
        if let Some(slot) = self
            .state
            .variants
            .get_mut(&self.key)
            .and_then(|v| v.get_mut(self.pick))
            && slot.is_none()
        {
            *slot = Some(content);
        }
        if let Some((done, _)) = self.state.progress.get_mut(&self.key) {
            done[self.pick] = true;
        }
    }
}

impl<'de, 's> de::EnumAccess<'de> for Choice<'s> {
    type Error = Error;
    type Variant = Choice<'s>;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), Error> {
        let value = seed.deserialize(self.name.into_deserializer())?;
        Ok((value, self))
    }
}

impl<'de> de::VariantAccess<'de> for Choice<'_> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        self.seen(Content::Unit);
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        let mut inner = Shape::Unit;
        let value = traced_at(self.state, self.name, &mut inner, seed)?;
        self.seen(Content::Newtype(inner));
        Ok(value)
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, Error> {
        let mut items = vec![Shape::Unit; len];
        self.state.path.push(self.name.to_owned());
        let value = visitor.visit_seq(Items {
            state: &mut *self.state,
            items: &mut items,
            next: 0,
        });
        self.state.path.pop();
        let value = value?;
        self.seen(Content::Tuple(items));
        Ok(value)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let mut shapes = vec![Shape::Unit; fields.len()];
        let key = variant_key(&self.key, self.name);
        let (omit, extra) = self.state.fields_met(&key, fields);
        let aliases = self.state.aliases_of(&key);
        self.state.path.push(self.name.to_owned());
        let value = visitor.visit_map(Fields {
            state: &mut *self.state,
            key,
            aliases: aliases.clone(),
            names: fields,
            shapes: &mut shapes,
            next: 0,
            omit,
            extra,
        });
        self.state.path.pop();
        let value = self.state.alias_found(value, fields)?;
        self.seen(Content::Struct(fields_of(fields, shapes, &aliases)));
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde::Deserialize;

    use super::super::Shape;
    use super::trace;

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Hit {
        id: u64,
        title: String,
        score: Option<f32>,
        #[serde(default)]
        tags: Vec<String>,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    enum Color {
        Red,
        Rgb(u8, u8, u8),
        Named { name: String },
        Hit(Box<Hit>),
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Node {
        value: u32,
        children: Vec<Node>,
        next: Option<Box<Node>>,
        by_name: HashMap<String, Node>,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    enum List {
        Cons(u8, Box<List>),
        Nil,
    }

    #[test]
    fn a_struct_is_its_fields_and_probing_finds_the_optional_ones() {
        assert_eq!(
            trace::<Hit>("Hit").to_string(),
            "{id: u64, title: str, score?: option<f32>, tags?: [str]}"
        );
    }

    #[test]
    fn a_struct_that_denies_unknown_fields_is_closed() {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Strict {
            id: u64,
        }
        assert_eq!(trace::<Strict>("Strict").to_string(), "{id: u64}!");
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct Wider {
            id: u64,
            extra: Option<u8>,
        }
        let mismatch = super::super::readable(&trace::<Wider>("W"), &trace::<Strict>("S"));
        assert_eq!(
            mismatch.unwrap_err().to_string(),
            "field `extra`: the client has option<u8>, the provider none, and it denies unknown fields"
        );
    }

    #[test]
    fn an_alias_has_the_shape_of_what_it_names() {
        type Tags = HashMap<String, u64>;
        assert_eq!(
            trace::<Tags>("Tags"),
            trace::<HashMap<String, u64>>("HashMap<String, u64>")
        );
        assert_eq!(trace::<Tags>("Tags").to_string(), "map<str, u64>");
    }

    #[test]
    fn every_variant_of_an_enum_is_traced() {
        assert_eq!(
            trace::<(Color, Result<u8, String>)>("x").to_string(),
            "(enum{Red, Rgb(u8, u8, u8), Named{name: str}, \
             Hit({id: u64, title: str, score?: option<f32>, tags?: [str]})}, \
             enum{Ok(u8), Err(str)})"
        );
    }

    #[test]
    fn recursive_types_are_cut_where_they_come_round() {
        assert_eq!(
            trace::<Node>("Node").to_string(),
            "{value: u32, children: [rec Node], next?: option<rec Node>, \
             by_name: map<str, rec Node>}"
        );
        assert_eq!(
            trace::<List>("List").to_string(),
            "enum{Cons(u8, rec List), Nil}"
        );
    }

    #[test]
    fn a_type_read_through_deserialize_any_is_opaque() {
        #[derive(Deserialize)]
        #[serde(untagged)]
        #[allow(dead_code)]
        enum Loose {
            A(u8),
            B(String),
        }
        assert_eq!(trace::<Loose>("Loose"), Shape::Opaque("Loose".to_owned()));
    }
}
