//! A call of `service.function` by name, with JSON, through the ordinary call path: what
//! `cluster call` and the discovery gateway's function routes share.
//!
//! 1. [`Functions::find`]: the function in the newest description the registry holds for the
//!    service (within a version requirement), the description the call is then made as: its
//!    requirement, its options as the client's declared layer, its shape for the providers'
//!    compatibility check. Providers of versions that cannot serve each other's clients are
//!    an error unless a requirement chooses.
//! 2. [`Found::arguments`]: the JSON arguments checked and encoded by that function's shape
//!    (`shaped.rs`): a mistake is said here, nothing is sent.
//! 3. [`Found::call`]: `Client::call_plain`, so retries, budget, re-resolution and
//!    at-most-once are the call path's, as from code.
//! 4. [`Found::answer`]: the answer given its shape back, and a function returning `Result`
//!    split into its `Ok` and its `Err`.
//!
//! A [`Client`] takes a `&'static` description (a generated client's is a `static`): the
//! descriptions found here are kept for the life of the process, one per service and version,
//! at most [`MAX_DESCRIPTIONS`] of them, so that calls by name do not grow memory without end.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::sync::Mutex;

use semver::{Version, VersionReq};
use serde_json::Value as Json;

use super::{Wire, arguments, from_wire};
use crate::service::shape::{Content, Shape};
use crate::{Call, Client, FunctionDescription, Node, ServiceDescription};

/// The most descriptions [`Functions`] keeps (each distinct description once: two builds of
/// one version that differ are two): past it, a function of a description not kept yet is
/// [`FindError::TooManyDescriptions`].
pub const MAX_DESCRIPTIONS: usize = 4096;

/// Finds functions by name in a node's registry, and keeps a client for each description.
pub struct Functions {
    node: Node,
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    /// Per service and version, every description seen under it: two builds of one version
    /// may differ (a rolling deploy of a build that adds parameter names), and a lookup may
    /// find either first, so each is kept once rather than replaced, and leaked again, on
    /// every alternation.
    clients: HashMap<(String, Version), Vec<(&'static ServiceDescription, Client)>>,
    leaked: usize,
}

impl fmt::Debug for Functions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Functions")
            .field("node", &self.node.name())
            .finish_non_exhaustive()
    }
}

/// A function found by [`Functions::find`], ready to be called.
#[derive(Debug, Clone)]
pub struct Found {
    client: Client,
    description: &'static ServiceDescription,
    index: usize,
}

/// Why [`Functions::find`] found no function to call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FindError {
    /// No entry of the service in the registry.
    NoService {
        /// The service asked for.
        service: String,
        /// A known service of a near name.
        near: Option<String>,
    },
    /// Providers exist, none within the requirement.
    NoVersion {
        /// The service asked for.
        service: String,
        /// The requirement given.
        requirement: String,
        /// The versions the registry has.
        versions: Vec<String>,
    },
    /// Providers of versions that cannot serve each other's clients, and no requirement.
    Incompatible {
        /// The service asked for.
        service: String,
        /// The versions, newest first.
        versions: Vec<String>,
    },
    /// No such function in the newest description.
    NoFunction {
        /// The service asked for.
        service: String,
        /// The newest version.
        version: String,
        /// The function asked for.
        function: String,
        /// The functions it has.
        functions: Vec<String>,
    },
    /// [`MAX_DESCRIPTIONS`] are kept already.
    TooManyDescriptions,
}

impl fmt::Display for FindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoService { service, near } => {
                write!(f, "no service `{service}` in the registry")?;
                match near {
                    Some(near) => write!(f, "; did you mean \"{near}\"?"),
                    None => Ok(()),
                }
            }
            Self::NoVersion {
                service,
                requirement,
                versions,
            } => write!(
                f,
                "no provider of `{service}` in a version within {requirement}: the registry has {}",
                versions.join(", ")
            ),
            Self::Incompatible { service, versions } => write!(
                f,
                "`{service}` has providers of versions that cannot serve each other's clients ({})",
                versions.join(", ")
            ),
            Self::NoFunction {
                service,
                version,
                function,
                functions,
            } => write!(
                f,
                "`{service}` {version} has no function `{function}`; it has: {}",
                functions.join(", ")
            ),
            Self::TooManyDescriptions => write!(
                f,
                "{MAX_DESCRIPTIONS} descriptions are kept already; no client for another"
            ),
        }
    }
}

