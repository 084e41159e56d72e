//! What `#[service]`-generated code names. Not a public API: it changes without notice.

pub use std::convert::Infallible;
pub use std::sync::{Arc, LazyLock};
pub use std::time::Duration;

pub use semver::{Version, VersionReq};

pub use crate::client::{Call, Client};
pub use crate::node::Node;
pub use crate::options::CallOptions;
pub use crate::server::{DispatchFuture, Provide, dispatch_with, unknown_function};
pub use crate::service::shape::{FunctionShape, trace};
pub use crate::service::{FunctionDescription, ServiceDescription, version};
