//! A service whose functions take a few kinds of argument and return them as they came, as
//! the same tuple: what a provider decodes, it encodes back, so the reply is a valid argument
//! list for the same function. Shared by the `service_args` target and the seed generator.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A struct argument, with a field a later version added.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    pub id: u64,
    pub title: String,
    pub tags: Vec<String>,
    #[serde(default)]
    pub score: Option<i32>,
}

/// An enum argument: unit, newtype, tuple and struct variants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Shape {
    Empty,
    Named(String),
    Pair(u8, i64),
    Hits { hits: Vec<Hit>, more: bool },
}

#[cluster::service(name = "echo", version = "1.0.0")]
pub trait Echo {
    async fn text(&self, text: String) -> (String,);
    async fn bytes(&self, bytes: Vec<u8>, count: u64) -> (Vec<u8>, u64);
    async fn hit(&self, hit: Hit) -> (Hit,);
    async fn maybe(&self, hit: Option<Hit>, shape: Shape) -> (Option<Hit>, Shape);
    async fn many(
        &self,
        shapes: Vec<Shape>,
        counts: BTreeMap<String, i64>,
        flag: bool,
        letter: char,
    ) -> (Vec<Shape>, BTreeMap<String, i64>, bool, char);
    async fn nothing(&self) -> ();
}

/// Hands every argument back.
pub struct Mirror;

impl Echo for Mirror {
    async fn text(&self, text: String) -> (String,) {
        (text,)
    }
    async fn bytes(&self, bytes: Vec<u8>, count: u64) -> (Vec<u8>, u64) {
        (bytes, count)
    }
    async fn hit(&self, hit: Hit) -> (Hit,) {
        (hit,)
    }
    async fn maybe(&self, hit: Option<Hit>, shape: Shape) -> (Option<Hit>, Shape) {
        (hit, shape)
    }
    async fn many(
        &self,
        shapes: Vec<Shape>,
        counts: BTreeMap<String, i64>,
        flag: bool,
        letter: char,
    ) -> (Vec<Shape>, BTreeMap<String, i64>, bool, char) {
        (shapes, counts, flag, letter)
    }
    async fn nothing(&self) {}
}

/// The number of functions: an index past the last is an unknown function.
pub const FUNCTIONS: usize = 6;