impl std::error::Error for FindError {}

impl Functions {
    /// Functions of the services in `node`'s registry, called through `node`.
    pub fn new(node: &Node) -> Self {
        Self {
            node: node.clone(),
            kept: Mutex::new(Kept::default()),
        }
    }

    /// The node calls go through.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// `service.function` in the newest description within `requirement` (or, without one,
    /// the newest, if every provider can serve its clients).
    pub fn find(
        &self,
        service: &str,
        function: &str,
        requirement: Option<&VersionReq>,
    ) -> Result<Found, FindError> {
        let registry = self.node.registry();
        let entries = registry.lookup(service);
        if entries.is_empty() {
            return Err(FindError::NoService {
                service: service.to_owned(),
                near: registry.local_copy().nearest_service(service),
            });
        }
        let mut candidates: Vec<_> = entries
            .iter()
            .filter(|e| requirement.is_none_or(|r| r.matches(&e.description.version)))
            .collect();
        let versions = |entries: &mut dyn Iterator<Item = &Version>| {
            let mut v: Vec<String> = entries.map(ToString::to_string).collect();
            v.dedup();
            v
        };
        if candidates.is_empty() {
            let mut all: Vec<&Version> = entries.iter().map(|e| &e.description.version).collect();
            all.sort();
            return Err(FindError::NoVersion {
                service: service.to_owned(),
                requirement: requirement.map(ToString::to_string).unwrap_or_default(),
                versions: versions(&mut all.into_iter()),
            });
        }
        candidates.sort_by(|a, b| b.description.version.cmp(&a.description.version));
        // Two majors during a migration: the caller says which, rather than the highest
        // taking every call, with its arguments and metadata.
        if requirement.is_none() {
            let newest = candidates[0].description.requirement();
            if candidates
                .iter()
                .any(|e| !newest.matches(&e.description.version))
            {
                return Err(FindError::Incompatible {
                    service: service.to_owned(),
                    versions: versions(&mut candidates.iter().map(|e| &e.description.version)),
                });
            }
        }
        for entry in &candidates {
            if let Some(index) = entry
                .description
                .functions
                .iter()
                .position(|f| f.name == function)
            {
                let (description, mut client) = self.client(&entry.description)?;
                if let Some(requirement) = requirement {
                    client = client.require(requirement.clone());
                }
                return Ok(Found {
                    client,
                    description,
                    index,
                });
            }
        }
        let newest = &candidates[0].description;
        Err(FindError::NoFunction {
            service: service.to_owned(),
            version: newest.version.to_string(),
            function: function.to_owned(),
            functions: newest.functions.iter().map(|f| f.name.clone()).collect(),
        })
    }

    /// The client kept for `description`, made (and the description kept) the first time.
    fn client(
        &self,
        description: &ServiceDescription,
    ) -> Result<(&'static ServiceDescription, Client), FindError> {
        // A poisoned lock holds a map that is whole (no code panics while changing it).
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let key = (description.name.clone(), description.version.clone());
        if let Some((kept, client)) = kept
            .clients
            .get(&key)
            .and_then(|seen| seen.iter().find(|(d, _)| **d == *description))
        {
            return Ok((kept, client.clone()));
        }
        if kept.leaked >= MAX_DESCRIPTIONS {
            return Err(FindError::TooManyDescriptions);
        }
        kept.leaked += 1;
        let leaked: &'static ServiceDescription = Box::leak(Box::new(description.clone()));
        let client = Client::new(&self.node, leaked);
        kept.clients
            .entry(key)
            .or_default()
            .push((leaked, client.clone()));
        Ok((leaked, client))
    }
}

/// What a call by name answered: the function's value, or its own `Err`.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The function's value (its `Ok` for a function returning `Result`).
    Ok(Wire),
    /// The `Err` a function returning `Result` returned.
    Err(Wire),
}

