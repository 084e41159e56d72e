//! A service shared by the example binaries and the multi-process tests.

use serde::{Deserialize, Serialize};

/// What `greet` answers: the greeting and the node that made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Greeting {
    /// The greeting.
    pub text: String,
    /// The node that served it.
    pub node: String,
}

/// A trivial service, enough to see which process answers.
#[cluster::service(
    name = "greeter",
    version = "1.0.0",
    timeout = "2s",
    retry(after = "50ms", budget = "10s")
)]
pub trait Greeter {
    /// Greets `name`; safe to run twice.
    #[call(idempotent)]
    async fn greet(&self, name: String) -> Greeting;
}

/// The provider: greets from its node.
#[derive(Debug)]
pub struct Host {
    /// The node's name.
    pub node: String,
}

impl Greeter for Host {
    async fn greet(&self, name: String) -> Greeting {
        Greeting {
            text: format!("hello, {name}"),
            node: self.node.clone(),
        }
    }
}