impl Found {
    /// The function's description.
    pub fn function(&self) -> &'static FunctionDescription {
        &self.description.functions[self.index]
    }

    /// The description it was found in.
    pub fn description(&self) -> &'static ServiceDescription {
        self.description
    }

    /// `args`, checked and encoded by the function's shape; or what is wrong with it. `args`
    /// is a JSON array of one value per argument, or an object by parameter name (for an
    /// entry that names its parameters: [`FunctionDescription::params`]), where a missing
    /// `Option` is `null`.
    pub fn arguments(&self, args: &Json) -> Result<Wire, String> {
        let function = self.function();
        let by_name;
        let args = match args {
            Json::Object(named) => {
                by_name = in_order(function, named)?;
                &by_name
            }
            args => args,
        };
        match &function.shape {
            Some(shape) => arguments(&shape.args, args),
            // An entry from a build before shapes: the JSON goes as it stands, and the provider
            // says whether it reads it.
            None => match args {
                Json::Array(values) if values.len() == function.arity() => Ok(match values.len() {
                    0 => Wire::Nil,
                    _ => Wire::Array(values.iter().map(Wire::from_json).collect()),
                }),
                _ => Err(format!(
                    "the arguments are a JSON array of {} values (one per argument)",
                    function.arity()
                )),
            },
        }
    }

    /// The call, to be given its options and awaited.
    pub fn call(&self, args: &Wire) -> Call<Wire, Infallible> {
        self.client.call_plain::<_, Wire>(self.index, args)
    }

    /// The answer given its shape back, and split into `Ok` and `Err` for a function that
    /// returns `Result`.
    pub fn answer(&self, answer: Wire) -> Answer {
        let function = self.function();
        let answer = match &function.shape {
            Some(shape) => from_wire(&shape.output, answer),
            None => answer,
        };
        match answer {
            Wire::Map(mut entries) if returns_result(function) && entries.len() == 1 => {
                match entries.pop() {
                    Some((Wire::Str(tag), value)) if tag == "Ok" => Answer::Ok(value),
                    Some((Wire::Str(tag), value)) if tag == "Err" => Answer::Err(value),
                    Some(entry) => Answer::Ok(Wire::Map(vec![entry])),
                    None => Answer::Ok(Wire::Map(entries)),
                }
            }
            answer => Answer::Ok(answer),
        }
    }
}

/// An object of arguments by parameter name, as the array of them in order.
fn in_order(
    function: &FunctionDescription,
    named: &serde_json::Map<String, Json>,
) -> Result<Json, String> {
    let params = &function.params;
    if params.is_empty() && function.arity() > 0 {
        return Err(format!(
            "the provider's entry does not name `{}`'s parameters: the arguments are a \
             JSON array, one value per argument",
            function.name
        ));
    }
    if let Some(unknown) = named.keys().find(|k| !params.contains(k)) {
        return Err(format!(
            "`{}` has no parameter `{unknown}`; its parameters are {}",
            function.name,
            params.join(", ")
        ));
    }
    let shapes = function.shape.as_ref().map(|s| &s.args);
    params
        .iter()
        .enumerate()
        .map(|(n, param)| match named.get(param) {
            Some(value) => Ok(value.clone()),
            None if matches!(shapes.and_then(|s| s.get(n)), Some(Shape::Option(_))) => {
                Ok(Json::Null)
            }
            None => Err(format!("the argument `{param}` is missing")),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Json::Array)
}

/// Whether the function returns `Result<T, E>`: its shape is an enum of `Ok` and `Err` (or,
/// in an entry without shapes or with a result the tracer could not follow, its signature
/// says `-> Result<`).
pub fn returns_result(function: &FunctionDescription) -> bool {
    // As `#[service]` reads it: the result's type path ends in `Result` (`Result<…>`,
    // `std::result::Result<…>`, `::core::result::Result<…>`).
    let by_signature = || {
        function.signature.split_once("->").is_some_and(|(_, out)| {
            out.split_once('<')
                .is_some_and(|(path, _)| path.trim().rsplit("::").next() == Some("Result"))
        })
    };
    match function.shape.as_ref().map(|s| &s.output) {
        Some(Shape::Enum { variants, .. }) => {
            variants.len() == 2
                && variants
                    .iter()
                    .any(|v| v.name == "Ok" && matches!(v.content, Content::Newtype(_)))
                && variants
                    .iter()
                    .any(|v| v.name == "Err" && matches!(v.content, Content::Newtype(_)))
        }
        Some(Shape::Opaque(_)) | None => by_signature(),
        Some(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::options::CallOptions;
    use crate::service::shape::FunctionShape;

    fn reserve() -> FunctionDescription {
        FunctionDescription::new(
            "reserve",
            "reserve(String, u32, Option<String>) -> u32",
            true,
            CallOptions::new(),
        )
        .with_params(&["item", "count", "note"])
        .with_shape(FunctionShape::new(
            vec![
                Shape::Str,
                Shape::Uint(32),
                Shape::Option(Box::new(Shape::Str)),
            ],
            Shape::Uint(32),
        ))
    }

    fn named(value: Json) -> serde_json::Map<String, Json> {
        match value {
            Json::Object(map) => map,
            _ => unreachable!("an object"),
        }
    }

    #[test]
    fn arguments_by_name_are_put_in_order_and_a_missing_option_is_null() {
        let f = reserve();
        assert_eq!(
            in_order(&f, &named(json!({"count": 3, "item": "apple"}))),
            Ok(json!(["apple", 3, null]))
        );
        assert_eq!(
            in_order(
                &f,
                &named(json!({"count": 3, "item": "apple", "note": "x"}))
            ),
            Ok(json!(["apple", 3, "x"]))
        );
        assert_eq!(
            in_order(&f, &named(json!({"item": "apple"}))),
            Err("the argument `count` is missing".to_owned())
        );
        let unknown = in_order(&f, &named(json!({"item": "a", "count": 1, "size": 2})));
        assert!(unknown.unwrap_err().contains("no parameter `size`"));
    }

    /// Two builds of one version, one naming its parameters: lookups that find one, then the
    /// other, then the first again keep two descriptions, not one per alternation.
    #[tokio::test]
    async fn two_builds_of_one_version_are_kept_once_each() {
        use std::sync::Arc;

        use crate::registry::{NodeInfo, ServiceEntry};
        use crate::{MemoryNetwork, MemoryRegistry, Registry};

        let registry = MemoryRegistry::new();
        let node = Node::builder()
            .name("caller")
            .memory(&MemoryNetwork::new())
            .registry(registry.clone())
            .start()
            .await
            .unwrap();
        let build = |params: &[&str]| {
            Arc::new(ServiceDescription::new(
                "inventory",
                Version::new(1, 0, 0),
                None,
                CallOptions::new(),
                vec![reserve().with_params(params)],
            ))
        };
        let (new, old) = (build(&["item", "count", "note"]), build(&[]));
        let entry = |name: &str, d: &Arc<ServiceDescription>| {
            ServiceEntry::new(
                NodeInfo::new(name, "127.0.0.1:1".parse().unwrap(), 1),
                d.clone(),
            )
        };
        let functions = Functions::new(&node);
        for (first, second) in [(&new, &old), (&old, &new), (&new, &old)] {
            registry.deregister("a", "inventory").await.unwrap();
            registry.deregister("b", "inventory").await.unwrap();
            registry.register(entry("a", first)).await.unwrap();
            registry.register(entry("b", second)).await.unwrap();
            let found = functions.find("inventory", "reserve", None).unwrap();
            assert_eq!(found.description(), &**first);
        }
        assert_eq!(functions.kept.lock().unwrap().leaked, 2);
        node.shutdown().await;
    }

    #[test]
    fn an_entry_without_names_asks_for_an_array() {
        let mut f = reserve();
        f.params.clear();
        let e = in_order(&f, &named(json!({"item": "a"}))).unwrap_err();
        assert!(e.contains("JSON array"), "{e}");
    }
}
